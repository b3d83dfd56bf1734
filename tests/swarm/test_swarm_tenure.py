"""Tenure: peers that have served cleanly rank first without credit, a crowd that arrives at once waits (issue 40).

Honest tiny models never solve an item, so their groups carry no gradient and earn no credit: by
credit alone they draw as strangers beside a crowd of 20 origins and get 2 turns in 22. The ledger
counts each peer's tenure (updates its groups entered with no proven fault since); a settled peer
ranks in the first part of the budget, in the selection (what is fetched) and the intake (what the
update takes) alike, with origins of a longer tenure (on a doubling scale) first.
"""

from __future__ import annotations

import hashlib
import secrets
from collections import Counter

import base58
import numpy as np
from wire_samples import groups_from

from ftis_swarm.config import LedgerConfig
from ftis_swarm.peers.draw import earned_in_turns
from ftis_swarm.peers.intake import Budget, PeerIntake
from ftis_swarm.peers.ledger import PeerLedger
from ftis_swarm.swarm.fetch.selection import Selection
from ftis_swarm.swarm.records import RECORD_VERSION, GroupPointer

NAMES: dict[str, str] = {}


def pid(name: str) -> str:
    peer = base58.b58encode(b"\x12\x20" + hashlib.sha256(name.encode()).digest()).decode()
    NAMES[peer] = name
    return peer


CROWD = [pid(f"crowd-{i:02d}") for i in range(20)]
FAIR = [pid("fair-a"), pid("fair-b")]
# the tiny preset's shape: a budget of 192 peer tokens, a quarter for strangers; honest groups of 24 tokens
BUDGET = Budget(max_groups=64, max_groups_per_peer=32, max_tokens=192, max_tokens_per_peer=96, context=4096,
                strangers_share=0.25, max_tokens_per_origin=96, max_groups_per_origin=32, recent_share=0.25)


def origin_of(peer: str) -> str:
    return f"10.{FAIR.index(peer)}.0.0/24" if peer in FAIR else f"127.0.{CROWD.index(peer)}.0/24"


def test_tenure_counts_updates_with_groups_and_a_proven_fault_ends_it():
    ledger = PeerLedger(LedgerConfig(settled_rounds=4))
    peer, other = FAIR
    for _ in range(3):
        ledger.settle_update({peer: Counter(groups=2), other: Counter(groups=1, peer_over_share=3)})
    assert ledger.tenure(peer) == 3 and not ledger.settled(peer)
    ledger.settle_update({peer: Counter(groups=1)})
    assert ledger.settled(peer) and ledger.tenure_class(peer) == 3  # 4: the class of 4-7
    assert ledger.tenure(other) == 3  # a free reason (lost the draw) is no fault
    ledger.settle_update({peer: Counter(peer_refused=1)})  # no group entered: no tenure, no fault
    assert ledger.tenure(peer) == 4
    restored = PeerLedger(LedgerConfig(settled_rounds=4))
    restored.load_state(ledger.state())
    assert restored.tenure(peer) == 4 and restored.settled(peer)
    ledger.charge(peer, "forgery")  # a proven fault takes tenure with credit
    assert ledger.tenure(peer) == 0 and not ledger.settled(peer) and ledger.tenure_class(peer) == 0
    ledger.settle_update({other: Counter(groups=1, forgery=1)})  # its groups entered, but it was caught
    assert ledger.tenure(other) == 0
    assert [PeerLedger().tenure_class(p) for p in CROWD[:1]] == [0]


def test_origins_of_a_higher_tenure_class_take_all_their_turns_first():
    offers = [(p, i) for p in CROWD[:4] + FAIR for i in range(3)]
    tier = {**{p: 2 for p in CROWD[:4]}, FAIR[0]: 4, FAIR[1]: 3}
    order = earned_in_turns(offers, sender=lambda o: o[0], origin_of=origin_of, score=lambda p: 0.0, seed="me",
                            draw=1, tier=tier.__getitem__)
    assert [p for p, _ in order[:6]] == [FAIR[0]] * 3 + [FAIR[1]] * 3
    assert {p for p, _ in order[6:10]} == set(CROWD[:4])  # the crowd's class in turns, one group each
    flat = earned_in_turns(offers, sender=lambda o: o[0], origin_of=origin_of, score=lambda p: 0.0, seed="me", draw=1)
    assert [p for p, _ in flat[:6]] != [p for p, _ in order[:6]]  # one class: all six origins in turns


def _pointers(peer: str, *, groups: int, tokens: int) -> list[GroupPointer]:
    return [GroupPointer(v=RECORD_VERSION, group_id=(gid := secrets.token_hex(16)), size=100, sha256=gid + "0" * 32,
                         publisher=peer, created_at=1000.0 + i, run_id="run", tokenizer_fp="tok", window=1,
                         round=0, round_groups=groups, tokens=tokens, puzzle="0" * 16) for i in range(groups)]


def _ledger(crowd_tenure: int, *, credit: bool = True) -> PeerLedger:
    """Honest peers that served 8 updates; the crowd `crowd_tenure`, with a sliver of credit (junk that claims p = 1:
    recent credit, bounded together) or none."""
    ledger = PeerLedger(LedgerConfig(settled_rounds=4))
    for n in range(8):
        ledger.settle_update({p: Counter(groups=1) for p in FAIR + (CROWD if n >= 8 - crowd_tenure else [])},
                             earned={p: 0.01 for p in CROWD} if n == 0 and credit else None)
    return ledger


def _select(ledger: PeerLedger, *, tenure: bool) -> Counter:
    sel = Selection(BUDGET, seed="me", score=ledger.score, origin_of=origin_of, recent=ledger.recent,
                    settled=ledger.settled if tenure else None, tier=ledger.tenure_class if tenure else None)
    for p in [*(q for c in CROWD for q in _pointers(c, groups=4, tokens=6)),
              *(q for h in FAIR for q in _pointers(h, groups=2, tokens=24))]:
        sel.offer(p)
    chosen = sel.choose().chosen
    sel.open(round=1)
    chosen += sel.choose().chosen
    return Counter({k: sum(p.tokens for p in chosen if (p.publisher in FAIR) == (k == "fair"))
                    for k in ("fair", "crowd")})


def _take(ledger: PeerLedger, *, tenure: bool) -> Counter:
    rng = np.random.default_rng(0)
    groups = [g for c in CROWD for g in groups_from(rng, c, 4, length=3)]  # 2 completions of 3: 6 tokens
    groups += [g for h in FAIR for g in groups_from(rng, h, 2, length=12)]  # 24 tokens
    taken = PeerIntake(BUDGET, seed="me").take(groups, {}, lambda peer: True, standing=lambda peer: False,
                                                rank=ledger.score, origin=origin_of, draw=1, recent=ledger.recent,
                                                settled=ledger.settled if tenure else None,
                                                tier=ledger.tenure_class if tenure else None)
    return Counter({k: sum(g.num_completion_tokens for g in taken.kept if (g.sender in FAIR) == (k == "fair"))
                    for k in ("fair", "crowd")})


def test_settled_honest_peers_without_credit_keep_their_groups_against_a_fresh_crowd_on_20_origins():
    ledger = _ledger(crowd_tenure=0)
    assert all(ledger.score(c) > 0 and ledger.recent(c) for c in CROWD) and ledger.score(FAIR[0]) == 0
    for run in (_select, _take):
        with_tenure, without = run(ledger, tenure=True), run(ledger, tenure=False)
        assert with_tenure["fair"] == 4 * 24, (run.__name__, with_tenure)  # every honest group, as with no crowd
        assert without["fair"] < 2 * 24, (run.__name__, without)  # by credit alone: turns beside 20 origins
        # the fresh crowd: its recent part and the strangers' draw, never more
        assert with_tenure["crowd"] <= (BUDGET.recent_share + BUDGET.strangers_share) * BUDGET.max_tokens


def test_a_patient_crowd_of_the_same_class_shares_the_turns_origin_by_origin():
    ledger = _ledger(crowd_tenure=8, credit=False)  # served as long as the honest peers, one class, no credit bound
    assert ledger.tenure_class(CROWD[0]) == ledger.tenure_class(FAIR[0])
    chosen = _select(ledger, tenure=True)
    assert 0 < chosen["fair"] < 4 * 24 and chosen["crowd"] > 0, chosen  # turns, not precedence
    younger = _ledger(crowd_tenure=4, credit=False)  # half as long: a class below, after every honest group
    assert _select(younger, tenure=True)["fair"] == 4 * 24
