"""`PeerLedger`: costs, credit and score, bans that double up to an hour, allow and deny lists, state."""

from __future__ import annotations

import pytest

from ftis_swarm.config import LedgerConfig
from ftis_swarm.peers.faults import cost_of
from ftis_swarm.peers.ledger import PeerLedger, short_peer

A, B = "12D3KooWpeerAaaaaaaaaaaa", "12D3KooWpeerBbbbbbbbbbbb"


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def test_credit_and_costs_make_the_score():
    ledger = PeerLedger()
    ledger.credit(A, 3)
    assert ledger.score(A) == 3.0 and ledger.score(B) == 0.0
    ledger.charge(A, "unknown_item", 2)  # priced 0: the credit stays
    assert ledger.score(A) == 3.0 - 2 * cost_of("unknown_item") == 3.0
    ledger.charge(A, "prompt_mismatch")  # a proven fault: all its credit goes at once
    assert cost_of("prompt_mismatch") > 0
    assert ledger.score(A) == -cost_of("prompt_mismatch") and ledger.snapshot()[A]["credit"] == 0.0
    ledger.charge(B, "task_not_accepted", 5)  # an honest peer on another task costs nothing
    assert ledger.score(B) == 0.0 and ledger.allows(B)
    ledger.charge(B, "reason_the_swarm_adds")  # a reason with no price costs nothing, not a default
    assert ledger.score(B) == 0.0


def test_bans_double_from_a_minute_to_an_hour_and_end():
    clock = Clock()
    ledger = PeerLedger(LedgerConfig(), clock=clock)
    lengths = []
    for _ in range(8):
        ledger.charge(A, "forgery")  # 20 points: the threshold at once
        assert not ledger.allows(A)
        lengths.append(ledger.snapshot()[A]["banned_until"] - clock.now)
        clock.now += lengths[-1]
        assert ledger.allows(A)
    assert lengths == [60, 120, 240, 480, 960, 1920, 3600, 3600]
    assert ledger.snapshot()[A]["bans"] == 8


def test_small_faults_add_up_to_a_ban_and_the_debt_starts_afresh():
    clock = Clock()
    ledger = PeerLedger(LedgerConfig(ban_threshold=20.0), clock=clock)
    for _ in range(3):
        ledger.charge(A, "not_train_split")
    assert ledger.allows(A)
    ledger.charge(A, "not_train_split")  # 4 x 5 = 20
    assert not ledger.allows(A) and ledger.banned() == [A]
    clock.now += 61
    ledger.charge(A, "not_train_split")
    assert ledger.allows(A)  # 5 points since the ban, not 25


def test_allow_and_deny_lists():
    ledger = PeerLedger(LedgerConfig(deny_peers=[B]))
    assert ledger.allows(A) and not ledger.allows(B)
    private = PeerLedger(LedgerConfig(allow_peers=[A]))
    assert private.allows(A) and not private.allows(B)


def test_round_record_and_state_round_trip():
    clock = Clock()
    ledger = PeerLedger(clock=clock)
    ledger.charge(A, "nonfinite")
    ledger.charge(B, "unknown_item", 2)  # another dataset version: counted, free
    ledger.charge(B, "eval_task")
    ledger.credit(B, 4)
    assert ledger.take_round() == {"banned_peers": [short_peer(A)], "peers_banned": 1, "charged_eval_task": 1,
                                   "charged_nonfinite": 1, "charged_unknown_item": 2}
    assert ledger.take_round() == {"banned_peers": [short_peer(A)], "peers_banned": 1}  # counts per round; bans persist
    again = PeerLedger(clock=clock)
    again.load_state(ledger.state())
    decayed = 4.0 * 0.5 ** (2 / LedgerConfig().credit_half_life)  # the credit earned after the fault, two rounds on
    assert not again.allows(A) and again.score(B) == pytest.approx(decayed - 5.0)
    assert again.snapshot() == ledger.snapshot()


def test_swarm_faults_are_charged_with_their_own_costs_and_ban_the_forger():
    from collections import Counter

    from ftis_swarm.swarm import PeerPolicy

    ledger = PeerLedger()
    assert isinstance(ledger, PeerPolicy)  # what the swarm is handed
    me = "12D3KooWmeeeeeeeeeeeeeeee"
    ledger.charge_swarm({A: Counter(hash_mismatch=1), B: Counter(run_id=3, stale=2), me: Counter(malformed=9),
                         "<others>": Counter(bad_signature=50)}, me=me)
    assert ledger.score(A) == -cost_of("swarm_hash_mismatch") and ledger.allows(A)
    assert ledger.score(B) == 0.0  # another run, old groups: not faults
    assert ledger.score(me) == 0.0 and ledger.score("<others>") == 0.0  # never charged
    ledger.charge_swarm({A: Counter(hash_mismatch=1)})
    assert not ledger.allows(A)  # 20 points: banned, and the swarm stops fetching from it
    assert ledger.take_round()["charged_swarm_hash_mismatch"] == 2


def test_a_peer_that_was_down_is_not_banned_for_it_and_used_groups_pay_its_debt():
    from collections import Counter

    clock = Clock()
    ledger = PeerLedger(LedgerConfig(ban_threshold=20.0), clock=clock)
    # what a survivor's swarm reports about a peer killed with 60 announced groups pending: every DHT
    # read asks it in vain, three fetches fail in a row, then all its pending pointers are dropped
    down = Counter(dht_no_reply=300, body_unreachable=3, fetch_failed=60)
    ledger.charge_swarm({A: down})
    assert ledger.allows(A) and ledger.score(A) == 0.0  # none of it is signed: it costs nothing
    # back, its old bodies are gone: three more failed attempts, then its new groups are used
    ledger.charge_swarm({A: Counter(body_missing=3, fetch_failed=5)})
    ledger.credit(A, 2)
    assert ledger.snapshot()[A]["debt"] == 0.0 and ledger.score(A) == 2.0
    ledger.charge(A, "not_train_split", 3)  # a signed fault, 15 points: its used groups paid 2 back before
    ledger.credit(A, 2)
    assert ledger.snapshot()[A]["debt"] == 13.0 and ledger.allows(A)
    for _ in range(30):  # a long run of such restarts, each followed by a few used groups: never a ban
        ledger.charge_swarm({A: Counter(body_unreachable=3, body_missing=3, fetch_failed=40, dht_no_reply=100)})
        ledger.credit(A, 3)
    assert ledger.allows(A) and ledger.snapshot()[A]["bans"] == 0
    ledger.charge(A, "forgery")  # one forged group still bans at once, debt or none
    assert not ledger.allows(A)
    # a peer whose fetches stall loses fetches (the swarm backs off from it), never points
    ledger.charge_swarm({B: Counter(body_stalled=10, stalled=16)})
    assert ledger.allows(B) and ledger.score(B) == 0.0


def test_credit_is_earned_from_signal_and_bounded_per_update():
    from collections import Counter

    ledger = PeerLedger(LedgerConfig(max_credit_per_update=4.0))
    # A: 10 groups in the update, 6.5 groups' worth of samples carried signal; B: groups, no signal
    ledger.settle_update({A: Counter(groups=10), B: Counter(groups=3, nonfinite=1)}, me="self",
                         earned={A: 6.5, B: 0.0, "self": 9.0})
    assert ledger.score(A) == 4.0  # bounded
    assert ledger.score(B) == -20.0  # arriving earns nothing; the non-finite group costs (a signed fault)
    assert ledger.score("self") == 0.0


def test_credit_decays_by_its_half_life_once_a_round_and_never_below_zero():
    ledger = PeerLedger(LedgerConfig(credit_half_life=10.0))
    ledger.credit(A, 4)
    for _ in range(10):
        ledger.take_round()
    assert ledger.score(A) == pytest.approx(2.0, rel=1e-9)  # one half-life
    for _ in range(10):
        ledger.take_round()
    assert ledger.score(A) == pytest.approx(1.0, rel=1e-9)
    still = PeerLedger(LedgerConfig(credit_half_life=0.0))  # 0: no decay
    still.credit(A, 4)
    for _ in range(100):
        still.take_round()
    assert still.score(A) == 4.0
