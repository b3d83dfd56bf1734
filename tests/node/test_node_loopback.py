"""Nodes on the loopback transport: the round in two halves, peers' bytes through the node's own intake."""

from __future__ import annotations

from ftis_swarm.config import load_node_config
from ftis_swarm.metrics import read_jsonl
from ftis_swarm.node.daemon import Node
from ftis_swarm.peers.loopback import LoopbackHub, LoopbackSwarm
from ftis_swarm.wire import encode_group


def node_config(run_dir, model_dir, **over):
    flags = {"model": str(model_dir), "run_dir": str(run_dir), "rounds": 2, "prompts_per_round": 2,
             "sampling.group_size": 3, "sampling.max_new_tokens": 4, "round_deadline": 0.5,
             "checkpoint_every": 1, "swarm.transport.host": "127.0.0.1", "learner.lr": 1e-3, "threads": 1}
    flags.update(over)
    return load_node_config(None, flags)


def test_two_nodes_in_lockstep_learn_each_others_groups_and_charge_forged_bytes(tmp_path, tiny_model_dir):
    """The transport delivers what passes its checks; what an update takes of it is the node's intake's rule.

    A lone node on the loopback transport, run in halves, learns as a lone `ftis-node join`
    (the experiment's solo arm is that: tests/lab/test_bench_experiment_node.py).
    """
    hub = LoopbackHub()
    a = Node(node_config(tmp_path / "a", tiny_model_dir, seed=1, **{"learner.max_groups_per_peer": 1}),
             swarm=hub.member("A"))
    b = Node(node_config(tmp_path / "b", tiny_model_dir, seed=2), swarm=hub.member("B"))
    try:
        assert isinstance(a.parts.swarm, LoopbackSwarm)
        pa, pb = a.publish_round(1), b.publish_round(1)
        forged = encode_group(pb.own[0])  # B's group, posted by another publisher: its sender is not the poster
        hub.inject("mallory", forged)
        hub.inject("B", encode_group(pb.own[0]))  # and B's own again: delivered once
        ra, rb = a.learn_published(pa).record, b.learn_published(pb).record
        assert ra["gathered"] == rb["gathered"] == rb["peer_groups"] == 2
        assert ra["peer_groups"] == ra["peer_over_cap"] == 1  # A's intake takes one group of each peer
        assert ra["swarm_rejected_sender_mismatch"] == rb["swarm_rejected_sender_mismatch"] == 1  # both got it
        assert a.parts.peer_ledger.snapshot()["mallory"]["counts"] == {"swarm_sender_mismatch": 1}
        assert ra["offpolicy_sequences"] == 3 and rb["offpolicy_sequences"] == 2 * 3  # groups of three, off-policy
        # A read B's bodies, once each, and the forged one
        assert a.parts.swarm.counters()["fetched_bytes"] == b.parts.swarm.counters()["served_bytes"] + len(forged)
        used = [x["peer_groups"] for x in read_jsonl(a.cfg.run_dir / "consumed.jsonl")][0]
        assert used == [pb.own[0].group_id]  # the first of B's, in publish order
    finally:
        a.close()
        b.close()
