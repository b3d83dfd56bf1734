"""Copies earn nothing and cost the honest nothing (peers/copies.py, peers/intake.py, peers/ledger.py)."""

from __future__ import annotations

import json

import numpy as np
from wire_samples import groups_from

from ftis_swarm.peers import faults
from ftis_swarm.peers.copies import content_key, logp_key
from ftis_swarm.peers.intake import Budget, PeerIntake
from ftis_swarm.peers.ledger import PeerLedger
from ftis_swarm.wire import Group

FIELDS = ("run_id", "model_id", "policy_version", "tokenizer_fp", "task_id", "item_id", "prompt_ids", "temperature",
          "completion_ids", "logp_gen")


def allow_all(peer: str) -> bool:
    return True


def budget() -> Budget:
    return Budget(max_groups=64, max_groups_per_peer=16, max_tokens=4000, max_tokens_per_peer=2000, context=5000,
                  strangers_share=1.0)


def like(g: Group, sender: str, **over) -> Group:
    fields = {f: getattr(g, f) for f in FIELDS}
    return Group.build(**{**fields, **over}, created_at=g.created_at + 0.027, sender=sender)


def honest_group(seed: int = 3, sender: str = "honest") -> Group:
    return groups_from(np.random.default_rng(seed), sender, 1, length=10)[0]


def test_the_content_key_leaves_out_log_probs_prompt_order_and_sender_but_not_tokens_or_item():
    g = honest_group()
    ulp = [lp.copy() for lp in g.logp_gen]
    ulp[0][0] = np.nextafter(ulp[0][0], np.float32(0))
    same = [like(g, "copier"), like(g, "copier", logp_gen=ulp), like(g, "c", prompt_ids=np.append(g.prompt_ids, 7)),
            like(g, "c", completion_ids=g.completion_ids[::-1], logp_gen=g.logp_gen[::-1])]
    assert all(content_key(x) == content_key(g) for x in same)
    other_tokens = [c.copy() for c in g.completion_ids]
    other_tokens[1][-1] += 1
    assert content_key(like(g, "c", completion_ids=other_tokens)) != content_key(g)
    assert content_key(like(g, "c", item_id=g.item_id + "x")) != content_key(g)
    # the log-prob key: a copy (one ulp moved) keeps it; another policy's log-probs do not
    assert logp_key(same[1]) == logp_key(g) and logp_key(same[3]) == logp_key(g)
    assert logp_key(like(g, "c", logp_gen=[lp - 0.05 for lp in g.logp_gen])) != logp_key(g)


def test_a_copy_in_the_same_take_trains_once_costs_no_one_and_earns_no_credit():
    g = honest_group()
    copy = like(g, "copier")
    for order in ([g, copy], [copy, g]):  # the copier wins the race in the second
        intake = PeerIntake(budget())
        taken = intake.take(order, {}, allow_all)
        first, second = order
        assert taken.kept == [first]
        assert taken.by_peer == {(second.sender, faults.COPIED_GROUP): 1, (first.sender, faults.CONTESTED_GROUP): 1}
        ledger = PeerLedger()
        ledger.charge_counts(taken.by_peer)
        ledger.settle_update({first.sender: {"groups": 1}}, earned={first.sender: 1.0})
        assert ledger.score("honest") == 0.0 and ledger.score("copier") == 0.0  # no charge, no credit
        assert ledger.allows("honest") and ledger.allows("copier")
    # the withholding is one update's: the next update's credit is paid in full
    ledger.settle_update({"honest": {"groups": 1}}, earned={"honest": 0.5})
    assert ledger.score("honest") == 0.5


def test_a_later_copy_is_dropped_free_and_the_first_keeps_its_credit():
    g = honest_group()
    intake = PeerIntake(budget())
    assert intake.take([g], {}, allow_all).kept == [g]
    restored = PeerIntake(intake.budget)  # through a checkpoint
    restored.load_state(json.loads(json.dumps(intake.state())))
    later = restored.take([like(g, "copier"), like(g, "honest")], {}, allow_all)
    assert later.kept == []
    assert later.by_peer == {("copier", faults.COPIED_GROUP): 1, ("honest", faults.PEER_DUPLICATE): 1}
    ledger = PeerLedger()
    ledger.settle_update({"honest": {"groups": 1}}, earned={"honest": 1.0})
    ledger.charge_counts(later.by_peer)
    assert ledger.score("honest") == 1.0 and ledger.score("copier") == 0.0


def test_a_coincidence_is_counted_apart_and_costs_nothing():
    g = honest_group()
    other_policy = like(g, "honest-2", logp_gen=[lp - 0.3 for lp in g.logp_gen])
    taken = PeerIntake(budget()).take([g, other_policy], {}, allow_all)
    assert taken.kept == [g]
    assert taken.by_peer == {("honest-2", faults.SAME_CONTENT): 1, ("honest", faults.CONTESTED_GROUP): 1}
    assert all(faults.cost_of(r) == 0.0 for r in (faults.COPIED_GROUP, faults.SAME_CONTENT, faults.CONTESTED_GROUP))


def test_a_checkpoint_of_the_older_form_loads():
    g = honest_group()
    intake = PeerIntake(budget())
    intake.load_state({"deferred": [], "contents": [[content_key(g), "honest", g.group_id]], "takes": 3})
    taken = intake.take([like(g, "copier")], {}, allow_all)
    assert taken.kept == [] and taken.by_peer == {("copier", faults.SAME_CONTENT): 1}  # no log-prob key then
