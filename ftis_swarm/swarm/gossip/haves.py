"""A holder's announcement: every `have_interval` s, one signed `HaveRecord` on the run's topic.

A node that holds other peers' bodies (`fetch.bodies`) says so on the same topic its
pointers travel, as one signed record naming its newest held groups (at most
`records.MAX_HELD_ANNOUNCED`): one message per holder and interval, whatever the number
of bodies, through the same `GossipGate` (rate, bans, record checks) as every message.
It is sent again each interval while the node holds anything, so a peer that joins late
learns of the holders too. Nothing is stored in the DHT.
"""

from __future__ import annotations

import asyncio
import logging
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
        """Announces every `have_interval` s until cancelled; a failed announcement is logged and tried again."""
        while True:
            await asyncio.sleep(self._cfg.have_interval)
            try:
                await self.announce()
            except Exception:  # signing or p2pd: the next interval tries again, fetchers still have the publisher
                logger.exception("announcing the held bodies failed; next try in %.0f s", self._cfg.have_interval)

    async def announce(self) -> bool:
        """Gossips one have record of the held bodies; False when nothing is held or p2pd refused it."""
        held = self._held(MAX_HELD_ANNOUNCED)
        if not held:
            return False
        cfg, now = self._cfg, get_dht_time()
        window = window_of(now, cfg.window)
        have = HaveRecord(v=RECORD_VERSION, holder=self._peer_id, run_id=cfg.run_id, window=window, created_at=now,
                          puzzle=self._puzzle, groups=[bytes.fromhex(gid) for gid in held])
        record = Record(pointer_key(cfg.run_id, self._peer_id, window), make_subkey(self._public_key, HAVE_SUBKEY_NAME),
                        have.dict(), now + cfg.ttl)
        sent = await self._channel.publish(sign_records(self._node, [record])[0].signed)
        if sent:
            self._counters.add("haves_sent")
        return sent
