"""The update's budget by standing (peers/intake.py): a crowd of fresh identities shares a reserved,
capped part, drawn fairly by the node's seed; copies of another sender's content are refused."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
from wire_samples import groups_from

from ftis_swarm.peers.copies import content_key as content_digest
from ftis_swarm.peers.intake import Budget, PeerIntake
from ftis_swarm.peers.ledger import PeerLedger

EARNED = {"earned-1", "earned-2"}


def allow_all(peer: str) -> bool:
    return True


def budget(**over) -> Budget:
    # 20 completion tokens a group (G = 2, length 10): 400 tokens = 20 groups; a quarter for strangers
    fields = dict(max_groups=64, max_groups_per_peer=16, max_tokens=400, max_tokens_per_peer=200, context=5000,
                  strangers_share=0.25)
    return Budget(**{**fields, **over})


def crowd_round(rng, n_strangers=20, per_stranger=2):
    earned = [g for p in sorted(EARNED) for g in groups_from(rng, p, 10, length=10)]
    crowd = [g for i in range(n_strangers) for g in groups_from(rng, f"fresh-{i:02d}", per_stranger, length=10)]
    return crowd + earned  # the crowd arrives first


def test_a_crowd_of_fresh_identities_gets_only_the_strangers_share():
    rng = np.random.default_rng(0)
    intake = PeerIntake(budget(), seed=3)
    taken = intake.take(crowd_round(rng), {}, allow_all, standing=EARNED.__contains__)
    by = Counter("earned" if g.sender in EARNED else "crowd" for g in taken.kept)
    crowd_tokens = sum(g.num_completion_tokens for g in taken.kept if g.sender not in EARNED)
    assert crowd_tokens == 100 and by == {"crowd": 5, "earned": 15}  # 100 of 400 tokens: the share, no more
    assert len({g.sender for g in taken.kept if g.sender not in EARNED}) == 5  # one group each in turn
    assert taken.counts["peer_deferred"] == 40 - 5 + 5  # the crowd's rest and the earned peers' rest wait
    # the earned peers' part is theirs: the crowd takes none of it, and two peers split it in turns
    split = Counter(g.sender for g in taken.kept if g.sender in EARNED)  # equal ranks: the seeded draw goes first
    assert set(split) == EARNED and sorted(split.values()) == [7, 8]
    nxt = intake.take([], {}, allow_all, standing=EARNED.__contains__)
    assert nxt.counts["peer_over_share"] == 30 and nxt.by_peer[("fresh-00", "peer_over_share")] in (0, 1, 2)
    ledger = PeerLedger()
    ledger.charge_counts(taken.by_peer + nxt.by_peer)
    assert all(ledger.score(f"fresh-{i:02d}") == 0.0 for i in range(20))  # losing the draw costs nothing


def test_the_strangers_share_is_reserved_for_a_lone_newcomer_and_the_draw_is_fair():
    rng = np.random.default_rng(1)
    newcomer = groups_from(rng, "newcomer", 1, length=10)
    earned = [g for p in sorted(EARNED) for g in groups_from(rng, p, 16, length=10)]
    taken = PeerIntake(budget(), seed=0).take(earned + newcomer, {}, allow_all, standing=EARNED.__contains__)
    assert newcomer[0] in taken.kept  # arrived last, still taken: the earned peers cannot fill its part
    assert sum(g.num_completion_tokens for g in taken.kept if g.sender in EARNED) == 300
    # over many updates each of 20 fresh identities is drawn about equally often (seeded: repeatable)
    wins: Counter = Counter()
    for seed in (0, 1):
        intake = PeerIntake(budget(), seed=seed)
        for _ in range(40):
            crowd = [g for i in range(20) for g in groups_from(rng, f"fresh-{i:02d}", 1, length=10)]
            wins.update(g.sender for g in intake.take(crowd, {}, allow_all, standing=EARNED.__contains__).kept)
    assert len(wins) == 20 and sum(wins.values()) == 2 * 40 * 5
    assert min(wins.values()) >= 8 and max(wins.values()) <= 32  # expected 20 each
    a, b = (PeerIntake(budget(), seed=7) for _ in range(2))
    crowd = [g for i in range(20) for g in groups_from(rng, f"fresh-{i:02d}", 1, length=10)]
    assert a.take(crowd, {}, allow_all).kept == b.take(crowd, {}, allow_all).kept  # no standing at all: the draw


def test_earned_peers_are_ranked_by_score():
    rng = np.random.default_rng(2)
    low, high = groups_from(rng, "earned-1", 3, length=10), groups_from(rng, "earned-2", 3, length=10)
    score = {"earned-1": 1.0, "earned-2": 5.0}
    taken = PeerIntake(budget(max_tokens=80, strangers_share=0.25)).take(
        low + high, {}, allow_all, standing=EARNED.__contains__, rank=score.__getitem__)
    assert [g.sender for g in taken.kept] == ["earned-2", "earned-1", "earned-2"]  # 60 of 80 tokens: 20 reserved


def test_a_copy_is_refused_costs_no_one_and_the_first_publisher_keeps_its_group():
    rng = np.random.default_rng(3)
    (honest,) = groups_from(rng, "honest", 1, length=10)
    fields = {f: getattr(honest, f) for f in ("run_id", "model_id", "policy_version", "tokenizer_fp", "task_id",
                                              "item_id", "prompt_ids", "temperature", "completion_ids", "logp_gen")}
    copy = type(honest).build(**fields, created_at=honest.created_at + 1.0, sender="copier")
    resent = type(honest).build(**fields, created_at=honest.created_at + 2.0, sender="honest")
    assert copy.group_id != honest.group_id and content_digest(copy) == content_digest(honest)
    intake = PeerIntake(budget(strangers_share=1.0))
    first = intake.take([honest, copy], {}, allow_all)
    assert first.kept == [honest] and first.by_peer == {("copier", "copied_group"): 1, ("honest", "contested_group"): 1}
    # in a later round, after a checkpoint: still refused; the first publisher's own replay is a duplicate
    restored = PeerIntake(intake.budget)
    restored.load_state(json.loads(json.dumps(intake.state())))
    later = restored.take([copy, resent], {}, allow_all)
    assert later.kept == [] and later.by_peer == {("copier", "copied_group"): 1, ("honest", "peer_duplicate"): 1}
    ledger = PeerLedger()
    ledger.charge_counts(first.by_peer + later.by_peer)
    assert ledger.score("copier") == 0.0 and ledger.score("honest") == 0.0  # a lost race or a copy costs nothing
    # log-probs are not content (tests/peers/test_peers_copies.py): a moved one is still a copy
    other = type(honest).build(**{**fields, "logp_gen": [lp - 0.1 for lp in honest.logp_gen]},
                               created_at=honest.created_at, sender="copier")
    assert content_digest(other) == content_digest(honest)
