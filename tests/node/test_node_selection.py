"""Which peers' groups an update takes (peers/intake.py): refused peers, dedup against persisted
updates, context, caps, and the completion-token budget with one round of deferral (peers with
standing here; the strangers' share and copies: test_node_standing.py)."""

from __future__ import annotations

import json

import numpy as np
from wire_samples import groups_from

from ftis_swarm.config import load_node_config
from ftis_swarm.node.daemon import drop_rounds_after
from ftis_swarm.peers.intake import Budget, PeerIntake


def budget(**over) -> Budget:
    fields = dict(max_groups=4, max_groups_per_peer=2, max_tokens=10**6, max_tokens_per_peer=10**6, context=5000,
                  strangers_share=0.0)
    return Budget(**{**fields, **over})


def allow_all(peer: str) -> bool:
    return True


def test_caps_dedup_context_and_refused_peers():
    rng = np.random.default_rng(0)
    a, b = groups_from(rng, "peer-a", 4), groups_from(rng, "peer-b", 3)
    long, banned = groups_from(rng, "peer-c", 1, length=5000), groups_from(rng, "peer-x", 2)
    consumed = {a[0].group_id: None}
    taken = PeerIntake(budget()).take(a + b + long + banned, consumed, lambda p: p != "peer-x", standing=allow_all)
    assert [g.sender for g in taken.kept] == ["peer-a", "peer-b", "peer-a", "peer-b"]  # one of each in turn
    assert taken.kept[0] is a[1] and taken.kept[2] is a[2]  # a[0] was consumed before
    assert taken.counts == {"peer_already_consumed": 1, "peer_over_cap": 2, "peer_too_long": 1, "peer_refused": 2}
    assert taken.by_peer[("peer-x", "peer_refused")] == 2 and taken.by_peer[("peer-c", "peer_too_long")] == 1


def test_token_budget_defers_one_round_then_drops():
    rng = np.random.default_rng(1)
    a = groups_from(rng, "peer-a", 3, length=10)  # 20 completion tokens each
    b = groups_from(rng, "peer-b", 2, length=10)
    flood = groups_from(rng, "peer-f", 1, length=400)  # 800 tokens: over the per-peer budget on its own
    intake = PeerIntake(budget(max_groups=10, max_groups_per_peer=10, max_tokens=60, max_tokens_per_peer=40))
    first = intake.take(a + b + flood, {}, allow_all, standing=allow_all)
    assert [g.group_id for g in first.kept] == [a[0].group_id, b[0].group_id, a[1].group_id]
    assert sum(g.num_completion_tokens for g in first.kept) <= 60
    assert first.counts == {"peer_deferred": 2, "peer_over_budget": 1}  # a[2] over a's 40, b[1] over the 60
    second = intake.take(groups_from(rng, "peer-b", 2, length=10), {}, allow_all, standing=allow_all)
    assert second.kept[:2] == [b[1], a[2]]  # last round's deferred groups come first
    assert len(second.kept) == 3 and second.counts == {"peer_deferred": 1}
    third = intake.take([], {}, allow_all, standing=allow_all)
    assert len(third.kept) == 1 and third.counts == {}


def test_a_deferred_group_that_still_does_not_fit_is_dropped():
    rng = np.random.default_rng(2)
    a = groups_from(rng, "peer-a", 2, length=10)
    intake = PeerIntake(budget(max_groups=10, max_groups_per_peer=10, max_tokens=20, max_tokens_per_peer=20))
    assert intake.take(a, {}, allow_all, standing=allow_all).counts == {"peer_deferred": 1}
    fresh = groups_from(rng, "peer-a", 1, length=10)
    nxt = intake.take(fresh, {}, allow_all, standing=allow_all)
    assert nxt.kept == [a[1]] and nxt.counts == {"peer_deferred": 1}
    assert intake.take([], {}, allow_all, standing=allow_all).kept == [fresh[0]]
    intake = PeerIntake(budget(max_groups=10, max_groups_per_peer=10, max_tokens=20, max_tokens_per_peer=20))
    intake.take(a, {}, allow_all, standing=allow_all)
    later = intake.take(groups_from(rng, "peer-b", 1, length=10), {}, lambda p: p != "peer-a", standing=allow_all)
    assert later.counts == {"peer_refused": 1} and len(later.kept) == 1  # deferred, then its peer was banned


def test_default_budget_is_a_multiple_of_the_nodes_own_tokens():
    cfg = load_node_config(None, {"prompts_per_round": 2, "sampling.group_size": 4, "sampling.max_new_tokens": 24})
    b = Budget.of(cfg, context=2048)
    assert (b.max_tokens, b.max_tokens_per_peer, b.max_groups_per_peer) == (4 * 192, 2 * 192, 16)
    cfg = load_node_config(None, {"learner.max_peer_tokens": 1000, "learner.max_peer_tokens_per_peer": 300})
    assert (Budget.of(cfg, context=1).max_tokens, Budget.of(cfg, context=1).max_tokens_per_peer) == (1000, 300)


def test_resume_drops_the_rounds_after_the_checkpoint(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"round": r, "x": r * 10}) + "\n" for r in (1, 2, 3, 4)))
    drop_rounds_after(path, 2)
    assert [json.loads(ln)["round"] for ln in path.read_text().splitlines()] == [1, 2]
    drop_rounds_after(tmp_path / "absent.jsonl", 1)  # nothing to do, no error


def test_deferred_groups_survive_a_checkpoint_and_a_regathered_copy_is_taken_once():
    rng = np.random.default_rng(3)
    a = groups_from(rng, "peer-a", 2, length=10)
    intake = PeerIntake(budget(max_groups=10, max_groups_per_peer=10, max_tokens=20, max_tokens_per_peer=20))
    assert intake.take(a, {}, allow_all, standing=allow_all).counts == {"peer_deferred": 1}
    restored = PeerIntake(intake.budget)
    restored.load_state(json.loads(json.dumps(intake.state())))  # through state.json
    # a restarted node's swarm gathers the deferred group again: it is taken once, first
    again = restored.take([a[1]], {}, allow_all, standing=allow_all)
    assert [g.group_id for g in again.kept] == [a[1].group_id]
    assert again.counts == {"peer_duplicate": 1} and again.by_peer == {("peer-a", "peer_duplicate"): 1}
    assert restored.state()["deferred"] == [] and intake.take([], {}, allow_all, standing=allow_all).kept[0].group_id == a[1].group_id
