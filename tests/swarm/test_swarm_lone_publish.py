"""A publish that no peer holds: said once, at INFO, while there is nobody to ask; warned of when peers refuse.

Real in-process clients on loopback: a node alone, and a node whose only peer denies it
(its policy refuses every store of that node's records, as a ledger's ban does).
"""

from __future__ import annotations

import logging

import pytest
from record_peers import PUZZLE

from ftis_swarm.config import SwarmConfig
from ftis_swarm.lab.hostile.floods import make_group
from ftis_swarm.swarm import SwarmClient
from ftis_swarm.swarm.dht.publishing import Replication, StoreOutcome

pytestmark = pytest.mark.net
TOKENIZER_FP = "test-tokenizer"
VOCAB_SIZE = 1000
PUBLISHING = "ftis_swarm.swarm.dht.publishing"


class Denies:
    """A peer policy that refuses the peers named in `denied` (filled once their ids are known)."""

    def __init__(self) -> None:
        self.denied: set[str] = set()

    def allows(self, peer_id: str) -> bool:
        return peer_id not in self.denied

    def score(self, peer_id: str) -> float:
        return 0.0


def _start(tmp_path, name: str, *, peers: list[str] = (), policy=None) -> SwarmClient:
    cfg = SwarmConfig(host="127.0.0.1", run_id="lone", puzzle=PUZZLE, identity=tmp_path / f"{name}.key",
                      peers=list(peers), reachability="public", gossip=False)
    options = {"policy": policy} if policy is not None else {}
    return SwarmClient.start(cfg, tokenizer_fp=TOKENIZER_FP, vocab_size=VOCAB_SIZE, **options)


def _publish(client: SwarmClient, r: int):
    group = make_group(sender=client.peer_id, run_id="lone", item=f"arith/v1/s0/{r}", tokens=4,
                       tokenizer_fp=TOKENIZER_FP, vocab_size=VOCAB_SIZE)
    return client.publish_round([group], round=r)


def _lines(caplog, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == level and r.name == PUBLISHING]


def test_a_node_alone_says_so_once_and_warns_of_nothing(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    client = _start(tmp_path, "alone")
    try:
        results = [_publish(client, r) for r in (1, 2, 3)]
    finally:
        client.shutdown()
    assert [(res.ok, res.asked, res.replicas) for res in results] == [(False, 0, 0)] * 3  # counted as before
    assert _lines(caplog, logging.INFO) == [
        "no peers yet to hold round 1's pointer: it is kept in this node's DHT storage until peers join"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not [w for w in warnings if "publish" in w], warnings


def test_a_node_whose_peer_refuses_its_records_is_warned_each_round(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    policy = Denies()
    refuser = _start(tmp_path, "refuser", policy=policy)
    try:
        node = _start(tmp_path, "node", peers=refuser.visible_maddrs)
        try:
            policy.denied.add(node.peer_id)
            results = [_publish(node, r) for r in (1, 2)]
        finally:
            node.shutdown()
    finally:
        refuser.shutdown()
    assert [(res.ok, res.asked, res.replicas) for res in results] == [(False, 1, 0)] * 2
    assert _lines(caplog, logging.WARNING) == [
        f"publish of round {r} failed: the pointer reached 0 and the membership record 0 of 1 peers asked, "
        "fewer than min_replicas=1" for r in (1, 2)]
    assert not [m for m in _lines(caplog, logging.INFO) if m.startswith("no peers")]


def test_replication_reads_alone_only_when_nobody_was_asked():
    def read(pointer: tuple[int, int], member: tuple[int, int], need: int = 1) -> tuple[bool, bool]:
        r = Replication(StoreOutcome(*pointer), StoreOutcome(*member), min_replicas=need)
        return r.ok, r.alone

    assert read((0, 0), (0, 0)) == (False, True)  # nobody to ask
    assert read((0, 1), (0, 1)) == (False, False)  # asked, refused
    assert read((1, 1), (0, 1)) == (False, False)  # the membership record refused
    assert read((2, 3), (2, 3), need=2) == (True, False)
    assert read((1, 3), (3, 3), need=2) == (False, False)
    assert Replication(StoreOutcome(2, 2), StoreOutcome(2, 2), min_replicas=2).reason == ""
