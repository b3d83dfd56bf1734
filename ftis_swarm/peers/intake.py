"""Which of the peers' gathered groups an update takes: refused peers, duplicates and copies,
length, and a budget shared by standing, never by arrival.

One peer's 64 x 2,000-token group (1 MiB, inside every wire limit) once cost each node
four minutes of `logp_old`; the budget bounds the peers' completion tokens per update and
per peer, by default at 4 and 2 times this node's own per round.

**By standing.** Identities are free, so a crowd of fresh ones once took 61-75% of an
update in arrival order. Now the peers with standing (the learner's forgery detector,
docs/node.md "Standing") come first, ranked by their earned credit (the ledger's score)
and taken one group from each in turn; the peers without standing share a part of the
budget (`strangers_share` of its tokens and groups, a quarter by default) that is both
reserved (the others never take it, so a newcomer can earn standing) and capped (however
many identities arrive), taken in the strangers' draw (`peers/draw.py`: network origins in
turn, then identities in turn within an origin, in an order drawn afresh each update from
the node's seed and round), the same order the swarm fetched them in. Per-peer caps hold
in both parts.

A group over what is left of its part waits for the next round (`peer_deferred`), taken
first then, and is dropped if it does not fit then either (`peer_over_budget`; for a peer
without standing `peer_over_share`, which costs nothing: losing the draw is no fault); a
group over the whole budget is dropped at once (`peer_over_budget`).

**Copies.** A group is also known by a digest of its content (item, prompt ids,
completions, log-probs; not its sender or time, which the group id hashes). The first sender seen with a
content keeps it; the same content from another sender is refused as `copied_group`,
which costs that sender, and from the same sender under a new id as `peer_duplicate`.

The deferred groups, the digests and the draw's counter (the draw's number when the
node gives none) are part of a checkpoint
(`state`), so a resumed node takes the same groups in the same order as one that ran on; a
group offered twice in one take (deferred, then gathered again by a restarted node's
swarm) is taken once (`peer_duplicate`).
"""

from __future__ import annotations

import base64
import hashlib
import logging
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Container, Optional

from ftis_swarm.config import NodeConfig, WireConfig
from ftis_swarm.wire import Group, decode_group, encode_group
from ftis_swarm.peers import faults
from ftis_swarm.peers.draw import OriginOf, interleave, strangers_in_turns

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

    @classmethod
    def of(cls, cfg: NodeConfig, *, context: int) -> "Budget":
        lc = cfg.learner
        own = cfg.prompts_per_round * cfg.sampling.group_size * cfg.sampling.max_new_tokens
        return cls(max_groups=lc.max_peer_groups, max_groups_per_peer=lc.max_groups_per_peer,
                   max_tokens=lc.max_peer_tokens or 4 * own, max_tokens_per_peer=lc.max_peer_tokens_per_peer or 2 * own,
                   context=context, strangers_share=lc.strangers_share)

    def parts(self) -> tuple["_Part", "_Part"]:
        """(peers with standing, peers without): the tokens and groups each part may take."""
        tokens, groups = int(self.max_tokens * self.strangers_share), int(self.max_groups * self.strangers_share)
        return (_Part(self.max_tokens - tokens, self.max_groups - groups, faults.PEER_OVER_BUDGET),
                _Part(tokens, groups, faults.PEER_OVER_SHARE))


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


def content_digest(group: Group) -> str:
    """Hex digest of a group's item (task and item id), prompt ids, completions and log-probs (not
    sender, time or version): the item keeps a group relabelled for another item the scorer's to refuse."""
    h = hashlib.sha256(f"{group.task_id}\n{group.item_id}\n".encode())
    h.update(group.prompt_ids.astype("<u4").tobytes())
    for ids, lp in zip(group.completion_ids, group.logp_gen):
        h.update(len(ids).to_bytes(4, "little"))
        h.update(ids.astype("<u4").tobytes())
        h.update(lp.astype("<f4").tobytes())
    return h.hexdigest()[:32]


def fair_order(senders: list[str], key: Callable[[str], Any]) -> list[str]:
    """`senders` without repeats, sorted by `key` (ties: first appearance)."""
    first = list(dict.fromkeys(senders))
    return sorted(first, key=lambda s: (key(s), first.index(s)))


def in_turns(offers: list[tuple[Group, bool]], order: list[str]) -> list[tuple[Group, bool]]:
    """One group of each sender in `order` in turn, then the second of each, ...; each sender's in offer order."""
    queues: dict[str, list[tuple[Group, bool]]] = {s: [] for s in order}
    for offer in offers:
        queues[offer[0].sender].append(offer)
    return interleave(list(queues.values()))


class PeerIntake:
    """Holds the groups deferred to the next round and the contents seen; `take` picks an update's peers' groups."""

    def __init__(self, budget: Budget, *, seed: int | str = 0) -> None:
        """`seed`: the strangers' draw's (the node's peer id, as its swarm's selection uses)."""
        self.budget = budget
        self.seed = seed
        self._deferred: list[Group] = []
        self._takes = 0
        self._first: OrderedDict[str, tuple[str, str]] = OrderedDict()  # digest -> (sender, group id)

    def take(self, groups: list[Group], consumed: Container[str], allows: Any, *,
             standing: Optional[Callable[[str], bool]] = None,
             rank: Optional[Callable[[str], float]] = None, origin: Optional[OriginOf] = None,
             draw: Optional[int] = None) -> Intake:
        """The groups this update takes from last round's deferred ones and `groups` (module docstring).

        `allows(peer_id) -> bool` (the ledger's) refuses a banned or denied peer's groups;
        `standing(peer_id) -> bool` (the learner's detector; None: no peer has it) splits the
        budget; `rank(peer_id) -> float` (the ledger's score; None: all equal) orders the peers
        with standing, highest first; `origin(peer_id) -> str | None` (the transport's
        `origin_of`; None: each peer an origin of its own) groups the strangers' draw by
        origin; `draw` is the draw's number (the node's round, as its swarm's; None: this
        intake's count of takes).
        """
        out = Intake([], Counter(), Counter())
        deferred, self._deferred = self._deferred, []
        offers = [(g, True) for g in deferred] + [(g, False) for g in groups]
        fit = self._admissible(offers, consumed, allows, out)
        has = standing or (lambda peer: False)
        earned = [o for o in fit if has(o[0].sender)]
        strangers = [o for o in fit if not has(o[0].sender)]
        score = rank or (lambda peer: 0.0)
        draw = self._takes if draw is None else draw
        self._takes += 1
        earned = in_turns(earned, fair_order([g.sender for g, _ in earned], lambda s: -score(s)))
        strangers = strangers_in_turns(strangers, sender=lambda o: o[0].sender, origin_of=origin, seed=self.seed,
                                       draw=draw)
        for part, chosen in zip(self.budget.parts(), (earned, strangers)):
            self._fill(part, chosen, out)
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
                reason = self._copy(g)
            if reason:
                _count(out, g, reason)
            else:
                fit.append((g, waited))
        return fit

    def _copy(self, g: Group) -> str:
        """"copied_group" or "peer_duplicate" when another group had this content first; else ""."""
        digest = content_digest(g)
        first = self._first.get(digest)
        if first is None:
            self._first[digest] = (g.sender, g.group_id)
            while len(self._first) > MAX_REMEMBERED_CONTENTS:
                self._first.popitem(last=False)
            return ""
        sender, group_id = first
        if group_id == g.group_id:
            return ""
        return faults.PEER_DUPLICATE if sender == g.sender else faults.COPIED_GROUP

    def _fill(self, part: _Part, offers: list[tuple[Group, bool]], out: Intake) -> None:
        """Takes `offers` in order while `part` and the per-peer caps allow."""
        b = self.budget
        groups_of: Counter = Counter()
        tokens_of: Counter = Counter()
        for g, waited in offers:
            n = g.num_completion_tokens
            if part.groups < 1 or groups_of[g.sender] >= b.max_groups_per_peer:
                reason = faults.PEER_OVER_CAP
            elif n > part.tokens or tokens_of[g.sender] + n > b.max_tokens_per_peer:
                reason = part.dropped if waited else faults.PEER_DEFERRED
            else:
                out.kept.append(g)
                groups_of[g.sender] += 1
                tokens_of[g.sender] += n
                part.groups -= 1
                part.tokens -= n
                continue
            _count(out, g, reason)
            if reason == faults.PEER_DEFERRED:
                self._deferred.append(g)

    def state(self) -> dict[str, Any]:
        """For a checkpoint's `state.json`: the deferred groups (wire-encoded, base64), the content
        digests with their first senders, and the draw's counter."""
        return {"deferred": [base64.b64encode(encode_group(g)).decode("ascii") for g in self._deferred],
                "contents": [[d, s, i] for d, (s, i) in self._first.items()], "takes": self._takes}

    def load_state(self, state: dict[str, Any] | list[str], *, limits: Optional[WireConfig] = None) -> None:
        """What `state()` wrote (or a list of deferred groups alone); the next `take` goes on as it would have."""
        saved = {"deferred": state} if isinstance(state, list) else state
        self._deferred = [decode_group(base64.b64decode(text), limits=limits) for text in saved.get("deferred", [])]
        self._first = OrderedDict((d, (s, i)) for d, s, i in saved.get("contents", []))
        self._takes = int(saved.get("takes", 0))


def _count(out: Intake, g: Group, reason: str) -> None:
    out.counts[reason] += 1
    out.by_peer[(g.sender, reason)] += 1
    if reason != faults.PEER_DEFERRED:
        out.dropped.append(g)
