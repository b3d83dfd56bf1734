"""Second sources of bodies: the holders that announced a group (signed `HaveRecord`s), their suspensions.

A holder is chosen for a group while its announcement lasts and it is not suspended: the one
with the fewest groups in flight from this node, then the fewest failures. A holder that
answers busy waits a poll; one that fails (missing, unreachable, stalled, broken, or bytes
that contradict the pointer) is suspended for `poll_interval * 2^(k-1)` (k failures in a row,
at most a quarter of the TTL), forgotten for that group when it said missing or sent wrong
bytes, and forgotten altogether after wrong bytes or `max_fetch_attempts` failures in a row.
Runs on the swarm's event loop, inside `FetchScheduler`.
"""

from __future__ import annotations

import dataclasses
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


@dataclasses.dataclass
class _Holder:
    failures: int = 0
    resume_at: float = 0.0


class HolderBook:
    """Who announced which group until when, and how each holder fared (loop thread only)."""

    def __init__(self, cfg: SwarmConfig, counters: SwarmCounters):
        self._cfg, self._counters = cfg, counters
        self._held_by: dict[str, dict[str, float]] = {}  # group id -> {holder: its announcement ends}
        self._holders: dict[str, _Holder] = {}
        self.in_flight: Counter[str] = Counter()
        """Groups being fetched from each source (publishers too), for the choice of the least loaded."""

    def note(self, holder: str, group_ids: list[str], *, until: float) -> None:
        """`holder` announced (signed) that it holds these bodies until `until`."""
        for group_id in group_ids:
            held = self._held_by.setdefault(group_id, {})
            held[holder] = until
            if len(held) > MAX_HOLDERS_PER_GROUP:
                del held[min(held, key=held.get)]
        self._holders.setdefault(holder, _Holder())
        while len(self._held_by) > MAX_HELD_GROUPS:
            del self._held_by[min(self._held_by, key=lambda g: max(self._held_by[g].values()))]

    def has(self, group_id: str) -> bool:
        return bool(self._held_by.get(group_id))

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
        self._holders[holder].resume_at = now + self._cfg.poll_interval

    def failed(self, holder: str, group_id: str, error: BaseException, now: float) -> None:
        """Charges the holder (its body_* reason, or what its bytes contradict) and suspends or forgets it."""
        reason = getattr(error, "reason", faults.FETCH_ERROR)
        if not isinstance(error, (BodyUnavailable, BodyRefused)):
            logger.error("fetching group %s from holder %s failed unexpectedly: %r", group_id, holder, error)
        self._counters.add("holder_fetch_failures")
        self._counters.fault(holder, Counter({reason: 1}))
        state = self._holders[holder]
        state.failures += 1
        state.resume_at = now + min(self._cfg.ttl / 4, self._cfg.poll_interval * 2 ** (state.failures - 1))
        if reason == faults.BODY_MISSING or isinstance(error, BodyRefused):
            self._held_by.get(group_id, {}).pop(holder, None)
        if isinstance(error, BodyRefused) or state.failures >= self._cfg.max_fetch_attempts:
            for held in self._held_by.values():
                held.pop(holder, None)
        logger.debug("fetch of %s from holder %s failed (%s); another source next", group_id, holder, error)

    def forget(self, now: float) -> None:
        """Drops announcements that ended, and holders with none left and nothing in flight."""
        for group_id, held in list(self._held_by.items()):
            for holder in [h for h, until in held.items() if until < now]:
                del held[holder]
            if not held:
                del self._held_by[group_id]
        live = {h for held in self._held_by.values() for h in held}
        for holder in [h for h in self._holders if h not in live and not self.in_flight[h]]:
            del self._holders[holder]
