"""Second sources of bodies: the holders that announced a group (signed `HaveRecord`s), their suspensions.

A holder is chosen for a group while its announcement lasts and it is not suspended: the one
with the fewest groups in flight from this node, then the fewest failures. A holder that
answers busy waits a poll; one that fails (missing, unreachable, stalled, broken, or bytes
that contradict the pointer) is suspended for `poll_interval * 2^(k-1)` (k failures in a row,
at most a quarter of the TTL), forgotten for that group when it said missing or sent wrong
bytes, and forgotten altogether after wrong bytes or `max_fetch_attempts` failures in a row.

Bounded whatever the holders announce, in memory and in time per group id noted (a flood of
signed haves naming random groups once cost a scan of every remembered group per id):
`MAX_HOLDERS_PER_GROUP` holders a group (the one whose announcement ends first goes),
`MAX_GROUPS_PER_HOLDER` groups a holder (its own announcement that ends first goes, so an
honest holder past it loses its oldest groups, never its newest; each counted in
`over_cap`, charged to no one), and `MAX_HELD_GROUPS` groups in all (the group whose last
announcement ends first goes). Each of these evictions is a heap pop, O(log n); a group
whose last holder is dropped is forgotten at once, so no group is ever left with no holder.
Runs on the swarm's event loop, inside `FetchScheduler`.
"""

from __future__ import annotations

import dataclasses
import heapq
import logging
from collections import Counter
from typing import Optional

from ftis_swarm.config import SwarmConfig
from ftis_swarm.peers import faults
from ftis_swarm.swarm.counters import SwarmCounters
from ftis_swarm.swarm.fetch.streams import BodyRefused, BodyUnavailable

logger = logging.getLogger(__name__)

MAX_HOLDERS_PER_GROUP = 8
MAX_HELD_GROUPS = 4096
"""Groups whose holders are remembered; past it the ones whose announcements end first go."""
MAX_GROUPS_PER_HOLDER = 512
"""Groups one holder may have announced at once; past it its announcements that end first go.
A have names at most `records.MAX_HELD_ANNOUNCED` (64), a holder sends at most 4 a `have_interval`
(`gossip.haves`): 512 is 8 full haves, two intervals of the most an honest holder changes."""
_STALE_SLACK = 64


class _EndOrder:
    """Keys and when each one ends, the earliest in O(log n): a heap whose stale entries (the key gone or
    its end changed) are skipped when they surface and dropped all at once when they outnumber the live keys."""

    def __init__(self) -> None:
        self.ends: dict[str, float] = {}
        self._heap: list[tuple[float, str]] = []

    def __len__(self) -> int:
        return len(self.ends)

    def set(self, key: str, end: float) -> None:
        if self.ends.get(key) == end:
            return
        self.ends[key] = end
        heapq.heappush(self._heap, (end, key))
        if len(self._heap) > 2 * len(self.ends) + _STALE_SLACK:
            self._heap = [(e, k) for k, e in self.ends.items()]
            heapq.heapify(self._heap)

    def discard(self, key: str) -> None:
        self.ends.pop(key, None)

    def earliest(self) -> Optional[tuple[float, str]]:
        """(end, key) of the key that ends first, or None when there is none."""
        heap = self._heap
        while heap and self.ends.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)
        return heap[0] if heap else None

    def heap_size(self) -> int:
        """Entries in the heap, stale ones included: at most twice the keys and `_STALE_SLACK` after a `set`."""
        return len(self._heap)


@dataclasses.dataclass
class _Holder:
    failures: int = 0
    resume_at: float = 0.0
    named: _EndOrder = dataclasses.field(default_factory=_EndOrder)
    """The groups it announced, by when each announcement ends."""


class HolderBook:
    """Who announced which group until when, and how each holder fared (loop thread only)."""

    def __init__(self, cfg: SwarmConfig, counters: SwarmCounters):
        self._cfg, self._counters = cfg, counters
        self._held_by: dict[str, dict[str, float]] = {}  # group id -> {holder: its announcement ends}, never empty
        self._group_ends = _EndOrder()  # group id -> when its last announcement ends
        self._holders: dict[str, _Holder] = {}
        self.in_flight: Counter[str] = Counter()
        """Groups being fetched from each source (publishers too), for the choice of the least loaded."""
        self.over_cap = 0
        """Announcements dropped because their holder named more than `MAX_GROUPS_PER_HOLDER` groups."""

    def __len__(self) -> int:
        """Groups with a holder."""
        return len(self._held_by)

    def named_by(self, holder: str) -> int:
        """Groups `holder` is remembered to hold."""
        state = self._holders.get(holder)
        return len(state.named) if state is not None else 0

    def note(self, holder: str, group_ids: list[str], *, until: float) -> None:
        """`holder` announced (signed) that it holds these bodies until `until` (the latest said counts)."""
        state = self._holders.setdefault(holder, _Holder())
        for group_id in group_ids:
            held = self._held_by.setdefault(group_id, {})
            held[holder] = max(until, held.get(holder, until))
            state.named.set(group_id, held[holder])
            self._group_ends.set(group_id, max(held.values()))
            if len(held) > MAX_HOLDERS_PER_GROUP:
                self._drop(min(held, key=held.get), group_id)
            if len(state.named) > MAX_GROUPS_PER_HOLDER:
                self._drop(holder, state.named.earliest()[1])
                self.over_cap += 1
                self._counters.add("haves_over_cap")
            while len(self._group_ends) > MAX_HELD_GROUPS:
                self._drop_group(self._group_ends.earliest()[1])

    def has(self, group_id: str) -> bool:
        return group_id in self._held_by

    def serves(self, holder: str, group_id: str, now: float) -> bool:
        """Whether `holder` may be asked for `group_id` now (announced, not suspended)."""
        until = self._held_by.get(group_id, {}).get(holder)
        return until is not None and until > now and now >= self._holders[holder].resume_at

    def least_loaded(self, group_id: str, now: float) -> Optional[str]:
        """The holder to ask for `group_id` now, or None when none is free."""
        free = [h for h in self._held_by.get(group_id, {}) if self.serves(h, group_id, now)]
        if not free:
            return None
        return min(free, key=lambda h: (self.in_flight[h], self._holders[h].failures, h))

    def answered(self, holder: str) -> None:
        """A body from `holder` matched its pointer's hash."""
        self._holders[holder].failures = 0

    def busy(self, holder: str, now: float) -> None:
        self._holders[holder].resume_at = now + self._cfg.fetch.poll_interval

    def failed(self, holder: str, group_id: str, error: BaseException, now: float) -> None:
        """Charges the holder (its body_* reason, or what its bytes contradict) and suspends or forgets it."""
        reason = getattr(error, "reason", faults.FETCH_ERROR)
        if not isinstance(error, (BodyUnavailable, BodyRefused)):
            logger.error("fetching group %s from holder %s failed unexpectedly: %r", group_id, holder, error)
        self._counters.add("holder_fetch_failures")
        self._counters.fault(holder, Counter({reason: 1}))
        state = self._holders[holder]
        state.failures += 1
        state.resume_at = now + min(self._cfg.records.ttl / 4,
                                    self._cfg.fetch.poll_interval * 2 ** (state.failures - 1))
        if reason == faults.BODY_MISSING or isinstance(error, BodyRefused):
            self._drop(holder, group_id)
        if isinstance(error, BodyRefused) or state.failures >= self._cfg.fetch.max_fetch_attempts:
            for named in list(state.named.ends):
                self._drop(holder, named)
        logger.debug("fetch of %s from holder %s failed (%s); another source next", group_id, holder, error)

    def forget(self, now: float) -> None:
        """Drops announcements that ended, and holders with none left and nothing in flight."""
        for holder, state in list(self._holders.items()):
            first = state.named.earliest()
            while first is not None and first[0] < now:
                self._drop(holder, first[1])
                first = state.named.earliest()
            if not state.named and not self.in_flight[holder]:
                del self._holders[holder]

    def _drop(self, holder: str, group_id: str) -> None:
        """`holder` no longer counts as a source of `group_id`; the group goes with its last holder."""
        held = self._held_by.get(group_id)
        if held is None or held.pop(holder, None) is None:
            return
        self._holders[holder].named.discard(group_id)
        if held:
            self._group_ends.set(group_id, max(held.values()))
        else:
            del self._held_by[group_id]
            self._group_ends.discard(group_id)

    def _drop_group(self, group_id: str) -> None:
        for holder in self._held_by.pop(group_id):
            self._holders[holder].named.discard(group_id)
        self._group_ends.discard(group_id)
