"""The hint on real daemons: a node publishes its own count of correct answers in its signed pointer, and
charges a publisher whose hint its own verifier contradicts (`hint_contradicted`), never an honest one.

A real node A (a tiny model, the hivemind swarm on loopback) and two real in-process swarm clients
on the same run: H, honest, and L, a liar. After A publishes its round, H and L each publish a group
of answers to A's own prompt: H one right and two wrong with the hint 1 (true), L three wrong with
the hint 2 (an all-wrong group announced as mixed, to be fetched first), and an honest group with
its true hint 0. A gathers, scores all three with its own verifier and checks each hint; H reads the hint A signed
for its own group (A's verifier's count, the round's `accuracy`).
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from ftis_swarm.config import SwarmConfig, load_node_config
from ftis_swarm.node.daemon import Node
from ftis_swarm.swarm import SwarmClient
from ftis_swarm.wire import Group

pytestmark = [pytest.mark.net, pytest.mark.slow]


def _answers(node: Node, own: Group, sender: str, answers: list[str], at: float) -> Group:
    tok = node.parts.tokenizer
    ids = [np.asarray(tok.encode(a, add_special_tokens=False) + [tok.eos_token_id], dtype=np.uint32) for a in answers]
    return Group.build(run_id=own.run_id, sender=sender, model_id=own.model_id, policy_version=own.policy_version,
                       created_at=at, tokenizer_fp=own.tokenizer_fp, task_id=own.task_id, item_id=own.item_id,
                       prompt_ids=own.prompt_ids, temperature=own.temperature, completion_ids=ids,
                       logp_gen=[np.full(len(c), -1.0, dtype=np.float32) for c in ids])


def test_a_lying_publisher_is_charged_and_an_honest_one_never(tmp_path, tiny_model_dir):
    cfg = load_node_config(None, {
        "model": str(tiny_model_dir), "run_dir": str(tmp_path / "a"), "rounds": 1, "prompts_per_round": 1,
        "sampling.group_size": 3, "sampling.max_new_tokens": 4, "round_deadline": 20.0, "learner.lr": 1e-3,
        "threads": 1, "eval_every": 0, "learner.ftis.mode": "nois", "learner.strangers_share": 1.0,
        "learner.max_peer_tokens": 1000, "learner.max_peer_tokens_per_peer": 1000,
        "swarm.transport.host": "127.0.0.1"})
    node = Node(cfg)
    clients: list[SwarmClient] = []
    try:
        me = node.parts.swarm
        published = node.publish_round(1)
        own = published.own[0]
        assert me.hints([own.group_id]) == {}  # its own group is never fetched, so never checked
        answer = int(node.parts.task.item(own.item_id).answer)
        for name in ("honest", "liar"):
            clients.append(SwarmClient.start(
                SwarmConfig(host="127.0.0.1", run_id=cfg.swarm.run_id, puzzle=cfg.swarm.puzzle,
                            identity=tmp_path / f"{name}.key", peers=me.visible_maddrs, reachability="public"),
                tokenizer_fp=own.tokenizer_fp, vocab_size=node.parts.token_bound))
        honest, liar = clients
        now = time.time()
        mixed = _answers(node, own, honest.peer_id, [f"{answer}", f"{answer + 1}", f"{answer + 2}"], now)
        flat = _answers(node, own, liar.peer_id, [f"{answer + 1}", f"{answer + 2}", f"{answer + 3}"], now)
        flat_too = _answers(node, own, liar.peer_id, [f"{answer + 4}", f"{answer + 5}", f"{answer + 6}"], now + 1)
        assert honest.publish_round([mixed], round=1, correct=[1]).gossiped
        assert liar.publish_round([flat, flat_too], round=1, correct=[2, 0]).gossiped  # one lie, one true hint
        time.sleep(2.0)  # the gossiped pointers reach A before its gather opens
        record = node.learn_published(published).record
        ledger = node.parts.peer_ledger.snapshot()
        fetched = {g.group_id for g in honest.gather(5.0)}  # A's own group, and the hint A signed for it
        own_hint = honest.hints([own.group_id])
    finally:
        node.close()
        for client in clients:
            client.shutdown()
    assert record["gathered"] == 3, record
    assert own.group_id in fetched and own_hint == {own.group_id: (round(record["accuracy"] * 3), 3)}
    assert (record["hints_checked"], record["hints_contradicted"]) == (3, 1)
    assert record["charged_hint_contradicted"] == 1
    assert ledger[liar.peer_id]["counts"] == {"hint_contradicted": 1} and ledger[liar.peer_id]["cost"] == 10.0
    assert ledger.get(honest.peer_id, {}).get("cost", 0.0) == 0.0 and "hint_contradicted" not in ledger.get(
        honest.peer_id, {}).get("counts", {})
