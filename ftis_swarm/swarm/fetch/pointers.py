"""`PointerTable`: a pointer's life at this node, one record per (publisher, group id), and its only writer.

A group id alone names nothing a peer cannot copy: the same id under two publishers' signed
pointers is two records, and only a fetched body's sender proves which one lied. Every other
part of the fetch wing reads this table: the selection keeps the budget's arithmetic, the
scheduler its slots and per-publisher state (allowance, failures, suspension, turns), the
legs are the records' times. Phases and transitions (`Phase`):

    (new) --see--> OFFERED (with a budget) --choose--> CHOSEN --start--> FETCHING --accept--> ACCEPTED
               \\--> CHOSEN (without one)         ^                 |
                                                 \\----- back -----/  (a stream ended before its answer,
                                                                      a busy or failed source: pending again)
    any live phase --reject--> REJECTED (reason; revivable when no source answered: a later have
                                         revives it, `revive`, and it is seen afresh)
    OFFERED --pass_--> PASSED (never chosen: not fetched, not charged)

Live records (OFFERED, CHOSEN, FETCHING) stay until they settle; settled ones (ACCEPTED,
REJECTED, PASSED) until no record of their pointer can be alive (`until`: its creation, or
now, plus ttl and skew), at most `max_settled` of them (the oldest insertion first: a flood
of pointers costs bounded memory, O(1) per record to forget, `expiring`). Each record keeps
its leg times (`legs.Legs`: seen, chosen, started, began, received; accepted when it is),
its fetch attempts and, when a budget chose it, its tier (earned or strangers'). Loop thread
only.

**Stalls** (`stalled`): the table also remembers, per publisher, how many of its chosen bodies it
stalled on or said missing since it last served one (`note_stall`, at most `MAX_STALLS`; a body
it serves clears it: `note_served`; forgotten a span after the last stall, so the mark decays
with the records it could concern; at most `max_settled` publishers). The selection and the
scheduler read it: a publisher with stalls has no precedence that its credit would give it
(docs/swarm.md, "A stall costs its place"). A stall is never a fault: it is not signed.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import time
from typing import Iterator, Optional

from ftis_swarm.swarm.fetch.expiring import ExpiringMap
from ftis_swarm.swarm.fetch.legs import Legs
from ftis_swarm.swarm.records import GroupPointer

Key = tuple[str, str]  # (publisher, group id)
MAX_SETTLED = 1 << 16
"""Settled records remembered (and as many accepted group ids); past it the oldest go first."""
MAX_STALLS = 8
"""The most stalls a publisher's mark counts (the mark is bounded: it costs precedence, nothing more)."""


class Phase(enum.Enum):
    OFFERED = "offered"
    CHOSEN = "chosen"
    FETCHING = "fetching"
    ACCEPTED = "accepted"
    REJECTED = "rejected"
    PASSED = "passed"


LIVE = (Phase.OFFERED, Phase.CHOSEN, Phase.FETCHING)


def key_of(pointer: GroupPointer) -> Key:
    return pointer.publisher, pointer.group_id


@dataclasses.dataclass
class Record:
    """One pointer's state at this node (see the module docstring)."""

    pointer: GroupPointer
    phase: Phase
    seen: float
    offered_in: int = -1
    """The gather it was offered in (with a budget)."""
    tier: Optional[bool] = None
    """Chosen by a budget: in the earned part (True) or the strangers' (False); None: without one."""
    attempts: int = 0
    chosen: float = math.nan
    fetched: Optional[tuple[float, float, float]] = None
    """(started, began, received) of its last attempt whose bytes came in."""
    reason: str = ""
    revivable: bool = False
    deferred: bool = False
    """Held back once for its publisher's room in a gather (`max_groups_per_peer_per_gather`)."""


class PointerTable:
    """The records, indexed by key, by publisher and phase (live ones) and by group id (accepted, sourceless)."""

    def __init__(self, *, span: float = 3600.0, max_settled: int = MAX_SETTLED, clock=time.time):
        """`span`: how long after its creation (or now, if later) a pointer's record can still be alive
        (the swarm's ttl + clock skew); a settled record is kept that long. `clock`: unix time."""
        self._span, self._clock = span, clock
        self._live: dict[Key, Record] = {}
        self._of: dict[str, dict[Phase, dict[str, Record]]] = {}  # publisher -> live phase -> group id -> record
        self._settled: ExpiringMap[Key, Record] = ExpiringMap(max_settled)
        self._accepted: ExpiringMap[str, str] = ExpiringMap(max_settled)  # group id -> its publisher
        self._sourceless: dict[str, dict[str, Record]] = {}  # group id -> publisher -> revivable rejection
        self._stalls: ExpiringMap[str, int] = ExpiringMap(max_settled)  # publisher -> stalls since it last served

    # -- reading -----------------------------------------------------------------------------------
    def get(self, key: Key) -> Optional[Record]:
        record = self._live.get(key)
        return record if record is not None else self._settled.get(key)

    def known(self, key: Key) -> bool:
        """Whether this pointer has a record, live or settled (a pointer is considered once)."""
        return key in self._live or key in self._settled

    def accepted_from(self, group_id: str) -> Optional[str]:
        """The publisher whose body of `group_id` was accepted here, if any."""
        return self._accepted.get(group_id)

    def of(self, publisher: str, phase: Phase) -> dict[str, Record]:
        """A publisher's live records in `phase`, by group id (a view: do not change it)."""
        return self._of.get(publisher, {}).get(phase, {})

    def live(self, phase: Phase) -> Iterator[Record]:
        for phases in list(self._of.values()):
            yield from list(phases.get(phase, {}).values())

    def publishers(self, phase: Phase) -> list[str]:
        """Publishers with a live record in `phase`."""
        return [p for p, phases in self._of.items() if phases.get(phase)]

    def stalled(self, publisher: str) -> int:
        """The publisher's chosen bodies that stalled or were missing since it last served one (module docstring)."""
        return self._stalls.get(publisher) or 0

    def sourceless(self) -> list[str]:
        return sorted(self._sourceless)

    def sourceless_of(self, group_id: str) -> list[Record]:
        return list(self._sourceless.get(group_id, {}).values())

    def __len__(self) -> int:
        return len(self._live) + len(self._settled)

    # -- transitions (the only writers) ---------------------------------------------------------------
    def see(self, pointer: GroupPointer, phase: Phase, *, gather: int = -1) -> Record:
        """A new pointer, screened: OFFERED to a budget (in gather `gather`), or CHOSEN without one."""
        now = self._clock()
        record = Record(pointer=pointer, phase=phase, seen=now, offered_in=gather,
                        chosen=now if phase is Phase.CHOSEN else math.nan)
        self._live[key_of(pointer)] = record
        self._index(record)
        return record

    def choose(self, record: Record, *, tier: Optional[bool]) -> None:
        assert record.phase is Phase.OFFERED, record.phase
        self._move(record, Phase.CHOSEN)
        record.tier, record.chosen = tier, self._clock()

    def start(self, record: Record) -> None:
        """Its body's stream took a slot."""
        assert record.phase is Phase.CHOSEN, record.phase
        self._move(record, Phase.FETCHING)

    def back(self, record: Record) -> None:
        """Pending again (its stream ended before its answer, or its source failed or was busy)."""
        if record.phase is Phase.FETCHING:
            self._move(record, Phase.CHOSEN)

    def attempt(self, record: Record) -> int:
        """A counted failed attempt; returns how many it has had."""
        record.attempts += 1
        return record.attempts

    def defer(self, record: Record) -> bool:
        """Held back for its publisher's room; True the first time (it is counted once)."""
        first, record.deferred = not record.deferred, True
        return first

    def fetched(self, record: Record, *, started: float, began: float, received: float) -> None:
        record.fetched = (started, began, received)

    def accept(self, record: Record) -> Legs:
        """Its body was checked and accepted: its `Legs`, accepted now."""
        now = self._clock()
        until = self._until(record.pointer)
        self._settle(record, Phase.ACCEPTED, until)
        self._accepted.put(record.pointer.group_id, record.pointer.publisher, until)
        chosen = record.seen if math.isnan(record.chosen) else record.chosen
        started, began, received = record.fetched or (chosen, chosen, now)
        return Legs(seen=record.seen, chosen=chosen, started=started, began=began, received=received, accepted=now)

    def reject(self, pointer: GroupPointer, reason: str, *, revivable: bool) -> Record:
        """Refused for `reason` (from any live phase, or before it had a record: screened out)."""
        record = self._live.get(key_of(pointer)) or Record(pointer=pointer, phase=Phase.REJECTED, seen=self._clock())
        record.reason, record.revivable = reason, revivable
        self._settle(record, Phase.REJECTED, self._until(pointer))
        if revivable:
            self._sourceless.setdefault(pointer.group_id, {})[pointer.publisher] = record
        return record

    def pass_(self, pointer: GroupPointer) -> Record:
        """An offer never chosen (or refused as older than its publisher's round on offer): not fetched,
        not charged."""
        record = self._live.get(key_of(pointer)) or Record(pointer=pointer, phase=Phase.PASSED, seen=self._clock())
        self._settle(record, Phase.PASSED, self._until(pointer))
        return record

    def note_stall(self, publisher: str) -> int:
        """A chosen body of the publisher's stalled, or it said it did not have it: its mark, one more."""
        stalls = min(MAX_STALLS, self.stalled(publisher) + 1)
        self._stalls.put(publisher, stalls, self._clock() + self._span)
        return stalls

    def note_served(self, publisher: str) -> None:
        """The publisher served a body that was accepted: its mark is cleared."""
        self._stalls.pop(publisher)

    def revive(self, record: Record) -> bool:
        """A revivable rejection is forgotten, so its pointer is seen afresh; False if it is no longer one."""
        key = key_of(record.pointer)
        held = self._sourceless.get(record.pointer.group_id, {})
        held.pop(record.pointer.publisher, None)
        if not held:
            self._sourceless.pop(record.pointer.group_id, None)
        if self._settled.get(key) is not record:
            return False
        self._settled.pop(key)
        return True

    def expire(self, now: float) -> None:
        """Forgets the settled records (and accepted ids) that ended; sourceless ones with them."""
        self._settled.expire(now)
        self._accepted.expire(now)
        self._stalls.expire(now)
        for group_id, by_publisher in list(self._sourceless.items()):
            for publisher in [p for p, r in by_publisher.items() if self._settled.get((p, group_id)) is not r]:
                del by_publisher[publisher]
            if not by_publisher:
                del self._sourceless[group_id]

    # -- internals ------------------------------------------------------------------------------------
    def _until(self, pointer: GroupPointer) -> float:
        """When no record of this pointer can still be alive."""
        return max(pointer.created_at, self._clock()) + self._span

    def _index(self, record: Record) -> None:
        self._of.setdefault(record.pointer.publisher, {}).setdefault(record.phase, {})[record.pointer.group_id] = record

    def _unindex(self, record: Record) -> None:
        phases = self._of.get(record.pointer.publisher)
        if phases is None:
            return
        held = phases.get(record.phase)
        if held is not None:
            held.pop(record.pointer.group_id, None)
            if not held:
                del phases[record.phase]
        if not phases:
            del self._of[record.pointer.publisher]

    def _move(self, record: Record, phase: Phase) -> None:
        self._unindex(record)
        record.phase = phase
        self._index(record)

    def _settle(self, record: Record, phase: Phase, until: float) -> None:
        key = key_of(record.pointer)
        if self._live.get(key) is record:
            self._unindex(record)
            del self._live[key]
        record.phase = phase
        self._settled.put(key, record, until)
