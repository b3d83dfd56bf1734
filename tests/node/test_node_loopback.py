"""Nodes on the loopback transport: the round in two halves, peers' bytes through the node's own intake."""

from __future__ import annotations

import pytest
import torch

from ftis_swarm.config import load_node_config
from ftis_swarm.metrics import read_jsonl
from ftis_swarm.node.daemon import Node
from ftis_swarm.peers.loopback import LoopbackHub, LoopbackSwarm
from ftis_swarm.wire import encode_group


def node_config(run_dir, model_dir, **over):
    flags = {"model": str(model_dir), "run_dir": str(run_dir), "rounds": 2, "prompts_per_round": 2,
             "sampling.group_size": 3, "sampling.max_new_tokens": 4, "round_deadline": 0.5,
             "checkpoint_every": 1, "swarm.host": "127.0.0.1", "learner.lr": 1e-3, "threads": 1}
    flags.update(over)
    return load_node_config(None, flags)


def weights(node):
    return {k: v.detach().clone() for k, v in node.parts.learner.model.state_dict().items()}


@pytest.mark.net
def test_a_loopback_node_run_in_halves_learns_as_a_lone_hivemind_node(tmp_path, tiny_model_dir):
    """The same samples, scores and update metrics (and weights) whichever transport and however the round is run.

    With a random tiny model no reward varies, so no step is taken here; the solo arm's test
    (tests/lab/test_bench_experiment_node.py) compares moved weights, on the same path.
    """
    lone = Node(node_config(tmp_path / "lone", tiny_model_dir))
    lone_rows = [res.record for res in lone.run()]
    halves = Node(node_config(tmp_path / "halves", tiny_model_dir), swarm=LoopbackHub().member("solo"))
    assert isinstance(halves.parts.swarm, LoopbackSwarm)
    rows = [halves.learn_published(halves.publish_round(r)).record for r in (1, 2)]
    try:
        for a, b in zip(lone_rows, rows, strict=True):
            learned = {k for k in a if not k.startswith(("time", "swarm_", "publish")) and k != "published"}
            assert len(learned) > 20 and {k: a[k] for k in learned} == {k: b.get(k) for k in learned}
            assert b["time_round"] >= b["time_generate"] + b["time_learn"] > 0
        assert rows[0]["published"] == 2 and lone_rows[0]["publish_failed"] == 2  # loopback has no replicas to miss
        mine, theirs = weights(halves), weights(lone)
        assert all(torch.equal(mine[k], theirs[k]) for k in mine)
        assert [r["round"] for r in read_jsonl(halves.cfg.run_dir / "metrics.jsonl")] == [1, 2]
    finally:
        halves.close()


def test_two_nodes_in_lockstep_learn_each_others_groups_and_charge_forged_bytes(tmp_path, tiny_model_dir):
    hub = LoopbackHub()
    a = Node(node_config(tmp_path / "a", tiny_model_dir, seed=1), swarm=hub.member("A"))
    b = Node(node_config(tmp_path / "b", tiny_model_dir, seed=2), swarm=hub.member("B"))
    try:
        pa, pb = a.publish_round(1), b.publish_round(1)
        forged = encode_group(pb.own[0])  # B's group, posted by another publisher: its sender is not the poster
        hub.inject("mallory", forged)
        hub.inject("B", encode_group(pb.own[0]))  # and B's own again: delivered once
        ra, rb = a.learn_published(pa).record, b.learn_published(pb).record
        assert ra["peer_groups"] == rb["peer_groups"] == 2 and ra["gathered"] == 2
        assert ra["swarm_rejected_sender_mismatch"] == rb["swarm_rejected_sender_mismatch"] == 1  # both got it
        assert a.parts.peer_ledger.snapshot()["mallory"]["counts"] == {"swarm_sender_mismatch": 1}
        assert ra["offpolicy_sequences"] == 2 * 3  # B's two groups of three, off-policy for A
        # A read B's bodies, once each, and the forged one
        assert a.parts.swarm.counters()["fetched_bytes"] == b.parts.swarm.counters()["served_bytes"] + len(forged)
        used = [x["peer_groups"] for x in read_jsonl(a.cfg.run_dir / "consumed.jsonl")][0]
        assert sorted(used) == sorted(g.group_id for g in pb.own)
    finally:
        a.close()
        b.close()


def test_the_intake_caps_a_peers_groups_after_the_transport(tmp_path, tiny_model_dir):
    """The transport delivers all it accepts; what an update takes of one peer is the node's intake's rule."""
    hub = LoopbackHub()
    a = Node(node_config(tmp_path / "a", tiny_model_dir, seed=1, **{"learner.max_groups_per_peer": 1}),
             swarm=hub.member("A"))
    b = Node(node_config(tmp_path / "b", tiny_model_dir, seed=2), swarm=hub.member("B"))
    try:
        pa, pb = a.publish_round(1), b.publish_round(1)
        ra = a.learn_published(pa).record
        assert ra["gathered"] == 2 and ra["peer_groups"] == 1 and ra["peer_over_cap"] == 1
        b.learn_published(pb)
    finally:
        a.close()
        b.close()
