"""The strangers' share by network origin on the loopback transport: a crowd of one origin against a newcomer.

A receiving node on a `LoopbackHub`; each round a crowd of 20 fresh identities, all in one
origin, and an honest newcomer in its own post one group each (distinct content, from a
generator node on another hub). Nobody has standing, so every group competes for the
strangers' share (a quarter of the budget: two or three groups here), drawn origin first
(peers/draw.py): the newcomer's origin has a turn in every update, so its group is used in
every round, where a draw by identity alone would use it in about one round in ten.
"""

from __future__ import annotations

import pytest

from ftis_swarm.config import load_node_config
from ftis_swarm.lab.hostile.groups import rebuilt
from ftis_swarm.metrics import read_jsonl
from ftis_swarm.node.daemon import Node
from ftis_swarm.peers.intake import within_vocab
from ftis_swarm.peers.loopback import LoopbackHub
from ftis_swarm.wire import encode_group

pytestmark = pytest.mark.slow  # about 20 s: two tiny nodes, three rounds

CROWD = [f"fresh-{i:02d}" for i in range(20)]
ROUNDS = 3


def node_config(run_dir, model_dir, **over):
    flags = {"model": str(model_dir), "run_dir": str(run_dir), "rounds": ROUNDS, "prompts_per_round": 2,
             "sampling.group_size": 3, "sampling.max_new_tokens": 4, "round_deadline": 0.5,
             "checkpoint_every": 10, "swarm.transport.host": "127.0.0.1", "learner.lr": 1e-3, "threads": 1}
    flags.update(over)
    return load_node_config(None, flags)


def test_a_newcomer_of_its_own_origin_gets_a_turn_in_every_update_beside_a_crowd_of_one_origin(
        tmp_path, tiny_model_dir):
    hub = LoopbackHub()
    for peer in CROWD:
        hub.set_origin(peer, "10.0.0.0/24")
    node = Node(node_config(tmp_path / "a", tiny_model_dir, seed=1), swarm=hub.member("A", origin="10.0.9.0/24"))
    generator = Node(node_config(tmp_path / "gen", tiny_model_dir, seed=2, prompts_per_round=len(CROWD) + 4),
                     swarm=LoopbackHub().member("gen"))
    newcomer_ids, shares = [], []
    try:
        assert node.parts.swarm.origin_of("fresh-03") == "10.0.0.0/24"
        assert node.parts.swarm.origin_of("newcomer") == "newcomer"  # by default each peer its own origin
        for r in range(1, ROUNDS + 1):
            published = node.publish_round(r)
            own = [g for g in generator.publish_round(r).own if within_vocab(g, len(node.parts.tokenizer))]
            assert len(own) >= len(CROWD) // 2 + 1  # a random tiny model samples a padding id now and then
            for sender, group in zip(["newcomer", *CROWD], own):
                peer_group = rebuilt(group, sender=sender)
                hub.inject(sender, encode_group(peer_group))
                if sender == "newcomer":
                    newcomer_ids.append(peer_group.group_id)
            record = node.learn_published(published).record
            assert record["gathered"] == min(len(own), len(CROWD) + 1)
            shares.append(record)
        used = [set(x["peer_groups"]) for x in read_jsonl(node.cfg.run_dir / "consumed.jsonl")]
        assert len(used) == ROUNDS
        assert all(gid in round_used for gid, round_used in zip(newcomer_ids, used))  # its group, every round
        budget = node.intake.budget
        share = int(budget.max_tokens * budget.strangers_share)
        for record, round_used in zip(shares, used):
            assert 2 <= len(round_used) <= 1 + share // 2  # the share, no more (groups of >= 2 tokens)
            assert record.get("peer_over_share", 0) + record.get("peer_deferred", 0) > 0  # the crowd's rest waits or loses
        ledger = node.parts.peer_ledger
        assert all(ledger.score(p) >= 0 for p in CROWD)  # losing the draw costs nothing
    finally:
        node.close()
        generator.close()
