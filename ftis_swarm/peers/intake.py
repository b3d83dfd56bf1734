"""Which of the peers' gathered groups an update takes: refused peers, duplicates and copies,
length, and a budget shared by standing, never by arrival.

One peer's 64 x 2,000-token group (1 MiB, inside every wire limit) once cost each node
four minutes of `logp_old`; the budget bounds the peers' completion tokens per update and
per peer, by default at 4 and 2 times this node's own per round.

**By standing.** Identities are free, so a crowd of fresh ones once took 61-75% of an
update in arrival order. Now the peers with standing (the learner's forgery detector,
docs/node.md "Standing") or tenure (settled: the ledger's, docs/method.md "Tenure") come
first, origins of longer tenure first (on a doubling scale), ranked by their earned credit
(the ledger's score) and taken one group from each in turn; the peers without standing share a part of the
budget (`strangers_share` of its tokens and groups, a quarter by default) that is both
reserved (the others never take it, so a newcomer can earn standing) and capped (however
many identities arrive), taken in the strangers' draw (`peers/draw.py`: network origins in
turn, then identities in turn within an origin, in an order drawn afresh each update from
the node's seed and round), the same order the swarm fetched them in. Per-peer caps hold
in both parts.

**Shares, in tokens** (docs/method.md, "Shares"). The peers with standing are taken origin by
origin too (`draw.earned_in_turns`); one origin's identities take at most
`max_tokens_per_origin` / `max_groups_per_origin` together over both parts
(`ledger.max_origin_share`); those whose credit is recent (`recent`, the ledger's) take at
most `Budget.recent_part` of the earned part together, and their groups past it join the
strangers' draw. `Intake.by_origin` says what each origin's identities got, for the status.

A group over what is left of its part waits for the next round (`peer_deferred`), taken
first then, and is dropped if it does not fit then either (`peer_over_budget`; for a peer
without standing `peer_over_share`, which costs nothing: losing the draw is no fault); a
group over the whole budget is dropped at once (`peer_over_budget`).

**Copies.** A group is also known by its content key (`copies.py`: task, item and the
completions' token ids as a multiset; not log-probs, prompt ids, sender or time). The first
group of a key this node sees trains; a later one never does, and costs no one (the race for
"first" is decided by fetch order, which a fast copier can win, and honest peers meet on a key
by chance): from the same sender under a new id `peer_duplicate`, from another sender with
the first's log-probs `copied_group`, with other log-probs `same_content`. When another
sender offers the key in the same take as the first, the first still trains once but earns
no credit (`contested_group`, counted against the first's sender: the ledger withholds one
group's worth of its credit that update), so a copy that wins the race earns nothing.

The deferred groups, the digests and the draw's counter (the draw's number when the
node gives none) are part of a checkpoint
(`state`), so a resumed node takes the same groups in the same order as one that ran on; a
group offered twice in one take (deferred, then gathered again by a restarted node's
swarm) is taken once (`peer_duplicate`).
"""

from __future__ import annotations

import base64
import logging
import math
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Container, Optional

from ftis_swarm.config import NodeConfig, WireConfig
from ftis_swarm.peers import faults
from ftis_swarm.peers.copies import content_key, logp_key
from ftis_swarm.peers.draw import OriginOf, earned_in_turns, origin_key, strangers_in_turns
from ftis_swarm.wire import Group, decode_group, encode_group

log = logging.getLogger(__name__)

MAX_REMEMBERED_CONTENTS = 8192
"""Content digests the intake remembers (oldest forgotten first): a copy older than this many
groups is caught by no one; the checkpoint holds about 0.6 MB of them."""


def within_vocab(group: Group, bound: int) -> bool:
    """True when every token id is below `bound`, the tokenizer's length: peers refuse any other
    group, so a node does not publish one. Only a model whose embedding has padding rows past its
    tokenizer can sample such ids (a random tiny model does, 0.2% of its tokens)."""
    return int(group.prompt_ids.max(initial=0)) < bound and all(int(c.max()) < bound for c in group.completion_ids)


@dataclass(frozen=True)
class Budget:
    """Caps on the peers' share of one update."""

    max_groups: int
    max_groups_per_peer: int
    max_tokens: int
    max_tokens_per_peer: int
    context: int
    """This model's context: a group whose prompt and longest completion exceed it is dropped."""
    strangers_share: float = 0.25
    """The part of `max_tokens` and `max_groups` reserved for, and capped to, peers without standing."""
    max_tokens_per_origin: Optional[int] = None
    """Most completion tokens the identities of one network origin take together (None: no cap by origin)."""
    max_groups_per_origin: Optional[int] = None
    """Most groups the identities of one network origin take together (None: no cap by origin)."""
    recent_share: float = 1.0
    """The part of `max_tokens` and `max_groups` that peers of recent credit may take together in the
    earned part (`ledger.recent_earned_share`); past it they are strangers. 1: no such bound."""

    @classmethod
    def of(cls, cfg: NodeConfig, *, context: int) -> "Budget":
        lc = cfg.learner
        own = cfg.prompts_per_round * cfg.sampling.group_size * cfg.sampling.max_new_tokens
        tokens, groups, origin = lc.max_peer_tokens or 4 * own, lc.max_peer_groups, cfg.ledger.max_origin_share
        return cls(max_groups=groups, max_groups_per_peer=lc.max_groups_per_peer,
                   max_tokens=tokens, max_tokens_per_peer=lc.max_peer_tokens_per_peer or 2 * own,
                   context=context, strangers_share=lc.strangers_share,
                   max_tokens_per_origin=None if origin >= 1 else int(tokens * origin),
                   max_groups_per_origin=None if origin >= 1 else max(1, int(groups * origin)),
                   recent_share=cfg.ledger.recent_earned_share)

    def parts(self) -> tuple["_Part", "_Part"]:
        """(peers with standing, peers without): the tokens and groups each part may take."""
        tokens, groups = int(self.max_tokens * self.strangers_share), int(self.max_groups * self.strangers_share)
        return (_Part(self.max_tokens - tokens, self.max_groups - groups, faults.PEER_OVER_BUDGET),
                _Part(tokens, groups, faults.PEER_OVER_SHARE))

    def recent_part(self) -> "_Part":
        """What peers of recent credit may take together of the earned part (`recent_share`)."""
        earned = self.parts()[0]
        return _Part(min(earned.tokens, int(self.max_tokens * self.recent_share)),
                     min(earned.groups, int(self.max_groups * self.recent_share)), faults.PEER_OVER_SHARE)

    def origin_caps(self) -> tuple[float, float]:
        """(tokens, groups) one origin's identities may take together (inf: no cap)."""
        return (math.inf if self.max_tokens_per_origin is None else self.max_tokens_per_origin,
                math.inf if self.max_groups_per_origin is None else self.max_groups_per_origin)


@dataclass
class _Part:
    """What is left of one part of the budget, and the reason of a waited group that does not fit."""

    tokens: int
    groups: int
    dropped: str


@dataclass
class Intake:
    """What `PeerIntake.take` kept, and why the rest was left out (counts, and per (peer, reason))."""

    kept: list[Group]
    counts: Counter
    by_peer: Counter
    dropped: list[Group] = field(default_factory=list)
    """The groups left out for good (every reason but `peer_deferred`): with `kept`, what this take settled."""
    by_origin: dict[str, dict[str, int]] = field(default_factory=dict)
    """Per origin (`draw.origin_key`) of the kept groups: `tokens`, `groups`, `identities` and their `peers`
    (the node's status shows them: node/status.py, `observe_origins`)."""


@dataclass
class _Taken:
    """What one take gave each peer and each origin so far, over both parts (the caps hold over both)."""

    origin_of: Optional[OriginOf]
    groups_of: Counter = field(default_factory=Counter)
    tokens_of: Counter = field(default_factory=Counter)
    origin_groups: Counter = field(default_factory=Counter)
    origin_tokens: Counter = field(default_factory=Counter)
    identities: dict[str, set] = field(default_factory=dict)

    def origin(self, peer: str) -> str:
        return origin_key(peer, self.origin_of)

    def add(self, g: Group) -> None:
        n, origin = g.num_completion_tokens, self.origin(g.sender)
        self.groups_of[g.sender] += 1
        self.tokens_of[g.sender] += n
        self.origin_groups[origin] += 1
        self.origin_tokens[origin] += n
        self.identities.setdefault(origin, set()).add(g.sender)

    def by_origin(self) -> dict[str, dict[str, int]]:
        return {o: {"tokens": self.origin_tokens[o], "groups": self.origin_groups[o], "identities": len(ids),
                    "peers": sorted(ids)} for o, ids in sorted(self.identities.items())}


class PeerIntake:
    """Holds the groups deferred to the next round and the contents seen; `take` picks an update's peers' groups."""

    def __init__(self, budget: Budget, *, seed: int | str = 0) -> None:
        """`seed`: the strangers' draw's (the node's peer id, as its swarm's selection uses)."""
        self.budget = budget
        self.seed = seed
        self._deferred: list[Group] = []
        self._takes = 0
        self._first: OrderedDict[str, tuple[str, str, str]] = OrderedDict()  # key -> (sender, group id, logp key)
        self._this_take: dict[str, str] = {}  # key -> group id, first seen in the present take

    def take(self, groups: list[Group], consumed: Container[str], allows: Any, *,
             standing: Optional[Callable[[str], bool]] = None,
             rank: Optional[Callable[[str], float]] = None, origin: Optional[OriginOf] = None,
             draw: Optional[int] = None, recent: Optional[Callable[[str], bool]] = None,
             settled: Optional[Callable[[str], bool]] = None, tier: Optional[Callable[[str], int]] = None) -> Intake:
        """The groups this update takes from last round's deferred ones and `groups` (module docstring).

        `allows(peer_id) -> bool` (the ledger's) refuses a banned or denied peer's groups;
        `standing(peer_id) -> bool` (the learner's detector; None: no peer has it) splits the
        budget; `rank(peer_id) -> float` (the ledger's score; None: all equal) orders the peers
        with standing, highest first, origin by origin; `origin(peer_id) -> str | None` (the
        transport's `origin_of`; None: each peer an origin of its own) groups both draws and
        the caps by origin; `draw` is the draw's number (the node's round, as its swarm's; None:
        this intake's count of takes); `recent(peer_id) -> bool` (the ledger's `recent`; None:
        no peer's credit is recent) marks the peers whose part of the earned share is bounded
        together (`Budget.recent_part`); `settled(peer_id) -> bool` (the ledger's; None: no one) gives a peer
        without standing the first part too (docs/method.md, "Tenure"), and `tier(peer_id) -> int` (the
        ledger's `tenure_class`; None: one tier) takes the first part's origins by tenure, older first.
        """
        out = Intake([], Counter(), Counter())
        self._this_take = {}
        deferred, self._deferred = self._deferred, []
        offers = [(g, True) for g in deferred] + [(g, False) for g in groups]
        fit = self._admissible(offers, consumed, allows, out)
        proven, old = standing or (lambda peer: False), settled or (lambda peer: False)

        def has(peer: str) -> bool:
            return proven(peer) or old(peer)

        earned = [o for o in fit if has(o[0].sender)]
        strangers = [o for o in fit if not has(o[0].sender)]
        score = rank or (lambda peer: 0.0)
        draw = self._takes if draw is None else draw
        self._takes += 1
        taken = _Taken(origin)
        earned = earned_in_turns(earned, sender=lambda o: o[0].sender, origin_of=origin, score=score, seed=self.seed,
                                 draw=draw, tier=tier)
        first, rest = self.budget.parts()
        spilled = self._fill(first, earned, out, taken, recent_part=self.budget.recent_part(),
                             recent=recent or (lambda peer: False))
        strangers = strangers_in_turns(strangers + spilled, sender=lambda o: o[0].sender, origin_of=origin,
                                       seed=self.seed, draw=draw)
        self._fill(rest, strangers, out, taken)
        out.by_origin = taken.by_origin()
        return out

    def _admissible(self, offers: list[tuple[Group, bool]], consumed: Container[str], allows: Any,
                    out: Intake) -> list[tuple[Group, bool]]:
        """The offers that pass the checks of a group on its own; the others counted in `out`."""
        b = self.budget
        fit, offered = [], set()
        for g, waited in offers:
            n, seen = g.num_completion_tokens, g.group_id in offered
            offered.add(g.group_id)
            if not allows(g.sender):
                reason = faults.PEER_REFUSED
            elif g.group_id in consumed:
                reason = faults.PEER_ALREADY_CONSUMED
            elif seen:
                reason = faults.PEER_DUPLICATE
            elif g.prompt_ids.size + max(g.completion_lengths) > b.context:
                reason = faults.PEER_TOO_LONG
            elif n > b.max_tokens_per_peer or n > b.max_tokens:
                reason = faults.PEER_OVER_BUDGET
            else:
                reason = self._copy(g, out)
            if reason:
                _count(out, g, reason)
            else:
                fit.append((g, waited))
        return fit

    def _copy(self, g: Group, out: Intake) -> str:
        """"peer_duplicate", "copied_group" or "same_content" when another group had this content first
        (module docstring, "Copies"; a contest in this take counted in `out`); else ""."""
        digest = content_key(g)
        first = self._first.get(digest)
        if first is None:
            self._first[digest] = (g.sender, g.group_id, logp_key(g))
            self._this_take[digest] = g.group_id
            while len(self._first) > MAX_REMEMBERED_CONTENTS:
                self._first.popitem(last=False)
            return ""
        sender, group_id, lp = first
        if group_id == g.group_id:
            return ""
        if sender == g.sender:
            return faults.PEER_DUPLICATE
        if self._this_take.get(digest) == group_id:  # the first's credit: withheld once per take
            self._this_take[digest] = ""
            out.counts[faults.CONTESTED_GROUP] += 1
            out.by_peer[(sender, faults.CONTESTED_GROUP)] += 1
        return faults.COPIED_GROUP if lp == logp_key(g) else faults.SAME_CONTENT

    def _fill(self, part: _Part, offers: list[tuple[Group, bool]], out: Intake, taken: _Taken, *,
              recent_part: Optional[_Part] = None,
              recent: Callable[[str], bool] = lambda peer: False) -> list[tuple[Group, bool]]:
        """Takes `offers` in order while `part`, the per-peer and per-origin caps (and for a peer of `recent`
        credit, `recent_part`) allow; returns the recent peers' offers that did not fit `recent_part`
        (they join the strangers' draw)."""
        b, spilled = self.budget, []
        origin_tokens, origin_groups = b.origin_caps()
        for g, waited in offers:
            n, origin, is_recent = g.num_completion_tokens, taken.origin(g.sender), recent(g.sender)
            if is_recent and recent_part is not None and (recent_part.groups < 1 or n > recent_part.tokens):
                spilled.append((g, waited))
                continue
            if (part.groups < 1 or taken.groups_of[g.sender] >= b.max_groups_per_peer
                    or taken.origin_groups[origin] >= origin_groups):
                reason = faults.PEER_OVER_CAP
            elif (n > part.tokens or taken.tokens_of[g.sender] + n > b.max_tokens_per_peer
                  or taken.origin_tokens[origin] + n > origin_tokens):
                reason = part.dropped if waited else faults.PEER_DEFERRED
            else:
                out.kept.append(g)
                taken.add(g)
                part.groups -= 1
                part.tokens -= n
                if is_recent and recent_part is not None:
                    recent_part.groups -= 1
                    recent_part.tokens -= n
                continue
            _count(out, g, reason)
            if reason == faults.PEER_DEFERRED:
                self._deferred.append(g)
        return spilled

    def state(self) -> dict[str, Any]:
        """For a checkpoint's `state.json`: the deferred groups (wire-encoded, base64), the content
        digests with their first senders, and the draw's counter."""
        return {"deferred": [base64.b64encode(encode_group(g)).decode("ascii") for g in self._deferred],
                "contents": [[d, *first] for d, first in self._first.items()], "takes": self._takes}

    def load_state(self, state: dict[str, Any] | list[str], *, limits: Optional[WireConfig] = None) -> None:
        """What `state()` wrote (or a list of deferred groups alone); the next `take` goes on as it would have."""
        saved = {"deferred": state} if isinstance(state, list) else state
        self._deferred = [decode_group(base64.b64decode(text), limits=limits) for text in saved.get("deferred", [])]
        self._first = OrderedDict((d, (s, i, rest[0] if rest else "")) for d, s, i, *rest in saved.get("contents", []))
        self._takes = int(saved.get("takes", 0))


def _count(out: Intake, g: Group, reason: str) -> None:
    out.counts[reason] += 1
    out.by_peer[(g.sender, reason)] += 1
    if reason != faults.PEER_DEFERRED:
        out.dropped.append(g)
