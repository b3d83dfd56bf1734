"""The budget's selection of offered groups (`fetch.selection`): pure bookkeeping, no network."""

from __future__ import annotations

import dataclasses
import hashlib
import secrets
from collections import Counter

import base58
import numpy as np
import pytest
from wire_samples import groups_from

from ftis_swarm.peers.intake import Budget, PeerIntake
from ftis_swarm.swarm.fetch.selection import Selection
from ftis_swarm.swarm.records import RECORD_VERSION, GroupPointer

BUDGET = Budget(max_groups=64, max_groups_per_peer=16, max_tokens=1000, max_tokens_per_peer=500, context=4096)


def pid(name: str) -> str:
    """A peer id for a short name (publishers are peer ids)."""
    return base58.b58encode(hashlib.sha256(name.encode()).digest()).decode()


NAMES: dict[str, str] = {}


def names(pointers: list[GroupPointer]) -> Counter:
    return Counter(NAMES[p.publisher] for p in pointers)


def _round(name: str, *, groups: int, tokens: int = 100, round: int = 0, at: float = 1000.0) -> list[GroupPointer]:
    publisher = pid(name)
    NAMES[publisher] = name
    out = []
    for i in range(groups):
        gid = secrets.token_hex(16)
        out.append(GroupPointer(v=RECORD_VERSION, group_id=gid, size=100, sha256=gid + "0" * 32, publisher=publisher,
                                created_at=at + i, run_id="run", tokenizer_fp="tok", window=1, round=round,
                                round_groups=groups, tokens=tokens, puzzle="0" * 16))
    return out


def _selection(scores: dict[str, float], *, seed: str = "me", budget: Budget = BUDGET) -> Selection:
    return Selection(budget, seed=seed, score=lambda peer: scores.get(NAMES.get(peer, ""), 0.0))


def _offer(selection: Selection, *rounds: list[GroupPointer]) -> None:
    for pointers in rounds:
        for p in pointers:
            assert selection.offer(p) == []


def test_earned_peers_are_chosen_at_once_and_strangers_only_once_a_gather_opens_each_tier_in_its_part():
    sel = _selection({"earned-a": 2.0, "earned-b": 1.0})
    _offer(sel, _round("earned-b", groups=5), _round("earned-a", groups=5), _round("s1", groups=4), _round("s2", groups=4))
    first = sel.choose()
    by_peer = names(first.chosen)
    reserve = int(BUDGET.strangers_share * BUDGET.max_tokens)
    assert by_peer == {"earned-a": 4, "earned-b": 3}  # in turns, the higher score first, within the budget less the reserve
    assert sel.used() == (700, 7) and BUDGET.max_tokens - reserve == 750  # an eighth group would cross 750
    sel.open()
    second = sel.choose()  # the reserve: strangers and the earned peers' left over, one of each publisher in turn
    assert len(second.chosen) == 2 and set(names(second.chosen)) <= {"s1", "s2", "earned-a", "earned-b"}
    assert max(names(second.chosen).values()) == 1
    assert sel.used() == (900, 9) and reserve == 250  # a third group would cross 250
    assert sel.choose().chosen == []  # neither tier takes the other's part (the intake's rule)
    assert sel.in_flight() == 9


def test_the_strangers_share_comes_from_the_budget():
    budget = Budget(max_groups=64, max_groups_per_peer=16, max_tokens=1000, max_tokens_per_peer=500, context=4096,
                    strangers_share=0.5)
    sel = _selection({}, budget=budget)
    _offer(sel, *(_round(f"s{i}", groups=2) for i in range(8)))
    sel.open()
    assert sel.used() == (0, 0) and len(sel.choose().chosen) == 5 and sel.used() == (500, 5)
    none = _selection({}, budget=dataclasses.replace(budget, strangers_share=0.0))
    _offer(none, _round("s", groups=2))
    none.open()
    assert none.choose().chosen == []  # no share: strangers are never fetched


def test_a_scored_peer_keeps_a_strangers_chance_when_the_whole_budget_is_the_strangers_share():
    budget = Budget(max_groups=64, max_groups_per_peer=16, max_tokens=400, max_tokens_per_peer=400, context=4096,
                    strangers_share=1.0)
    sel = _selection({"scored": 1.0}, budget=budget)
    _offer(sel, _round("scored", groups=2), _round("s", groups=2))
    assert sel.choose().chosen == []  # no earned part at all
    sel.open()
    assert names(sel.choose().chosen) == {"scored": 2, "s": 2}  # drawn with the strangers, as the intake would


def test_caps_per_peer_and_oversized_groups_cost_nothing():
    budget = Budget(max_groups=64, max_groups_per_peer=3, max_tokens=1000, max_tokens_per_peer=250, context=4096)
    sel = _selection({}, budget=budget)
    huge = _round("s-huge", groups=1, tokens=2000)
    _offer(sel, _round("s1", groups=6, tokens=100), huge)
    sel.open()
    choice = sel.choose()
    assert names(choice.chosen) == {"s1": 2}  # 250 tokens per peer: two groups of 100
    assert choice.dropped == huge  # no budget ever takes it: dropped at once, never fetched
    assert sel.next_gather() == []  # the offers left stay on offer for the next gather
    assert sel.used() == (200, 2)  # the next gather starts with what is still being fetched
    sel.open()
    assert sel.choose().chosen == []  # s1's two in flight hold 200 of its 250 tokens
    assert names(sel.next_gather()) == {"s1": 4}  # and at its end the four left are dropped


def test_an_offer_missed_by_one_draw_is_in_the_next_and_then_ends():
    budget = Budget(max_groups=64, max_groups_per_peer=16, max_tokens=400, max_tokens_per_peer=400, context=4096,
                    strangers_share=0.25)  # 100 tokens: one group of 100 a gather
    sel = _selection({}, budget=budget)
    _offer(sel, _round("a", groups=1), _round("b", groups=1))
    sel.open(round=0)
    first = sel.choose().chosen
    assert len(first) == 1
    for p in first:
        sel.settled(p, accepted=True)
    assert sel.next_gather() == []  # the one not drawn is carried
    sel.open(round=1)
    second = sel.choose().chosen
    assert len(second) == 1 and {first[0].publisher, second[0].publisher} == {pid("a"), pid("b")}
    for p in second:
        sel.settled(p, accepted=True)
    assert sel.next_gather() == []
    _offer(sel, _round("c", groups=2))
    sel.open(round=2)
    assert names(sel.choose().chosen) == {"c": 1}
    assert sel.next_gather() == []  # c's other group came in this gather: carried once
    sel.open(round=3)
    assert sel.choose().chosen == []  # the budget's 100 tokens hold c's first, still not settled
    assert names(sel.next_gather()) == {"c": 1}  # then it ends


def test_a_refused_body_gives_its_tokens_back_and_an_accepted_one_keeps_them():
    sel = _selection({"e": 1.0}, budget=Budget(max_groups=8, max_groups_per_peer=8, max_tokens=400,
                                               max_tokens_per_peer=400, context=4096))
    pointers = _round("e", groups=4)
    _offer(sel, pointers)
    chosen = sel.choose().chosen
    assert len(chosen) == 3  # 400 less the strangers' 100
    sel.settled(chosen[0], accepted=True)
    sel.settled(chosen[1], accepted=False)
    assert sel.used() == (200, 2) and sel.in_flight() == 1
    assert [p.group_id for p in sel.choose().chosen] == [pointers[3].group_id]


def test_a_newer_round_replaces_the_offers_of_an_older_one():
    sel = _selection({})
    old, new = _round("s", groups=3, round=1, at=1000.0), _round("s", groups=2, round=2, at=2000.0)
    _offer(sel, old)
    assert sel.offer(new[0]) == old and sel.offer(new[1]) == []
    late = _round("s", groups=1, round=1, at=1500.0)[0]
    assert sel.offer(late) == [late]  # an older round than the one on offer
    sel.open()
    assert {p.round for p in sel.choose().chosen} == {2}


def test_strangers_are_drawn_at_random_seeded_and_every_publisher_is_used_over_a_run():
    publishers = [f"s{i:02d}" for i in range(32)]
    budget = Budget(max_groups=64, max_groups_per_peer=16, max_tokens=400, max_tokens_per_peer=400, context=4096,
                    strangers_share=1.0)

    def gathers(seed: str, n: int) -> list[list[str]]:
        sel, out = _selection({}, seed=seed, budget=budget), []
        for g in range(n):
            for pointers in (_round(p, groups=2, round=g, at=1000.0 * (g + 1)) for p in publishers):
                for pointer in pointers:  # a newer round replaces the offers carried from the last gather
                    sel.offer(pointer)
            sel.open()
            chosen = sel.choose().chosen
            for p in chosen:
                sel.settled(p, accepted=True)
            out.append(sorted(names(chosen)))
            sel.next_gather()
        return out

    a, b = gathers("node-a", 40), gathers("node-b", 40)
    assert all(len(chosen) == 4 for chosen in a)  # 400 tokens: four groups, one of each of four publishers
    assert a == gathers("node-a", 40)  # seeded: the same node makes the same draws
    assert a != b  # two nodes draw differently
    assert {p for chosen in a + b for p in chosen} == set(publishers)  # over a run every publisher is used


def _groups_and_pointers(rng, name: str, n: int) -> tuple[list, list[GroupPointer]]:
    """`n` groups of 20 completion tokens from `name`, and the pointers that announce them (oldest first)."""
    publisher = pid(name)
    NAMES[publisher] = name
    groups = groups_from(rng, publisher, n, length=10)
    groups = [type(g).build(**{f: getattr(g, f) for f in _FIELDS}, sender=publisher, created_at=1000.0 + i)
              for i, g in enumerate(groups)]
    pointers = [GroupPointer(v=RECORD_VERSION, group_id=g.group_id, size=100, sha256=g.group_id + "0" * 32,
                             publisher=publisher, created_at=g.created_at, run_id="run", tokenizer_fp="tok", window=1,
                             round=0, round_groups=n, tokens=g.num_completion_tokens, puzzle="0" * 16)
                for g in groups]
    return groups, pointers


_FIELDS = ("run_id", "model_id", "policy_version", "tokenizer_fp", "task_id", "item_id", "prompt_ids", "temperature",
           "completion_ids", "logp_gen")


def test_the_swarm_fetches_for_the_strangers_share_exactly_what_the_intake_takes():
    rng = np.random.default_rng(5)
    crowd = [_groups_and_pointers(rng, f"crowd-{i:02d}", 2) for i in range(12)]
    lone = [_groups_and_pointers(rng, f"lone-{i}", 2) for i in range(2)]
    origins = {**{pid(f"crowd-{i:02d}"): "10.0.0.0/24" for i in range(12)}, pid("lone-0"): "10.0.1.0/24"}
    budget = Budget(max_groups=64, max_groups_per_peer=16, max_tokens=400, max_tokens_per_peer=200, context=4096,
                    strangers_share=0.25)  # 100 tokens: five groups of 20 for strangers
    for draw in range(6):
        sel = Selection(budget, seed="node", score=lambda peer: 0.0, origin_of=origins.get)
        _offer(sel, *(pointers for _, pointers in crowd + lone))
        sel.open(round=draw)
        fetched = {p.group_id for p in sel.choose().chosen}
        groups = [g for gs, _ in crowd + lone for g in gs]
        taken = PeerIntake(budget, seed="node").take(groups, {}, lambda peer: True, origin=origins.get, draw=draw)
        assert len(fetched) == 5 and [g.group_id for g in taken.kept if g.group_id in fetched] == \
            [g.group_id for g in taken.kept]
        assert {g.group_id for g in taken.kept} == fetched  # the same groups, from all on offer
        only = PeerIntake(budget, seed="node").take([g for g in groups if g.group_id in fetched], {},
                                                    lambda peer: True, origin=origins.get, draw=draw)
        assert {g.group_id for g in only.kept} == fetched  # and of what was fetched the intake takes it all
        by_origin = Counter(origins.get(g.sender, g.sender) for g in taken.kept)
        # three origins (the crowd's, lone-0's, and lone-1 alone: none known) take turns: 12 identities, 2 of 5
        assert sorted(by_origin.values()) == [1, 2, 2] and by_origin["10.0.0.0/24"] <= 2


@pytest.mark.parametrize("seed", ["me", "z"])
def test_a_carried_offer_is_drawn_only_with_the_strangers_even_an_earned_peers(seed):
    scores: dict[str, float] = {}
    budget = Budget(max_groups=64, max_groups_per_peer=16, max_tokens=400, max_tokens_per_peer=400, context=4096,
                    strangers_share=0.25)  # strangers: 100 tokens, one group of 100; earned: three
    sel = _selection(scores, budget=budget, seed=seed)
    _offer(sel, _round("x", groups=2))
    sel.open(round=0)
    first = sel.choose().chosen
    assert names(first) == {"x": 1}
    sel.settled(first[0], accepted=True)
    assert sel.next_gather() == []  # x's other group is carried
    scores["x"] = 1.0  # x earns credit
    assert sel.choose().chosen == []  # the carried offer is not the earned tier's: it waits for the draw
    fresh = _round("e", groups=4, at=2000.0)
    scores["e"] = 2.0
    _offer(sel, fresh)
    earned = sel.choose().chosen
    assert names(earned) == {"e": 3}  # a fresh earned offer is taken on arrival, within 300
    sel.open(round=1)
    chosen = sel.choose().chosen
    for p in earned + chosen:
        sel.settled(p, accepted=True)
    drawn = names(chosen)  # one strangers' turn: x's carried offer, or e's fourth left over
    assert sum(drawn.values()) == 1 and set(drawn) <= {"x", "e"}
    assert names(sel.next_gather()) == Counter({"x": 1}) - drawn  # x's had its two gathers; e's is carried
    assert drawn == {"me": {"e": 1}, "z": {"x": 1}}[seed]  # the seeded draw: each case once
    if drawn["e"] == 0:
        assert names(sel.choose().chosen) == {}  # carried: not the earned tier's any more
        sel.open(round=2)
        assert names(sel.choose().chosen) == {"e": 1}  # but in the next draw


def test_the_same_group_id_from_two_publishers_is_two_offers_and_none_breaks_the_book():
    """A pointer that names a group id another publisher has on offer (issue 38's remote crash: a KeyError
    in `_withdraw` or `next_gather` ended the node) is an offer of its own: chosen, carried, dropped and
    settled apart from the genuine one, and neither's way out touches the other's."""
    budget = Budget(max_groups=1, max_groups_per_peer=1, max_tokens=100, max_tokens_per_peer=100, context=4096,
                    strangers_share=1.0)  # one group a gather: the rest is carried, then dropped
    sel = _selection({}, budget=budget)
    honest = _round("honest", groups=2)
    copier = [p.model_copy(update={"publisher": pid("copier")}) for p in honest]
    NAMES[pid("copier")] = "copier"
    _offer(sel, honest, copier)
    seen = Counter()
    for gather in range(3):
        sel.open(round=gather)
        choice = sel.choose()
        for p in choice.chosen:
            seen[(NAMES[p.publisher], p.group_id)] += 1
            sel.settled(p, accepted=NAMES[p.publisher] == "honest")
        for p in choice.dropped + sel.next_gather():
            seen[(NAMES[p.publisher], p.group_id)] += 1
    assert len(seen) == 4 and set(seen.values()) == {1}  # each offer left exactly once, whichever way
    assert sel.in_flight() == 0 and sel.used() == (0, 0)
    sel.open(round=3)
    assert sel.choose().chosen == [] and sel.next_gather() == []  # nothing left behind in any table


def test_a_refused_copy_gives_back_its_own_tokens_not_the_genuine_offers():
    budget = Budget(max_groups=4, max_groups_per_peer=4, max_tokens=400, max_tokens_per_peer=400, context=4096,
                    strangers_share=1.0)
    sel = _selection({}, budget=budget)
    [genuine] = _round("honest2", groups=1)
    copy = genuine.model_copy(update={"publisher": pid("copier2")})
    NAMES[pid("copier2")] = "copier2"
    _offer(sel, [genuine], [copy])
    sel.open()
    assert names(sel.choose().chosen) == {"honest2": 1, "copier2": 1}
    sel.settled(copy, accepted=False)  # its body names another sender: `sender_mismatch`
    assert sel.used() == (100, 1) and sel.in_flight() == 1
    sel.settled(copy, accepted=False)  # settled twice: nothing more given back
    assert sel.used() == (100, 1)
    sel.settled(genuine, accepted=True)
    assert sel.used() == (100, 1) and sel.in_flight() == 0
