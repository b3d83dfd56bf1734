"""Which offered groups a gather fetches: what the node's next update will take, earned peers first.

Owns the budget's arithmetic over the `PointerTable`'s OFFERED records (docs/swarm.md, "Fetching
only what the update takes", says why and what was measured):

1. **earned peers** (policy score > 0, or settled by tenure: `settled`, docs/method.md "Tenure";
   and no stall since they last served: `PointerTable.stalled`), on arrival, origin by origin
   (`draw.earned_in_turns`: origins of the highest tenure class first, `tier`, then the best
   score's origin first), within
   the budget less the strangers' share (`Budget.parts`), those of recent credit (`recent`)
   within `Budget.recent_part` together, past which they wait for the strangers' draw;
2. once a gather is open (`open`), **strangers** (every other allowed peer, and earned offers
   left over or carried) within the strangers' share, in the strangers' draw
   (`peers/draw.py`), with the intake's seed (the node's peer id) and draw number (the round
   the gather is for), so a group fetched for the strangers' share is the one the update takes.

Within each publisher's offers, groups whose signed hint says they can carry gradient (some
answers right, some wrong: `GroupPointer.carries_signal`) go first, then groups without a hint
(older publishers), then groups whose hint says all right or all wrong (`signal_first`). The
hint orders a publisher's own groups only, never one publisher before another: the turns above
stand, so a crowd gains no precedence by its hints or by leaving them out. Every loss mode needs a
mixed group: a uniform one has zero advantage.

Invariants: every choice keeps `max_tokens`, `max_groups`, the per-publisher and the per-origin caps
(`Budget.origin_caps`, over both tiers), counting
the completion tokens each pointer signs; `used()` is the tokens and groups chosen this gather
(and still in flight from earlier ones) less those refused; an offer leaves once, chosen or
passed (never chosen: not fetched, not charged), at the latest at the end of the gather after
the one it came in, sooner when a newer round of its publisher replaces it; a group no budget
can take is passed at once. Pure bookkeeping, no I/O, loop thread only (`in_flight` may be read
from another thread). Imports: peers (draw, intake) and the fetch wing's `pointers`.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Callable, Optional

from ftis_swarm.peers.draw import OriginOf, earned_in_turns, origin_key, strangers_in_turns
from ftis_swarm.peers.intake import Budget
from ftis_swarm.swarm.fetch.pointers import Key, Phase, PointerTable, Record, key_of
from ftis_swarm.swarm.records import GroupPointer


@dataclasses.dataclass
class Choice:
    """What one `choose` decided: groups to fetch now, and offers dropped for good (passed in the table)."""

    chosen: list[GroupPointer] = dataclasses.field(default_factory=list)
    dropped: list[GroupPointer] = dataclasses.field(default_factory=list)


def signal_first(record: Record) -> int:
    """A stable sort key: 0 for an offer whose hint says it carries gradient, 1 without a hint, 2 for one
    whose hint says its rewards are all equal."""
    signal = record.pointer.carries_signal
    return 1 if signal is None else 0 if signal else 2


class Selection:
    """The budget of the current gather over the table's offers (see the module docstring).

    The offers are the `PointerTable`'s OFFERED records: the selection moves them (`choose`, `pass_`)
    and keeps the budget's arithmetic, the groups it chose that are not settled yet (`in_flight`) and
    what they hold of the budget, per publisher and tier.
    """

    def __init__(self, budget: Budget, *, seed: str, score: Callable[[str], float],
                 origin_of: Optional[OriginOf] = None, table: Optional[PointerTable] = None,
                 recent: Optional[Callable[[str], bool]] = None, settled: Optional[Callable[[str], bool]] = None,
                 tier: Optional[Callable[[str], int]] = None):
        """`recent(peer)`: whether a peer's credit is recent (the ledger's; None: no one's), for `Budget.recent_part`;
        `settled(peer)`: whether a peer without credit ranks first by its tenure (None: no one); `tier(peer)`: its
        tenure class, which orders the earned peers' origins (None: one class)."""
        self.budget = budget
        self._settled = settled or (lambda peer: False)
        self._tier = tier
        self._recent = recent or (lambda peer: False)
        recent_part = budget.recent_part()
        self._recent_caps = (recent_part.tokens, recent_part.groups)
        self._origin_caps = budget.origin_caps()
        self._marks: dict[Key, tuple[str, bool]] = {}  # in flight: (origin, counted as recent credit)
        self._origin_tokens: Counter[str] = Counter()
        self._origin_groups: Counter[str] = Counter()
        self._recent_used = [0, 0]  # tokens, groups of peers of recent credit in the earned part
        self.table = table if table is not None else PointerTable()
        self._seed, self._score, self._origin_of = seed, score, origin_of
        earned, strangers = budget.parts()
        self._parts = {True: (earned.tokens, earned.groups), False: (strangers.tokens, strangers.groups)}
        self._in_flight: dict[Key, Record] = {}  # chosen by this budget, not settled
        self._tokens_of: Counter[str] = Counter()
        self._groups_of: Counter[str] = Counter()
        self._tier_tokens: Counter[bool] = Counter()
        self._tier_groups: Counter[bool] = Counter()
        self._gathers = 0
        self._draw = 0
        self._open = False

    def offer(self, pointer: GroupPointer) -> list[GroupPointer]:
        """Offers a screened pointer (a record in the table); returns the offers it made obsolete (an older
        round of its publisher, passed), or [pointer] itself when it is older than the round on offer."""
        if self.table.known(key_of(pointer)):
            return []
        held = list(self.table.of(pointer.publisher, Phase.OFFERED).values())
        if any(r.pointer.round != pointer.round and r.pointer.created_at > pointer.created_at for r in held):
            self.table.pass_(pointer)  # a round older than the one on offer
            return [pointer]
        older = [r.pointer for r in held if r.pointer.round != pointer.round]
        for p in older:
            self.table.pass_(p)
        self.table.see(pointer, Phase.OFFERED, gather=self._gathers)
        return older

    def open(self, round: Optional[int] = None) -> None:
        """A gather began (for the node's round `round`: the draw's number; None: this selection's
        count of gathers): strangers may be chosen from now on."""
        self._open = True
        self._draw = self._gathers if round is None else round

    def choose(self) -> Choice:
        """Picks the offers to fetch now (see the module docstring for the order)."""
        out = Choice()
        for record in [r for r in self.table.live(Phase.OFFERED) if not self._could_ever_fit(r.pointer)]:
            self.table.pass_(record.pointer)  # offers no budget can ever take
            out.dropped.append(record.pointer)
        offering = self.table.publishers(Phase.OFFERED)
        earned = [p for p in sorted(offering)  # a stall: no rank
                  if (self._score(p) > 0 or self._settled(p)) and not self.table.stalled(p)]
        turns = earned_in_turns([r for p in earned for r in self._queue(p, signal=True)],
                                sender=lambda r: r.pointer.publisher, origin_of=self._origin_of, score=self._score,
                                seed=self._seed, draw=self._draw, tier=self._tier)
        for record in turns:
            if record.offered_in == self._gathers and self._fits(record.pointer, earned=True):
                self._choose(record, out, earned=True)
        if self._open:  # earned offers left over too: a scored peer without standing is the intake's stranger
            records = {key_of(r.pointer): r for p in sorted(offering) for r in self._queue(p, signal=True)}
            drawn = strangers_in_turns([r.pointer for r in records.values()], sender=lambda g: g.publisher,
                                       origin_of=self._origin_of, seed=self._seed, draw=self._draw)
            for record in (records[key_of(p)] for p in drawn):
                if record.phase is Phase.OFFERED and self._fits(record.pointer, earned=False):
                    self._choose(record, out, earned=False)
        return out

    def settled(self, pointer: GroupPointer, *, accepted: bool) -> None:
        """A chosen group's body was accepted, or refused (its tokens go back to the budget)."""
        record = self._in_flight.pop(key_of(pointer), None)
        if record is None:
            return
        if not accepted:
            self._count(pointer, record.tier, -1)
        self._marks.pop(key_of(pointer), None)

    def in_flight(self) -> int:
        """Chosen groups whose bodies are not in yet."""
        return len(self._in_flight)

    def next_gather(self) -> list[GroupPointer]:
        """Ends the gather: passes and returns the offers that came in before it (the ones that came in
        during it stay on offer for the next, for the strangers' draw only), and starts the next one's
        budget with what is still being fetched."""
        dropped = [r.pointer for r in self.table.live(Phase.OFFERED) if r.offered_in < self._gathers]
        for p in dropped:
            self.table.pass_(p)
        self._tokens_of.clear()
        self._groups_of.clear()
        self._tier_tokens.clear()
        self._tier_groups.clear()
        self._origin_tokens.clear()
        self._origin_groups.clear()
        self._recent_used = [0, 0]
        for record in self._in_flight.values():
            self._count(record.pointer, record.tier, +1)
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
        origin, (origin_tokens, origin_groups) = origin_key(p.publisher, self._origin_of), self._origin_caps
        if earned and self._recent(p.publisher) and (self._recent_used[0] + n > self._recent_caps[0]
                                                     or self._recent_used[1] >= self._recent_caps[1]):
            return False  # peers of recent credit: within their part together, then the strangers' draw
        return (tokens + n <= b.max_tokens and groups < b.max_groups
                and self._tier_tokens[earned] + n <= part_tokens and self._tier_groups[earned] < part_groups
                and self._tokens_of[p.publisher] + n <= b.max_tokens_per_peer
                and self._groups_of[p.publisher] < b.max_groups_per_peer
                and self._origin_tokens[origin] + n <= origin_tokens and self._origin_groups[origin] < origin_groups)

    def _queue(self, publisher: str, *, signal: bool = False) -> list[Record]:
        """A publisher's offers, oldest first; with `signal`, those its hint says carry gradient first
        (`signal_first`), each class oldest first."""
        return sorted(self.table.of(publisher, Phase.OFFERED).values(),
                      key=lambda r: ((signal_first(r) if signal else 0), r.pointer.created_at, r.pointer.group_id))

    def _choose(self, record: Record, out: Choice, *, earned: bool) -> None:
        self.table.choose(record, tier=earned)
        self._in_flight[key_of(record.pointer)] = record
        self._marks[key_of(record.pointer)] = (origin_key(record.pointer.publisher, self._origin_of),
                                               earned and self._recent(record.pointer.publisher))
        self._count(record.pointer, earned, +1)
        out.chosen.append(record.pointer)

    def _count(self, pointer: GroupPointer, earned: bool, sign: int) -> None:
        self._tokens_of[pointer.publisher] += sign * (pointer.tokens or 0)
        self._groups_of[pointer.publisher] += sign
        self._tier_tokens[earned] += sign * (pointer.tokens or 0)
        self._tier_groups[earned] += sign
        origin, recent = self._marks.get(key_of(pointer), (origin_key(pointer.publisher, self._origin_of), False))
        self._origin_tokens[origin] += sign * (pointer.tokens or 0)
        self._origin_groups[origin] += sign
        if recent:
            self._recent_used[0] += sign * (pointer.tokens or 0)
            self._recent_used[1] += sign
