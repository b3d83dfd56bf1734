"""The gatherer keeps the hint of every group a screened pointer names, fetched or not, for the node's check of
cherry-picked groups (`peers/cherry.py`); a pointer it refuses adds nothing."""

from __future__ import annotations

import asyncio
import hashlib
import time

import base58

from ftis_swarm.config import SwarmConfig
from ftis_swarm.lab.hostile.floods import make_group
from ftis_swarm.peers.intake import Budget
from ftis_swarm.peers.policy import ALLOW_ALL
from ftis_swarm.swarm.counters import SwarmCounters
from ftis_swarm.swarm.dht.reading import FoundRecord
from ftis_swarm.swarm.fetch.gatherer import Gatherer
from ftis_swarm.swarm.records import make_round_pointer
from ftis_swarm.wire import encode_group

TFP, VOCAB = "tok", 1000
ME, PICKER, OTHER = (base58.b58encode(b"\x12\x20" + hashlib.sha256(n).digest()).decode() for n in (b"me", b"pk", b"ot"))


class NoDHT:
    async def read(self, keys, *, timeout: float) -> dict:
        return {}


class NoNet:
    async def call_binary_stream_handler(self, peer_id, name: str):
        raise ConnectionError("no bodies in this test")


def _record(publisher: str, run_id: str, correct, r: int = 1) -> FoundRecord:
    groups = [make_group(sender=publisher, run_id=run_id, item=f"{r}-{i}", tokens=8, tokenizer_fp=TFP,
                         vocab_size=VOCAB, created_at=time.time()) for i in range(len(correct))]
    pointer = make_round_pointer([(g, encode_group(g)) for g in groups], publisher=publisher, run_id=run_id,
                                 tokenizer_fp=TFP, window=1, round=r, puzzle="0" * 16, correct=correct)
    return FoundRecord(owner=publisher, content=pointer, expiration=time.time() + 60)


def test_every_screened_hinted_group_is_announced_once_fetched_or_not():
    async def run():
        cfg = SwarmConfig(run_id="run", ttl=60.0, max_clock_skew=5.0)
        gatherer = Gatherer(reader=NoDHT(), p2p=NoNet(), cfg=cfg, peer_id=ME, tokenizer_fp=TFP, vocab_size=VOCAB,
                            counters=SwarmCounters(), policy=ALLOW_ALL)
        # a budget that takes nothing of strangers: no group is fetched, every hint is still announced
        await gatherer.use_budget(Budget(max_groups=1, max_groups_per_peer=1, max_tokens=1, max_tokens_per_peer=1,
                                         context=4096, strangers_share=0.0))
        record = _record(PICKER, "run", [1, 2, 3])
        gatherer.on_gossip(record)
        gatherer.on_gossip(record)  # seen again: considered once
        gatherer.on_gossip(_record(OTHER, "another-run", [0, 4]))  # refused at screening: not announced
        gatherer.on_gossip(_record(OTHER, "run", [None, 2]))  # a group without a hint: not announced
        first, second = gatherer.drain_announced(), gatherer.drain_announced()
        return first, second

    first, second = asyncio.run(run())
    assert sorted(first) == sorted([(PICKER, 4, 1), (PICKER, 4, 2), (PICKER, 4, 3), (OTHER, 4, 2)])
    assert second == []
