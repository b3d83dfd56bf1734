"""`PeerLedger`: what each peer's groups have cost this node, and which peers it refuses.

The learner and the swarm may not import each other, so their signals about a peer meet
here, in the node: the learner's (a refused, non-finite, forged or failing group), the
scorer's (wrong task, split, item or prompt), the node's intake (over budget, too long)
and the swarm's (`charge_swarm`, as `swarm_<reason>`). Each reason has the cost of
`peers/faults.py` (only what a peer signed costs anything; a reason not listed costs 0).
Credit is earned, never given for arriving, and only by work that trained: the learner
reports per peer the weight its groups' samples carried in the gradient among those that
carried signal and passed every check (nonzero advantage, not filtered, not flagged; each
sample's mean token weight capped at 1, one point per group's worth; `Learner.peer_earned`),
at most `max_credit_per_update` an update, so samples whose log-probs claim certainty
(weights near 0) earn near 0 (docs/method.md, "Credit"). Credit decays, halving every
`credit_half_life` rounds (`take_round`), and a proven fault (a charge that costs points)
takes all of it at once. `score` is credit minus cost: above 0 for a peer whose groups
carried signal, below 0 once its faults outweigh them. A peer's credit is `recent` for
`recent_credit_rounds` rounds after it began (from none, or after a fault took it): the swarm's
selection and the intake bound what such peers take together (`recent_earned_share`), so
credit bought quickly by a crowd buys it a bounded share (docs/method.md, "Shares").

Tenure (docs/method.md, "Tenure"): the updates in which a peer's groups entered this node's
update with no proven fault (`settle_update`), since it was first seen or since its last
proven fault, which sets it to 0. A peer whose tenure reaches `settled_rounds` is `settled`:
it ranks in the first part of the budget with the peers of credit, though its groups carried
no gradient (tiny models that never solve an item; a hard task), and `tenure_class` (its
tenure on a doubling scale) orders origins there, older classes first. Time is what a crowd
that arrives at once lacks, and what a patient one must spend, on every origin, as much of
it as the peers it would pass have served.

A ban: when a peer's debt (its cost since its last ban, less what its used groups paid
back since: each pays `CREDIT_PER_GROUP`) reaches `ban_threshold` (20 points by default:
one forged or non-finite group, four groups naming test items), the peer is refused for
`ban_seconds` (60 s), doubling with each further ban up to `max_ban_seconds` (1 h). The
pay-back is what keeps an honest peer's occasional failures (a restart: its announced
bodies died with it, a few `fetch_failed`; a dropped connection) from adding up to a ban
over a long run while its groups are used; a fault of 20 points still bans at once. Bans
are wall-clock times, kept in the checkpoint, so a restarted node keeps them. A ban never
re-escalates while it runs (what a banned peer sends meanwhile adds no debt), and records
its cause (`ban_reason`, `banned_at`) for the operator's view (`snapshot`, `state`).
`deny_peers` are always refused; a non-empty `allow_peers` refuses everyone else.

The ledger judges; it does not act. The node drops a refused peer's groups before scoring,
and the swarm stops fetching from and storing for them (it is handed the ledger as its
`PeerPolicy`: `allows` and `score`, read on the swarm's event-loop thread; only the node's
thread changes the ledger).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

from ftis_swarm.config import LedgerConfig
from ftis_swarm.peers.faults import CONTESTED_GROUP, SWARM_PREFIX, cost_of

log = logging.getLogger(__name__)

CREDIT_PER_GROUP = 1.0
UNATTRIBUTED = "<others>"
"""The swarm's bucket for faults of peers past its per-peer table: no one peer to charge."""


def short_peer(peer_id: str) -> str:
    """The last 8 characters of a peer id: enough to tell a swarm's peers apart in a table."""
    return peer_id[-8:]


@dataclass
class PeerRecord:
    """One peer's account."""

    counts: Counter = field(default_factory=Counter)  # reason -> times charged
    cost: float = 0.0
    credit: float = 0.0
    debt: float = 0.0  # cost since the last ban, less the credit earned since
    bans: int = 0
    banned_until: float = 0.0  # wall-clock seconds
    banned_at: float = 0.0  # when the last ban began (wall clock; 0: never banned)
    ban_reason: str = ""  # the fault that tipped the last ban, for the operator
    credit_rounds: int = 0  # rounds since its present credit began (`recent`)
    tenure: int = 0  # updates its groups entered since its last proven fault (`tenure`)

    def as_dict(self) -> dict[str, Any]:
        return {"counts": dict(self.counts), "cost": self.cost, "credit": self.credit, "debt": self.debt,
                "bans": self.bans, "banned_until": self.banned_until, "banned_at": self.banned_at,
                "ban_reason": self.ban_reason, "credit_rounds": self.credit_rounds, "tenure": self.tenure}


class PeerLedger:
    """Per peer: counted reasons with a cost each, a score, and a ban that doubles (module docstring)."""

    def __init__(self, cfg: LedgerConfig | None = None, *, clock: Callable[[], float] = time.time) -> None:
        self.cfg = cfg or LedgerConfig()
        self._clock = clock
        self._peers: dict[str, PeerRecord] = {}
        self._round: Counter = Counter()  # reason -> charges since the last `take_round`
        self._withheld: Counter = Counter()  # peer -> groups' worth of credit the next update withholds
        self._no_credit: frozenset[str] = frozenset()  # peers whose credit the next update withholds entirely
        self._allow = frozenset(self.cfg.allow_peers)
        self._deny = frozenset(self.cfg.deny_peers)

    def allows(self, peer_id: str) -> bool:
        """False when the peer is denied, outside a non-empty allow list, or banned now."""
        if peer_id in self._deny or (self._allow and peer_id not in self._allow):
            return False
        rec = self._peers.get(peer_id)
        return rec is None or rec.banned_until <= self._clock()

    def score(self, peer_id: str) -> float:
        """Credit minus cost: > 0 for a peer whose groups were used, < 0 after faults."""
        rec = self._peers.get(peer_id)
        return 0.0 if rec is None else rec.credit - rec.cost

    def recent(self, peer_id: str) -> bool:
        """Whether the peer has a score above 0 and its credit began within `recent_credit_rounds` rounds."""
        rec = self._peers.get(peer_id)
        return (rec is not None and rec.credit - rec.cost > 0
                and rec.credit_rounds < self.cfg.recent_credit_rounds)

    def tenure(self, peer_id: str) -> int:
        """Updates the peer's groups entered with no proven fault since it was first seen or its last fault."""
        rec = self._peers.get(peer_id)
        return 0 if rec is None else rec.tenure

    def settled(self, peer_id: str) -> bool:
        """Whether the peer's tenure has reached `settled_rounds` (module docstring)."""
        return self.tenure(peer_id) >= self.cfg.settled_rounds

    def tenure_class(self, peer_id: str) -> int:
        """The peer's tenure on a doubling scale (0; 1; 2-3; 4-7; ... -> 0, 1, 2, 3, ...): the first part of the
        budget takes origins of a higher class first, so a crowd must serve as long as the peers it would pass."""
        return self.tenure(peer_id).bit_length()

    def charge(self, peer_id: str, reason: str, n: int = 1) -> None:
        """Counts `n` faults of `reason` against the peer; bans it when its debt reaches the threshold.

        While a ban runs, faults are counted and scored but add no debt: a ban never feeds on
        what the peer sends while it is refused."""
        if n <= 0:
            return
        rec = self._peers.setdefault(peer_id, PeerRecord())
        rec.counts[reason] += n
        self._round[reason] += n
        if reason == CONTESTED_GROUP:  # its content was offered by another sender too: that group earns nothing
            self._withheld[peer_id] += n
        cost = cost_of(reason) * n
        rec.cost += cost
        now = self._clock()
        if cost > 0:  # a proven fault: the credit it had earned and its tenure go at once
            rec.credit, rec.tenure = 0.0, 0
        if cost <= 0 or rec.banned_until > now:
            return
        rec.debt += cost
        if rec.debt >= self.cfg.ban_threshold:
            seconds = min(self.cfg.ban_seconds * 2**rec.bans, self.cfg.max_ban_seconds)
            rec.banned_at, rec.banned_until, rec.ban_reason = now, now + seconds, reason
            rec.bans += 1
            rec.debt = 0.0
            log.warning("peer %s banned for %.0f s (ban %d; last fault: %s)", peer_id, seconds, rec.bans, reason)

    def charge_swarm(self, faults: dict[str, Counter], *, me: str = "") -> None:
        """Charges what the swarm saw (`SwarmClient.drain_peer_faults()`) as `swarm_<reason>`."""
        for peer, reasons in faults.items():
            if peer in (me, UNATTRIBUTED):
                continue
            for reason, n in reasons.items():
                self.charge(peer, SWARM_PREFIX + reason, n)

    def credit(self, peer_id: str, n: float = 1) -> None:
        """`n` groups' worth of the peer's samples earned credit: as much credit, and paid off its debt."""
        if n > 0:
            rec = self._peers.setdefault(peer_id, PeerRecord())
            if rec.credit <= 0:  # credit begins (afresh after a fault took it): recent again
                rec.credit_rounds = 0
            rec.credit += CREDIT_PER_GROUP * n
            rec.debt = max(0.0, rec.debt - CREDIT_PER_GROUP * n)

    def charge_counts(self, by_peer: Counter, *, me: str = "") -> None:
        """Charges `(peer, reason) -> n` counts (what the intake and the scorer report), `me` aside."""
        for (peer, reason), n in by_peer.items():
            if peer != me:
                self.charge(peer, reason, n)

    def withhold_credit(self, peers: Any) -> None:
        """The next `settle_update` gives `peers` no credit at all (publishers flagged for cherry-picked groups,
        `peers/cherry.py`): no charge, no ban, and their tenure still counts."""
        self._no_credit = frozenset(peers)

    def settle_update(self, report: dict[str, Counter], *, me: str = "",
                      earned: dict[str, float] | None = None) -> None:
        """The learner's `peer_report` (charges for each peer's faults) and `peer_earned` (its credit,
        at most `max_credit_per_update`), less one group's worth for each of its groups whose content another
        sender offered in the same take (`contested_group`: the intake cannot tell who was first)."""
        withheld, self._withheld = self._withheld, Counter()
        no_credit, self._no_credit = self._no_credit, frozenset()
        for peer, amount in (earned or {}).items():
            if peer != me and peer not in no_credit:
                self.credit(peer, min(amount, self.cfg.max_credit_per_update) - CREDIT_PER_GROUP * withheld[peer])
        for peer, counts in report.items():
            if peer == me:
                continue
            rec = self._peers.setdefault(peer, PeerRecord())  # a peer whose groups entered an update is known
            cost = rec.cost
            for reason, n in counts.items():
                if reason != "groups":
                    self.charge(peer, reason, n)
            if counts.get("groups", 0) > 0 and rec.cost == cost:  # its groups entered with no proven fault
                rec.tenure += 1

    def banned(self) -> list[str]:
        """Peers refused right now (bans, and denied peers this node has heard from)."""
        return sorted(p for p in self._peers if not self.allows(p))

    def take_round(self) -> dict[str, Any]:
        """Ends a round: credit decays (`credit_half_life`); for the round's metrics record: `banned_peers`
        (short ids; `peers_banned`, their number, for Prometheus) and `charged_<reason>` since the last call."""
        if self.cfg.credit_half_life > 0:  # credit decays once a round
            keep = 0.5 ** (1.0 / self.cfg.credit_half_life)
            for rec in self._peers.values():
                rec.credit *= keep
        for rec in self._peers.values():
            rec.credit_rounds += rec.credit > 0
        banned = self.banned()
        out: dict[str, Any] = {"banned_peers": [short_peer(p) for p in banned], "peers_banned": len(banned)}
        out.update({f"charged_{reason}": n for reason, n in sorted(self._round.items())})
        self._round.clear()
        return out

    def snapshot(self) -> dict[str, dict[str, Any]]:
        """Every peer's account and score, JSON-able."""
        return {p: {**rec.as_dict(), "score": self.score(p), "allowed": self.allows(p)} for p, rec in self._peers.items()}

    def state(self) -> dict[str, dict[str, Any]]:
        """What a checkpoint keeps, so a resumed node keeps its bans and scores."""
        return {p: rec.as_dict() for p, rec in self._peers.items()}

    def load_state(self, state: dict[str, dict[str, Any]]) -> None:
        self._peers = {
            p: PeerRecord(counts=Counter(r["counts"]), cost=float(r["cost"]), credit=float(r["credit"]),
                          debt=float(r["debt"]), bans=int(r["bans"]), banned_until=float(r["banned_until"]),
                          banned_at=float(r.get("banned_at", 0.0)), ban_reason=str(r.get("ban_reason", "")),
                          credit_rounds=int(r.get("credit_rounds", 0)), tenure=int(r.get("tenure", 0)))
            for p, r in state.items()
        }
