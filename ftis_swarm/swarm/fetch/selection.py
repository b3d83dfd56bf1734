"""Which offered groups a gather fetches: what the node's next update will take, earned peers first.

Pointers are cheap and bodies are not, so with a budget (`SwarmClient.set_budget`, the
node's `peers.intake.Budget`) the gatherer fetches only the groups an update can take.
Every screened group of a peer's newest round is an offer; `choose` picks from the offers:

1. **earned peers** (policy score > 0), highest score first, at any time (their bodies are
   fetched while the node still generates), within the budget less the strangers' share;
2. once a gather is open (`open`), **strangers** (every other allowed peer): publishers in
   a seeded random order, one group of each in turn, within the budget; while an earned
   peer's round is still owed they may use only the strangers' share
   (`STRANGERS_SHARE` of `max_tokens`), so the earned tier is never first-come;
3. once no earned peer is owed, earned groups left over and then strangers take what is left.

Every choice keeps the budget's caps: `max_tokens` and `max_groups` for the update, and
`max_tokens_per_peer` and `max_groups_per_peer` per publisher, counting the completion
tokens each pointer signs (a body with other counts is refused as `pointer_mismatch`).
A group never chosen costs nothing: not fetched, not charged; at the end of the gather
(`next_gather`) the offers left are dropped (`not_chosen`), and a newer round of a
publisher drops its older offers. A chosen group whose body is refused gives its tokens
back. The random order is seeded by the node's peer id and the gather's number, so two
nodes pick different strangers and, over a run, every honest publisher's groups are used
by someone (docs/scale.md).

Pure bookkeeping, no I/O: the gatherer calls it on the swarm's event loop thread.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections import Counter
from typing import Callable

from ftis_swarm.peers.intake import Budget
from ftis_swarm.swarm.records import GroupPointer

STRANGERS_SHARE = 0.25
"""Part of the budget's tokens held for strangers while earned peers' rounds are owed."""


@dataclasses.dataclass
class Choice:
    """What one `choose` decided: groups to fetch now, and offers dropped for good."""

    chosen: list[GroupPointer] = dataclasses.field(default_factory=list)
    dropped: list[GroupPointer] = dataclasses.field(default_factory=list)


class Selection:
    """The offers and the budget of the current gather (see the module docstring)."""

    def __init__(self, budget: Budget, *, seed: str, score: Callable[[str], float]):
        self.budget = budget
        self._seed, self._score = seed, score
        self._reserve = math.ceil(STRANGERS_SHARE * budget.max_tokens)
        self._offers: dict[str, dict[str, GroupPointer]] = {}  # publisher -> group id -> pointer (newest round)
        self._in_flight: dict[str, GroupPointer] = {}
        self._tokens_of: Counter[str] = Counter()
        self._groups_of: Counter[str] = Counter()
        self._gathers = 0
        self._open = False

    def offer(self, pointer: GroupPointer) -> list[GroupPointer]:
        """Adds a screened pointer; returns the offers it makes obsolete (an older round of its publisher)."""
        held = self._offers.setdefault(pointer.publisher, {})
        older = [p for p in held.values() if p.round != pointer.round and p.created_at <= pointer.created_at]
        if any(p.round != pointer.round and p.created_at > pointer.created_at for p in held.values()):
            return [pointer]  # a round older than the one on offer
        for p in older:
            del held[p.group_id]
        held[pointer.group_id] = pointer
        return older

    def open(self) -> None:
        """A gather began: strangers may be chosen from now on."""
        self._open = True

    def choose(self, *, earned_owed: bool) -> Choice:
        """Picks the offers to fetch now (see the module docstring for the order)."""
        out = Choice()
        for publisher, held in list(self._offers.items()):  # offers no budget can ever take
            for p in [p for p in held.values() if not self._could_ever_fit(p)]:
                del held[p.group_id]
                out.dropped.append(p)
        earned = sorted((p for p in self._offers if self._score(p) > 0), key=lambda p: (-self._score(p), p))
        self._take(earned, limit=self.budget.max_tokens - self._reserve, out=out)
        if self._open:
            strangers = sorted(p for p in self._offers if self._score(p) <= 0)
            random.Random(f"{self._seed}/{self._gathers}").shuffle(strangers)
            used_by_earned = sum(self._tokens_of[p] for p in self._tokens_of if self._score(p) > 0)
            self._take(strangers, limit=used_by_earned + self._reserve, out=out, one_each=True)
            if not earned_owed:
                self._take(earned, limit=self.budget.max_tokens, out=out)
                strangers.sort(key=lambda p: self._groups_of[p])  # stable: the draw goes on where it stopped
                self._take(strangers, limit=self.budget.max_tokens, out=out, one_each=True)
        return out

    def settled(self, pointer: GroupPointer, *, accepted: bool) -> None:
        """A chosen group's body was accepted, or refused (its tokens go back to the budget)."""
        if self._in_flight.pop(pointer.group_id, None) is None or accepted:
            return
        self._tokens_of[pointer.publisher] -= pointer.tokens or 0
        self._groups_of[pointer.publisher] -= 1

    def in_flight(self) -> int:
        """Chosen groups whose bodies are not in yet."""
        return len(self._in_flight)

    def next_gather(self) -> list[GroupPointer]:
        """Ends the gather: returns the offers left (dropped), and starts the next one's budget
        with what is still being fetched."""
        dropped = [p for held in self._offers.values() for p in held.values()]
        self._offers.clear()
        self._tokens_of.clear()
        self._groups_of.clear()
        for p in self._in_flight.values():
            self._tokens_of[p.publisher] += p.tokens or 0
            self._groups_of[p.publisher] += 1
        self._gathers += 1
        self._open = False
        return dropped

    def used(self) -> tuple[int, int]:
        """(tokens, groups) chosen in this gather and not refused."""
        return sum(self._tokens_of.values()), sum(self._groups_of.values())

    def _could_ever_fit(self, p: GroupPointer) -> bool:
        b, n = self.budget, p.tokens or 0
        return n <= b.max_tokens and n <= b.max_tokens_per_peer and b.max_groups > 0 and b.max_groups_per_peer > 0

    def _fits(self, p: GroupPointer, limit: int) -> bool:
        b, n = self.budget, p.tokens or 0
        tokens, groups = self.used()
        return (tokens + n <= min(limit, b.max_tokens) and groups < b.max_groups
                and self._tokens_of[p.publisher] + n <= b.max_tokens_per_peer
                and self._groups_of[p.publisher] < b.max_groups_per_peer)

    def _take(self, publishers: list[str], *, limit: int, out: Choice, one_each: bool = False) -> None:
        """Chooses offers of `publishers` in order while they fit under `limit` tokens: all that fit
        of each publisher in turn, or (`one_each`) one group of each publisher a pass."""
        queues = {p: sorted(self._offers.get(p, {}).values(), key=lambda g: (g.created_at, g.group_id))
                  for p in publishers}
        while True:
            progressed = False
            for publisher in publishers:
                queue = queues[publisher]
                while queue:
                    pointer = queue.pop(0)
                    if not self._fits(pointer, limit):
                        continue
                    self._choose(pointer, out)
                    progressed = True
                    if one_each:
                        break
            if not (one_each and progressed):
                return

    def _choose(self, pointer: GroupPointer, out: Choice) -> None:
        del self._offers[pointer.publisher][pointer.group_id]
        self._in_flight[pointer.group_id] = pointer
        self._tokens_of[pointer.publisher] += pointer.tokens or 0
        self._groups_of[pointer.publisher] += 1
        out.chosen.append(pointer)
