"""`peers/faults.py`: one table prices every reason; only what a peer signed costs it; no bare reason strings.

The scan reads the product's source (everything outside `lab/`) with `ast` and fails on a
reason written as a string at a place that raises one, so a reason added without an entry
in the table cannot reach the ledger unpriced.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import pytest

from ftis_swarm.config import LedgerConfig
from ftis_swarm.peers import faults
from ftis_swarm.peers.ledger import PeerLedger

PACKAGE = Path(faults.__file__).resolve().parents[1]
A = "12D3KooWpeerAaaaaaaaaaaa"

REASON_CALLS = {"reject": 1, "_reject": 1, "_on_reject": 1, "fault": 1, "_count": 1, "charge": 1, "Verdict": 0,
                "MessageVerdict": 0, "BodyUnavailable": 0, "BodyRefused": 0}
"""Calls with a reason argument, and its place (the counters, the ledger, the verdicts and errors that carry one)."""
REASON_NAMES = {"reason", "fault", "final"}
"""Variables that hold a reason where one is raised."""
REASON_TABLES = {"refused", "faults", "report", "counts", "out"}
"""Counters indexed by reason at the raise sites."""
NOT_REASONS = {"groups", "stale_groups", "capped_completions", "capped_no_positive"}
"""Counts kept beside the reasons: `peer_report`'s used groups (credit), a round's off-policy own groups, its
completions that hit the token cap (`learner.truncated_completions`)."""


class Scan(ast.NodeVisitor):
    """Bare reason strings at raise sites: call arguments, Counter keys, reason variables, returns."""

    def __init__(self, path: Path) -> None:
        self.path, self.found = path, []

    def _flag(self, node: ast.AST, what: str, *, fstrings: bool = True) -> None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier() \
                and node.value not in NOT_REASONS:
            self.found.append(f"{self.path.relative_to(PACKAGE.parent)}:{node.lineno} {what} {node.value!r}")
        elif fstrings and isinstance(node, ast.JoinedStr):
            self.found.append(f"{self.path.relative_to(PACKAGE.parent)}:{node.lineno} {what} an f-string")

    def visit_Call(self, node: ast.Call) -> None:
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if name in REASON_CALLS and len(node.args) > REASON_CALLS[name]:
            self._flag(node.args[REASON_CALLS[name]], f"{name}()")
        if name == "Counter":
            for kw in node.keywords:
                self.found.append(f"{self.path.relative_to(PACKAGE.parent)}:{node.lineno} Counter({kw.arg}=)")
            for arg in node.args:
                for key in getattr(arg, "keys", []):
                    self._flag(key, "Counter key")
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        table = node.value.attr if isinstance(node.value, ast.Attribute) else getattr(node.value, "id", "")
        if table in REASON_TABLES or (isinstance(node.value, ast.Call) and getattr(node.value.func, "attr", "")
                                      == "setdefault"):
            self._flag(node.slice, f"{table}[]", fstrings=False)  # metrics tables name keys with f-strings
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        if any(isinstance(t, ast.Name) and t.id in REASON_NAMES for t in node.targets):
            for value in (node.value.body, node.value.orelse) if isinstance(node.value, ast.IfExp) else (node.value,):
                self._flag(value, "reason =")
        self.generic_visit(node)

    def visit_Return(self, node: ast.Return) -> None:
        values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
        if values and values[0] is not None:
            for value in (values[0].body, values[0].orelse) if isinstance(values[0], ast.IfExp) else values[:1]:
                self._flag(value, "return")
        self.generic_visit(node)


RAISE_SITES = ["swarm/counters.py", "swarm/records.py", "swarm/gossip/gate.py", "swarm/gossip/channel.py",
               "swarm/dht/storage.py", "swarm/dht/guard.py", "swarm/dht/reading.py", "swarm/dht/validators.py",
               "swarm/fetch/outcomes.py", "swarm/fetch/holders.py", "swarm/fetch/streams.py", "swarm/fetch/gatherer.py",
               "swarm/fetch/scheduler.py", "node/hints.py",
               "swarm/dht/origin_quota.py", "swarm/puzzle.py",
               "learner/learner.py", "node/scoring.py", "node/learning.py", "peers/intake.py", "peers/ledger.py",
               "peers/loopback.py"]


def test_no_raise_site_names_a_reason_with_a_bare_string():
    found = []
    for rel in RAISE_SITES:
        path = PACKAGE / rel
        scan = Scan(path)
        scan.visit(ast.parse(path.read_text(), str(path)))
        found += scan.found
    assert found == []


def test_the_scan_catches_a_bare_reason_and_every_product_module_that_counts_one_is_scanned():
    scan = Scan(PACKAGE / "x.py")
    scan.visit(ast.parse('counters.reject(p, "newly_invented")\nrefused["other"] += 1\nreturn_ = Counter(x=1)\n'
                         'def f():\n    return "also_new"\n'))
    assert [line.split(" ", 1)[1] for line in scan.found] == [
        "reject() 'newly_invented'", "refused[] 'other'", "Counter(x=)", "return 'also_new'"]
    counting = set()
    for path in PACKAGE.rglob("*.py"):
        rel = str(path.relative_to(PACKAGE))
        text = path.read_text()
        if not rel.startswith("lab/") and rel != "peers/faults.py" and "from ftis_swarm.peers import faults" in text:
            counting.add(rel)
    assert counting <= set(RAISE_SITES), counting - set(RAISE_SITES)


def test_only_signed_faults_cost_and_unknown_reasons_cost_nothing():
    assert all((f.cost > 0) == f.signed for f in faults.FAULTS.values())
    free = ["storage_full", "key_full", "owner_quota", "requester_quota", "denied", "gossip_denied", "gossip_banned",
            "gossip_rate", "body_unreachable", "body_missing", "body_broken", "body_stalled", "fetch_failed",
            "stalled", "slow_reader", "slow_request", "too_many_streams", "dht_no_reply", "member_overclaim",
            "future", "far_expiry", "oversize", "cache_store"]
    assert {r: faults.cost_of("swarm_" + r) for r in free} == {r: 0.0 for r in free}
    assert faults.cost_of("peer_over_budget") == faults.cost_of("peer_too_long") == faults.cost_of("learn_error") == 0
    assert faults.cost_of("a_reason_nobody_priced") == 0.0
    signed = {"hash_mismatch": 10, "size_mismatch": 10, "malformed": 10, "sender_mismatch": 10, "bad_signature": 10,
              "bad_schema": 5, "unbound_key": 5, "bad_encoding": 5, "gossip_bad_message": 5}
    assert {r: faults.cost_of("swarm_" + r) for r in signed} == signed
    assert faults.cost_of("forgery") == faults.cost_of("nonfinite") == 20.0


def test_gossip_faults_cost_what_their_dht_twins_cost():
    for reason in faults.RECORD_REASONS:
        twin = faults.gossip_twin(reason)
        assert faults.cost_of("swarm_" + twin) == faults.cost_of("swarm_" + reason)
    assert faults.cost_of("swarm_gossip_bad_signature") == 10.0
    with pytest.raises(KeyError):
        faults.gossip_twin("storage_full")


def test_what_load_and_bans_cause_never_bans_an_honest_peer():
    ledger = PeerLedger(LedgerConfig())
    # what a node full of attackers' records, and a ban of its own, make it count against an honest peer
    cascade = Counter(storage_full=5000, key_full=800, owner_quota=300, gossip_denied=2000, gossip_banned=500,
                      body_unreachable=90, body_stalled=60, slow_reader=40, fetch_failed=400, member_overclaim=30)
    for _ in range(10):
        ledger.charge_swarm({A: cascade})
        ledger.charge(A, faults.PEER_OVER_BUDGET, 19)
    assert ledger.allows(A) and ledger.score(A) == 0.0 and ledger.snapshot()[A]["bans"] == 0


def test_a_ban_never_reescalates_while_it_runs_and_records_its_cause():
    clock = type("Clock", (), {"now": 1_000.0, "__call__": lambda self: self.now})()
    ledger = PeerLedger(LedgerConfig(), clock=clock)
    ledger.charge_swarm({A: Counter(bad_signature=2)})  # a forged record, twice: 20 points
    first = ledger.snapshot()[A]
    assert not ledger.allows(A) and first["bans"] == 1 and first["banned_until"] == clock.now + 60
    assert (first["ban_reason"], first["banned_at"]) == ("swarm_bad_signature", clock.now)
    clock.now += 30
    ledger.charge_swarm({A: Counter(gossip_bad_signature=50, hash_mismatch=10)})  # all while banned
    ledger.charge(A, faults.FORGERY, 3)
    during = ledger.snapshot()[A]
    assert (during["bans"], during["banned_until"], during["debt"]) == (1, first["banned_until"], 0.0)
    assert during["counts"]["forgery"] == 3 and during["ban_reason"] == "swarm_bad_signature"
    clock.now += 31  # the ban is over: the next ban doubles, as before
    ledger.charge(A, faults.FORGERY)
    after = ledger.snapshot()[A]
    assert (after["bans"], after["banned_until"] - clock.now, after["ban_reason"]) == (2, 120, "forgery")
    again = PeerLedger(clock=clock)
    again.load_state(ledger.state())
    assert again.snapshot()[A]["ban_reason"] == "forgery" and again.snapshot()[A]["banned_at"] == clock.now
    again.load_state({A: {k: v for k, v in ledger.state()[A].items() if k not in ("ban_reason", "banned_at")}})
    assert again.snapshot()[A]["ban_reason"] == "" and not again.allows(A)  # a checkpoint from before
