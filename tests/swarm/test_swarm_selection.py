"""The budget's selection of offered groups (`fetch.selection`): pure bookkeeping, no network."""

from __future__ import annotations

import hashlib
import secrets
from collections import Counter

import base58

from ftis_swarm.peers.intake import Budget
from ftis_swarm.swarm.fetch.selection import STRANGERS_SHARE, Selection
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


def test_earned_peers_are_chosen_at_once_and_strangers_only_once_a_gather_opens():
    sel = _selection({"earned-a": 2.0, "earned-b": 1.0})
    _offer(sel, _round("earned-b", groups=5), _round("earned-a", groups=5), _round("s1", groups=4), _round("s2", groups=4))
    first = sel.choose(earned_owed=True)
    by_peer = names(first.chosen)
    reserve = int(STRANGERS_SHARE * BUDGET.max_tokens)
    assert by_peer == {"earned-a": 5, "earned-b": 2}  # the higher score first, within the budget less the reserve
    assert sel.used() == (700, 7) and BUDGET.max_tokens - reserve == 750  # an eighth group would cross 750
    sel.open()
    second = sel.choose(earned_owed=True)  # an earned round still owed: strangers get the reserve alone
    assert names(second.chosen) == {"s1": 1, "s2": 1}  # one of each in turn
    assert sel.used()[0] == 900 <= 700 + reserve
    third = sel.choose(earned_owed=False)  # every earned round in: the rest of the budget, earned first
    assert names(third.chosen) == {"earned-b": 1}
    assert sel.used() == (1000, 10)
    assert sel.in_flight() == 10 and sel.choose(earned_owed=False).chosen == []


def test_caps_per_peer_and_oversized_groups_cost_nothing():
    budget = Budget(max_groups=64, max_groups_per_peer=3, max_tokens=1000, max_tokens_per_peer=250, context=4096)
    sel = _selection({}, budget=budget)
    huge = _round("s-huge", groups=1, tokens=2000)
    _offer(sel, _round("s1", groups=6, tokens=100), huge)
    sel.open()
    choice = sel.choose(earned_owed=False)
    assert names(choice.chosen) == {"s1": 2}  # 250 tokens per peer: two groups of 100
    assert choice.dropped == huge  # no budget ever takes it: dropped at once, never fetched
    left = sel.next_gather()
    assert names(left) == {"s1": 4}  # the offers left out end with the gather
    assert sel.used() == (200, 2)  # the next gather starts with what is still being fetched


def test_a_refused_body_gives_its_tokens_back_and_an_accepted_one_keeps_them():
    sel = _selection({"e": 1.0}, budget=Budget(max_groups=8, max_groups_per_peer=8, max_tokens=400,
                                               max_tokens_per_peer=400, context=4096))
    pointers = _round("e", groups=4)
    _offer(sel, pointers)
    chosen = sel.choose(earned_owed=True).chosen
    assert len(chosen) == 3  # 400 less the strangers' 100
    sel.settled(chosen[0], accepted=True)
    sel.settled(chosen[1], accepted=False)
    assert sel.used() == (200, 2) and sel.in_flight() == 1
    assert [p.group_id for p in sel.choose(earned_owed=True).chosen] == [pointers[3].group_id]


def test_a_newer_round_replaces_the_offers_of_an_older_one():
    sel = _selection({})
    old, new = _round("s", groups=3, round=1, at=1000.0), _round("s", groups=2, round=2, at=2000.0)
    _offer(sel, old)
    assert sel.offer(new[0]) == old and sel.offer(new[1]) == []
    late = _round("s", groups=1, round=1, at=1500.0)[0]
    assert sel.offer(late) == [late]  # an older round than the one on offer
    sel.open()
    assert {p.round for p in sel.choose(earned_owed=False).chosen} == {2}


def test_strangers_are_drawn_at_random_seeded_and_every_publisher_is_used_over_a_run():
    publishers = [f"s{i:02d}" for i in range(32)]
    budget = Budget(max_groups=64, max_groups_per_peer=16, max_tokens=400, max_tokens_per_peer=400, context=4096)

    def gathers(seed: str, n: int) -> list[list[str]]:
        sel, out = _selection({}, seed=seed, budget=budget), []
        for g in range(n):
            _offer(sel, *(_round(p, groups=2, round=g, at=1000.0 * (g + 1)) for p in publishers))
            sel.open()
            chosen = sel.choose(earned_owed=False).chosen
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
