"""A peer's pointer key is read again at most at `fetch.member_read_rate` records a second (issue 40's fill).

The gatherer is the product's; what stands in is the DHT below it (`KeyReader.read`): membership
keys answer with each member's signed claim, pointer keys with as many records as the member
stored. A filler claims more at every membership read and holds a thousand records; an honest
member claims one pointer more a poll and holds a few. Before the pacing every claim made the
gatherer read the filler's whole key again at the next poll.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import Counter

import base58
from hivemind.utils.timed_storage import get_dht_time

from ftis_swarm.config import SwarmConfig
from ftis_swarm.peers.policy import ALLOW_ALL
from ftis_swarm.swarm.counters import SwarmCounters
from ftis_swarm.swarm.dht.reading import FoundRecord, peer_id_of
from ftis_swarm.swarm.fetch.gatherer import Gatherer
from ftis_swarm.swarm.keys import window_of
from ftis_swarm.swarm.records import RECORD_VERSION, MemberRecord

RUN, NONCE = "reads", "0" * 16


def pid(name: str) -> str:
    return base58.b58encode(b"\x12\x20" + hashlib.sha256(name.encode()).digest()).decode()


HONEST, FILLER = pid("honest"), pid("filler")


class DHT:
    """Membership claims that grow at every read; pointer keys of `held[peer]` records each."""

    def __init__(self, cfg: SwarmConfig) -> None:
        self.cfg, self.claims, self.reads = cfg, Counter({HONEST: 0, FILLER: 1000}), Counter()
        self.held = {HONEST: 3, FILLER: 1000}

    async def read(self, keys, *, timeout: float) -> dict:
        now, out = get_dht_time(), {}
        w = window_of(now, self.cfg.records.window)
        for key in keys:
            if "/members/" in key:
                self.claims[HONEST] += 1
                self.claims[FILLER] += 10
                out[key] = {peer.encode(): FoundRecord(owner=peer, expiration=now + 60, content=MemberRecord(
                    v=RECORD_VERSION, publisher=peer, run_id=RUN, window=w, shards=1, groups=self.claims[peer],
                    updated_at=now, puzzle=NONCE)) for peer in (HONEST, FILLER)} if key.endswith(f"/{w}/0") else {}
            else:
                peer = next(p for p in (HONEST, FILLER) if f"/{p}/" in key)
                self.reads[peer] += 1
                out[key] = {i.to_bytes(4, "big"): FoundRecord(owner=peer, content=None, expiration=now + 60)
                            for i in range(self.held[peer])}
        return out


def _reads(rate: float, seconds: float) -> Counter:
    cfg = SwarmConfig(run_id=RUN, fetch={"poll_interval": 0.05, "member_read_rate": rate}, records={"window": 600.0})
    dht = DHT(cfg)
    gatherer = Gatherer(reader=dht, p2p=None, cfg=cfg, peer_id=pid("me"), tokenizer_fp="tok", vocab_size=1000,
                        counters=SwarmCounters(), policy=ALLOW_ALL)

    async def polls() -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            await gatherer.poll_once()
            await asyncio.sleep(cfg.fetch.poll_interval)

    asyncio.run(polls())
    return dht.reads


def test_a_filled_key_is_read_at_the_member_read_rate_and_an_honest_key_at_every_claim():
    reads = _reads(rate=500.0, seconds=1.5)  # the filler's 1,000 records: 2 s before its key is read again
    assert reads[FILLER] == 1
    assert reads[HONEST] >= 5  # 3 records: 6 ms; its key is read at (nearly) every poll that sees a new claim
    unpaced = _reads(rate=1e9, seconds=1.5)  # what a rate too high to matter gives: the filler at every claim
    assert unpaced[FILLER] >= 5


def test_the_nearest_peers_of_a_reply_are_decoded_once():
    raw = b"\x12\x20" + hashlib.sha256(b"peer").digest()
    assert peer_id_of(raw) is peer_id_of(bytes(raw)) and peer_id_of(raw).to_bytes() == raw
