"""The loopback transport: wire bytes between members of one hub, checked as the hivemind swarm checks them."""

from __future__ import annotations

import time

import numpy as np
import pytest

from ftis_swarm.config import LedgerConfig, SwarmConfig
from ftis_swarm.peers.ledger import PeerLedger
from ftis_swarm.peers.loopback import LoopbackHub
from ftis_swarm.peers.protocol import Swarm
from ftis_swarm.swarm import PublishResult, SwarmClient
from ftis_swarm.wire import Group, encode_group

FP = "f" * 32
CFG = SwarmConfig(run_id="loop")


def group(sender: str, *, item: int = 0, run_id: str = "loop", tokenizer_fp: str = FP, token: int = 5,
          created_at: float | None = None) -> Group:
    return Group.build(run_id=run_id, sender=sender, model_id="m", policy_version=0,
                       created_at=time.time() if created_at is None else created_at, tokenizer_fp=tokenizer_fp,
                       task_id="arith", item_id=f"arith/{item}", prompt_ids=[1, 2, 3], temperature=1.0,
                       completion_ids=[[token, 6], [7]], logp_gen=[np.array([-0.5, -1.0], np.float32),
                                                                   np.array([-0.25], np.float32)])


def pair(policy=None):
    hub = LoopbackHub()
    a = hub.member("A")(CFG, tokenizer_fp=FP, vocab_size=100, policy=policy or PeerLedger())
    b = hub.member("B")(CFG, tokenizer_fp=FP, vocab_size=100, policy=PeerLedger())
    return hub, a, b


def test_both_transports_have_the_members_a_node_calls():
    _, a, _ = pair()
    assert isinstance(a, Swarm)
    for member in ("publish_round", "set_budget", "gather", "drain_peer_faults", "counters", "shutdown"):  # peer_id: set on start
        assert callable(getattr(SwarmClient, member)) and callable(getattr(a, member))
    assert PublishResult.__module__ == "ftis_swarm.peers.protocol"  # the swarm re-exports the seam's type


def test_a_group_crosses_as_its_wire_bytes_in_publish_order_and_once():
    hub, a, b = pair()
    sent = [group("B", item=i) for i in range(3)]
    result = b.publish_round(sent, round=1)
    assert result.ok and list(result.group_ids) == [g.group_id for g in sent]
    got = a.gather(10.0, round=1)
    assert [g.group_id for g in got] == [g.group_id for g in sent]
    assert got[0] is not sent[0] and np.array_equal(got[0].completion_ids[0], sent[0].completion_ids[0])
    assert b.gather(0.0) == []  # never its own
    assert a.gather(0.0) == []  # drained
    size = sum(len(encode_group(g)) for g in sent)
    assert a.counters()["fetched_bytes"] == b.counters()["served_bytes"] == size
    hub.inject("B", encode_group(sent[0]))  # the same group again: delivered once
    assert a.gather(0.0) == [] and a.drain_peer_faults() == {}


def test_publish_refuses_a_group_this_node_did_not_send():
    _, a, b = pair()
    result = b.publish_round([group("B", item=1), group("A")])  # one bad group refuses the whole round
    assert not result.ok and "is not this node's peer id" in result.reason
    assert b.counters()["publish_failed"] == 2 and b.counters()["published"] == 0 and a.gather(0.0) == []


@pytest.mark.parametrize("body_of, reason", [
    (lambda: b"\x00not msgpack", "malformed"),
    (lambda: encode_group(group("A")), "sender_mismatch"),  # B posts a group that names A as its sender
    (lambda: encode_group(group("B", run_id="other")), "run_id"),
    (lambda: encode_group(group("B", tokenizer_fp="0" * 32)), "tokenizer"),
    (lambda: encode_group(group("B", token=500)), "malformed"),  # over this node's token bound of 100
    (lambda: encode_group(group("B", created_at=time.time() - 10_000)), "stale"),
    (lambda: encode_group(group("B", created_at=time.time() + 10_000)), "future"),
    (lambda: b"x" * ((1 << 20) + 1), "oversize"),
])
def test_a_bad_body_is_refused_and_charged_to_its_publisher(body_of, reason):
    hub, a, _ = pair()
    hub.inject("B", body_of())
    hub.inject("B", encode_group(group("B", item=9)))  # an honest group after it still arrives
    got = a.gather(0.0)
    assert [g.item_id for g in got] == ["arith/9"]
    assert a.drain_peer_faults() == {"B": {reason: 1}} and a.drain_peer_faults() == {}
    assert a.counters()["rejected"] == {reason: 1}


def test_a_refused_publisher_is_not_read():
    ledger = PeerLedger(LedgerConfig(deny_peers=["B"]))
    hub, a, b = pair(policy=ledger)
    b.publish_round([group("B")])
    assert a.gather(0.0) == [] and a.counters()["skipped_refused"] == 1 and a.counters()["fetched_bytes"] == 0
    assert a.counters()["refused_by_peer"] == {"B": 1} and a.drain_peer_faults() == {}  # not read, not charged again


def test_a_peer_id_joins_a_hub_once_and_a_shut_down_member_leaves():
    hub, a, b = pair()
    with pytest.raises(ValueError, match="already a member"):
        hub.member("A")(CFG, tokenizer_fp=FP, vocab_size=100, policy=PeerLedger())
    a.shutdown()
    a.shutdown()
    assert not a.publish_round([group("A")]).ok
    b.publish_round([group("B")])
    assert a.gather(0.0) == []
    hub.member("A")(CFG, tokenizer_fp=FP, vocab_size=100, policy=PeerLedger())  # the id is free again
