"""The hint a round pointer signs (`records.PointedGroup.hint`), the selection's order by it, and the
tolerance a reader's verifier gives it (`node.hints.contradicts`): records and bookkeeping, no network."""

from __future__ import annotations

import dataclasses
import hashlib
import secrets

import base58
import numpy as np
import pytest
from record_peers import RUN, Peer, W

from ftis_swarm.config import WireConfig
from ftis_swarm.lab.hostile.floods import make_group
from ftis_swarm.node.hints import UNDER_SLACK, check_hints, contradicts
from ftis_swarm.node.scoring import ScoredBatch
from ftis_swarm.peers import faults
from ftis_swarm.peers.intake import Budget
from ftis_swarm.swarm.fetch.selection import Selection
from ftis_swarm.swarm.records import RECORD_VERSION, GroupPointer, RoundPointer, check_body, make_round_pointer
from ftis_swarm.wire import encode_group

BUDGET = Budget(max_groups=64, max_groups_per_peer=16, max_tokens=1000, max_tokens_per_peer=500, context=4096)
NAMES: dict[str, str] = {}


def _round(name: str, *, groups: int, tokens: int = 100) -> list[GroupPointer]:
    """A round of `groups` pointers of the publisher `name`, in arrival order."""
    publisher = base58.b58encode(hashlib.sha256(name.encode()).digest()).decode()
    NAMES[publisher] = name
    out = []
    for i in range(groups):
        gid = secrets.token_hex(16)
        out.append(GroupPointer(v=RECORD_VERSION, group_id=gid, size=100, sha256=gid + "0" * 32, publisher=publisher,
                                created_at=1000.0 + i, run_id="run", tokenizer_fp="tok", window=1, round=0,
                                round_groups=groups, tokens=tokens, puzzle="0" * 16))
    return out


def _selection(scores: dict[str, float], *, seed: str = "me") -> Selection:
    return Selection(BUDGET, seed=seed, score=lambda peer: scores.get(NAMES.get(peer, ""), 0.0))


def _offer(selection: Selection, *rounds: list[GroupPointer]) -> None:
    for pointers in rounds:
        for p in pointers:
            assert selection.offer(p) == []


def test_a_hint_is_signed_per_group_and_read_back_through_the_views(alice, bob):
    checker = bob.checker
    groups = [{"sha256": secrets.token_bytes(32), "size": 100_000, "created_at": 1.0, "tokens": 6400,
               "hint": [7, 16]} for _ in range(32)]
    record = alice.pointer(n_groups=1, groups=groups)
    verdict = checker.examine(record)
    assert verdict.reason == "" and len(record.subkey) + len(record.value) < 4096  # 32 hinted groups: one record
    view = verdict.content.views()[0]
    assert (view.correct, view.samples, view.carries_signal) == (7, 16, True)
    for bad in ([17, 16], [0, 0], [1], [1, 2, 3], [-1, 4], [1.0, 4]):
        lied = alice.pointer(n_groups=1, groups=[{**groups[0], "hint": bad}])
        assert checker.examine(lied).reason == "bad_schema", bad
    unhinted = checker.examine(alice.pointer(n_groups=2)).content.views()  # no hint: an honest older-style group
    assert [(v.correct, v.samples, v.carries_signal) for v in unhinted] == [(None, None, None)] * 2


def test_an_older_pointer_is_refused_as_old_version_and_a_body_must_have_its_signed_samples(alice, bob):
    assert RECORD_VERSION == 7
    assert bob.checker.examine(alice.pointer(v=6)).reason == "old_version"  # a pointer that cannot say `aligned`
    assert bob.checker.examine(alice.pointer(v=5)).reason == "old_version"
    assert bob.checker.examine(alice.pointer(aligned=True)).content.views()[0].aligned
    assert bob.checker.examine(alice.pointer(aligned=1)).reason == "bad_schema"  # strictly a bool
    group = make_group(sender=alice.peer_id, run_id=RUN, item="x", tokens=24, tokenizer_fp="tok", vocab_size=1000)
    body = encode_group(group)
    pointer = make_round_pointer([(group, body)], publisher=alice.peer_id, run_id=RUN, tokenizer_fp="tok",
                                 window=W, round=0, puzzle=alice.puzzle, correct=[1])
    assert pointer.groups[0].hint == [1, group.G]
    assert RoundPointer.parse_strict(pointer.model_dump()) == pointer
    [view] = pointer.views()
    assert check_body(body, view, vocab_size=1000, limits=WireConfig())[1] == ""
    other = view.model_copy(update={"samples": group.G + 1})
    assert check_body(body, other, vocab_size=1000, limits=WireConfig())[1] == "pointer_mismatch"
    with pytest.raises(ValueError):
        make_round_pointer([(group, body)], publisher=alice.peer_id, run_id=RUN, tokenizer_fp="tok",
                           window=W, round=0, puzzle=alice.puzzle, correct=[1, 2])


def _hinted(pointers: list[GroupPointer], hints: list[tuple[int, int] | None]) -> list[GroupPointer]:
    return [p if h is None else p.model_copy(update={"correct": h[0], "samples": h[1]}) for p, h in zip(pointers, hints)]


def test_the_selection_spends_each_tier_on_groups_that_carry_gradient_first():
    # earned: 4 groups of 100 tokens each from one peer, a tier of 750 tokens; the two mixed ones come last in arrival
    sel = _selection({"earned": 1.0})
    earned = _hinted(_round("earned", groups=6), [(0, 4), (4, 4), None, (0, 4), (2, 4), (1, 4)])
    _offer(sel, earned)
    chosen = sel.choose().chosen
    assert [(p.correct, p.samples) for p in chosen] == [(2, 4), (1, 4), (None, None), (0, 4), (4, 4)]  # 500 per peer
    # strangers: a budget of 3 groups in the strangers' share; the draw's order is kept within each class
    sel = _selection({})
    strangers = [_hinted(_round(f"s{i}", groups=2), [(0, 4), (3, 4)]) for i in range(3)]
    blind = _selection({}, seed="me")
    _offer(sel, *strangers)
    _offer(blind, *[[p.model_copy(update={"correct": None, "samples": None}) for p in r] for r in strangers])
    sel.open(round=1)
    blind.open(round=1)
    got, without = sel.choose().chosen, blind.choose().chosen
    assert len(got) == len(without) == 2  # the strangers' share: 250 tokens
    assert all(p.correct == 3 for p in got)
    assert sum(1 for p in without if p.group_id in {q.group_id for r in strangers for q in r if q.correct == 3}) < 2


@pytest.mark.parametrize("hint, correct, unsettled, lie", [
    (3, 3, 0, False),  # the same verifier, the same count
    (3, 1, 2, False),  # two of its answers timed out here: the publisher may have settled them correct
    (3, 1, 1, True),  # two more than this node found, one unsettled: a claim no verifier here explains
    (1, 0, 0, True),  # an all-wrong group announced as mixed: the lie that buys a fetch
    (4 - UNDER_SLACK, 4, 0, False),  # one check of the publisher's timed out (scored 0 there)
    (4 - UNDER_SLACK - 1, 4, 0, True),  # more than that: an all-correct group announced as mixed twice over
])
def test_the_tolerance_is_what_an_honest_verifier_can_differ_by(hint, correct, unsettled, lie):
    assert contradicts(hint, correct=correct, unsettled=unsettled) is lie


def test_check_hints_charges_the_liar_never_the_honest_nor_a_group_without_a_hint():
    me, honest, liar = "me", "honest", "liar"
    groups = [dataclasses.replace(make_group(sender=s, run_id=RUN, item=f"x{i}", tokens=8, tokenizer_fp="tok",
                                             vocab_size=1000)) for i, s in enumerate((honest, liar, liar, me))]
    scored = ScoredBatch(groups=groups, rewards=[np.zeros(g.G, dtype=np.float32) for g in groups],
                         correct=[np.array([True] + [False] * (g.G - 1)) for g in groups], unsettled=[0, 0, 0, 0])
    hints = {groups[0].group_id: (1, groups[0].G), groups[1].group_id: (groups[1].G - 1, groups[1].G),
             groups[3].group_id: (0, groups[3].G)}  # groups[2]: no hint; groups[3]: own, never checked
    found, counts = check_hints(scored, hints, me=me)
    assert found == {(liar, faults.HINT_CONTRADICTED): 1} and counts == {"hints_checked": 2, "hints_contradicted": 1}
    assert faults.FAULTS["hint_contradicted"].signed and faults.cost_of("hint_contradicted") == faults.CONTRADICTS
