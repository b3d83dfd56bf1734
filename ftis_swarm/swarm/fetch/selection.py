"""Which offered groups a gather fetches: what the node's next update will take, earned peers first.

Pointers are cheap and bodies are not, so with a budget (`SwarmClient.set_budget`, the
node's `peers.intake.Budget`) the gatherer fetches only the groups an update can take.
Every screened group of a peer's newest round is an offer; `choose` picks from the offers
by the intake's own rule (`peers/intake.py`), the budget split in the same two parts
(`Budget.parts`: `strangers_share` of its tokens and groups, the node's
`learner.strangers_share`):

1. **earned peers** (policy score > 0), highest score first, at any time (their bodies are
   fetched while the node still generates), within the earned part;
2. once a gather is open (`open`), **strangers** (every other allowed peer, and earned
   offers left over) within the strangers' part, in the strangers' draw (`peers/draw.py`: network origins in turn, then
   identities in turn within an origin, then each one's groups oldest first), the same
   function, seed (the node's peer id) and draw number (the round the gather is for) as
   the intake's, so a group fetched for the strangers' share is the one the update takes.

Every choice keeps the budget's caps: `max_tokens` and `max_groups` for the update, and
`max_tokens_per_peer` and `max_groups_per_peer` per publisher, counting the completion
tokens each pointer signs (a body with other counts is refused as `pointer_mismatch`).
A group never chosen costs nothing: not fetched, not charged. An offer left at the end of
a gather (`next_gather`) stays on offer for the next gather too, then is dropped
(`not_chosen`); a newer round of its publisher drops it sooner. Without that carry the
strangers' draw would be first-come in phase: a gather's draw would see only the
publishers whose round ended since the last gather closed, and one whose rounds end in
step with the gathers would miss draw after draw (measured with 4 peers: a peer's offers
were missing at 1 gather opening in 3, and a restarted peer went 9 and 10 rounds unused,
`tests/node/test_node_churn.py`). With it every live publisher with a round this gather
or the last one is in the draw. A carried offer is drawn only in the strangers' draw, even
an earned peer's: the earned tier takes offers on arrival, highest score first, and a
carry into it would make it a queue of the last round's leftovers (measured: `bench
scale` at 8 nodes, where every peer earns credit after its first round, with carried
offers in the earned tier the chosen groups' publish-to-visible p50 went from 155 ms to
2,568 ms). A chosen group whose body is refused gives its tokens
back. Two nodes draw differently, so over a run every honest publisher's groups are used
by someone (docs/scale.md).

The tiers differ from the intake's in one way: the swarm knows the ledger's score, not
the learner's standing, so a peer with credit and no standing yet is fetched as earned
and drawn by the intake as a stranger; its offers left over from the earned part are
drawn with the strangers' here too, so it keeps a stranger's chance. (A peer with
standing whose groups overflow the earned part may then be fetched for nothing.)

Pure bookkeeping, no I/O: the gatherer calls it on the swarm's event loop thread.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Callable, Optional

from ftis_swarm.peers.draw import OriginOf, strangers_in_turns
from ftis_swarm.peers.intake import Budget
from ftis_swarm.swarm.records import GroupPointer


_Key = tuple[str, str]  # (publisher, group id): one offer; the same id from two publishers is two offers


def _key(pointer: GroupPointer) -> _Key:
    return pointer.publisher, pointer.group_id


@dataclasses.dataclass
class Choice:
    """What one `choose` decided: groups to fetch now, and offers dropped for good."""

    chosen: list[GroupPointer] = dataclasses.field(default_factory=list)
    dropped: list[GroupPointer] = dataclasses.field(default_factory=list)


class Selection:
    """The offers and the budget of the current gather (see the module docstring)."""

    def __init__(self, budget: Budget, *, seed: str, score: Callable[[str], float],
                 origin_of: Optional[OriginOf] = None):
        self.budget = budget
        self._seed, self._score, self._origin_of = seed, score, origin_of
        earned, strangers = budget.parts()
        self._parts = {True: (earned.tokens, earned.groups), False: (strangers.tokens, strangers.groups)}
        self._offers: dict[str, dict[str, GroupPointer]] = {}  # publisher -> group id -> pointer (newest round)
        self._offered_in: dict[_Key, int] = {}  # offer -> the gather it came in
        self._in_flight: dict[_Key, GroupPointer] = {}
        self._tokens_of: Counter[str] = Counter()
        self._groups_of: Counter[str] = Counter()
        self._tier_of: dict[_Key, bool] = {}  # chosen offer -> chosen in the earned part (True) or the strangers'
        self._tier_tokens: Counter[bool] = Counter()
        self._tier_groups: Counter[bool] = Counter()
        self._gathers = 0
        self._draw = 0
        self._open = False

    def offer(self, pointer: GroupPointer) -> list[GroupPointer]:
        """Adds a screened pointer; returns the offers it makes obsolete (an older round of its publisher)."""
        held = self._offers.get(pointer.publisher, {})
        older = [p for p in held.values() if p.round != pointer.round and p.created_at <= pointer.created_at]
        if any(p.round != pointer.round and p.created_at > pointer.created_at for p in held.values()):
            return [pointer]  # a round older than the one on offer
        for p in older:
            self._withdraw(p)
        self._offers.setdefault(pointer.publisher, {})[pointer.group_id] = pointer
        self._offered_in.setdefault(_key(pointer), self._gathers)
        return older

    def open(self, round: Optional[int] = None) -> None:
        """A gather began (for the node's round `round`: the draw's number; None: this selection's
        count of gathers): strangers may be chosen from now on."""
        self._open = True
        self._draw = self._gathers if round is None else round

    def choose(self) -> Choice:
        """Picks the offers to fetch now (see the module docstring for the order)."""
        out = Choice()
        for publisher, held in list(self._offers.items()):  # offers no budget can ever take
            for p in [p for p in held.values() if not self._could_ever_fit(p)]:
                self._withdraw(p)
                out.dropped.append(p)
        earned = sorted((p for p in self._offers if self._score(p) > 0), key=lambda p: (-self._score(p), p))
        for publisher in earned:
            for pointer in self._queue(publisher):
                if self._offered_in[_key(pointer)] == self._gathers and self._fits(pointer, earned=True):
                    self._choose(pointer, out, earned=True)
        if self._open:  # earned offers left over too: a scored peer without standing is the intake's stranger
            offers = [g for p in sorted(self._offers) for g in self._queue(p)]
            for pointer in strangers_in_turns(offers, sender=lambda g: g.publisher, origin_of=self._origin_of,
                                              seed=self._seed, draw=self._draw):
                if self._fits(pointer, earned=False):
                    self._choose(pointer, out, earned=False)
        return out

    def settled(self, pointer: GroupPointer, *, accepted: bool) -> None:
        """A chosen group's body was accepted, or refused (its tokens go back to the budget)."""
        key = _key(pointer)
        if self._in_flight.pop(key, None) is None:
            return
        tier = self._tier_of.pop(key)
        if accepted:
            return
        self._tokens_of[pointer.publisher] -= pointer.tokens or 0
        self._groups_of[pointer.publisher] -= 1
        self._tier_tokens[tier] -= pointer.tokens or 0
        self._tier_groups[tier] -= 1

    def in_flight(self) -> int:
        """Chosen groups whose bodies are not in yet."""
        return len(self._in_flight)

    def next_gather(self) -> list[GroupPointer]:
        """Ends the gather: returns the offers dropped (those that came in before it; the ones
        that came in during it stay on offer for the next, for the strangers' draw only), and
        starts the next one's budget with what is still being fetched."""
        dropped = [p for held in self._offers.values() for p in held.values()
                   if self._offered_in[_key(p)] < self._gathers]
        for p in dropped:
            self._withdraw(p)
        self._tokens_of.clear()
        self._groups_of.clear()
        self._tier_tokens.clear()
        self._tier_groups.clear()
        self._tier_of = {key: self._tier_of[key] for key in self._in_flight}
        for key, p in self._in_flight.items():
            self._count(p, self._tier_of[key])
        self._gathers += 1
        self._open = False
        return dropped

    def used(self) -> tuple[int, int]:
        """(tokens, groups) chosen in this gather and not refused."""
        return sum(self._tokens_of.values()), sum(self._groups_of.values())

    def _could_ever_fit(self, p: GroupPointer) -> bool:
        b, n = self.budget, p.tokens or 0
        return n <= b.max_tokens and n <= b.max_tokens_per_peer and b.max_groups > 0 and b.max_groups_per_peer > 0

    def _fits(self, p: GroupPointer, *, earned: bool) -> bool:
        """Whether `p` fits the budget, its tier's part (earned or strangers') and its publisher's caps."""
        b, n = self.budget, p.tokens or 0
        tokens, groups = self.used()
        part_tokens, part_groups = self._parts[earned]
        return (tokens + n <= b.max_tokens and groups < b.max_groups
                and self._tier_tokens[earned] + n <= part_tokens and self._tier_groups[earned] < part_groups
                and self._tokens_of[p.publisher] + n <= b.max_tokens_per_peer
                and self._groups_of[p.publisher] < b.max_groups_per_peer)

    def _queue(self, publisher: str) -> list[GroupPointer]:
        """A publisher's offers, oldest first."""
        return sorted(self._offers.get(publisher, {}).values(), key=lambda g: (g.created_at, g.group_id))

    def _withdraw(self, pointer: GroupPointer) -> None:
        """Takes an offer off offer (chosen, dropped or replaced)."""
        held = self._offers[pointer.publisher]
        del held[pointer.group_id]
        del self._offered_in[_key(pointer)]
        if not held:  # a publisher with nothing on offer is not kept
            del self._offers[pointer.publisher]

    def _choose(self, pointer: GroupPointer, out: Choice, *, earned: bool) -> None:
        self._withdraw(pointer)
        self._in_flight[_key(pointer)] = pointer
        self._tier_of[_key(pointer)] = earned
        self._count(pointer, earned)
        out.chosen.append(pointer)

    def _count(self, pointer: GroupPointer, earned: bool) -> None:
        self._tokens_of[pointer.publisher] += pointer.tokens or 0
        self._groups_of[pointer.publisher] += 1
        self._tier_tokens[earned] += pointer.tokens or 0
        self._tier_groups[earned] += 1
