"""A holder's announcement: one signed `HaveRecord` on the run's topic when what it holds changed.

A node that holds other peers' bodies (`fetch.bodies`) says so on the same topic its
pointers travel, as one signed record naming its newest held groups (at most
`records.MAX_HELD_ANNOUNCED`), through the same `GossipGate` (rate, bans, record checks)
as every message. It looks every `have_interval / 4` s and announces when the held set
changed (so fetchers of a publisher that just left learn of it within about a second at
the default), and at least every `have_interval` s while it holds anything (so a peer that
joins late learns of the holders too): at most 4 messages per holder and `have_interval`,
whatever the number of bodies. Nothing is stored in the DHT.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from typing import Callable

from hivemind.dht.node import DHTNode
from hivemind.utils.timed_storage import get_dht_time

from ftis_swarm.config import SwarmConfig
from ftis_swarm.swarm.counters import SwarmCounters
from ftis_swarm.swarm.dht.publishing import Record, sign_records
from ftis_swarm.swarm.gossip.channel import GossipChannel
from ftis_swarm.swarm.keys import pointer_key, window_of
from ftis_swarm.swarm.records import HAVE_SUBKEY_NAME, MAX_HELD_ANNOUNCED, RECORD_VERSION, HaveRecord, make_subkey

logger = logging.getLogger(__name__)


class HaveAnnouncer:
    """Gossips what `held(limit)` (group ids, newest first) says this node holds (see the module docstring)."""

    def __init__(self, *, node: DHTNode, channel: GossipChannel, cfg: SwarmConfig, peer_id: str,
                 public_key: bytes, puzzle: str, held: Callable[[int], list[str]], counters: SwarmCounters):
        self._node, self._channel, self._cfg, self._peer_id = node, channel, cfg, peer_id
        self._public_key, self._puzzle, self._held, self._counters = public_key, puzzle, held, counters

    async def run(self) -> None:
        """Announces until cancelled (see the module docstring); a failed announcement is logged and tried again."""
        step, last, said = self._cfg.holders.have_interval / 4, -math.inf, []
        while True:
            await asyncio.sleep(step)
            held = self._held(MAX_HELD_ANNOUNCED)
            if not held or (held == said and time.monotonic() - last < self._cfg.holders.have_interval):
                continue
            try:
                if await self.announce(held):
                    last, said = time.monotonic(), held
            except Exception:  # signing or p2pd: the next look tries again, fetchers still have the publisher
                logger.exception("announcing the held bodies failed; next try in %.1f s", step)

    async def announce(self, held: list[str]) -> bool:
        """Gossips one have record of `held` (group ids); False when p2pd refused it."""
        cfg, now = self._cfg, get_dht_time()
        window = window_of(now, cfg.records.window)
        have = HaveRecord(v=RECORD_VERSION, holder=self._peer_id, run_id=cfg.run_id, window=window, created_at=now,
                          puzzle=self._puzzle, groups=[bytes.fromhex(gid) for gid in held])
        record = Record(pointer_key(cfg.run_id, self._peer_id, window), make_subkey(self._public_key, HAVE_SUBKEY_NAME),
                        have.model_dump(), now + cfg.records.ttl)
        sent = await self._channel.publish(sign_records(self._node, [record])[0].signed)
        if sent:
            self._counters.add("haves_sent")
        return sent
