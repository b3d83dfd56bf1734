"""A bounded map whose entries end at a time: what the gatherer remembers of pointers it has settled.

Keys are what peers name (a group id, a (publisher, group id) pair), so the map is bounded in
memory and in time per message: at most `max_size` entries (past it the oldest insertion goes
first), and `expire(now)` drops ended entries from the front in insertion order, O(1) per entry
dropped. Insertion order is end order up to the clock skew (an entry ends at its pointer's
creation, at most `max_clock_skew` ahead, plus a fixed span), so an entry may outlive its end
by at most that skew: remembering a settled pointer a little longer only refuses a record that
is already dead. Loop thread only.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, Hashable, Optional, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class ExpiringMap(Generic[K, V]):
    """{key: value} with an end time per entry (see the module docstring)."""

    def __init__(self, max_size: int):
        if max_size < 1:
            raise ValueError("max_size must be positive")
        self._max = max_size
        self._items: OrderedDict[K, tuple[V, float]] = OrderedDict()
        self.evicted = 0
        """Entries dropped for room before they ended."""

    def put(self, key: K, value: V, until: float) -> None:
        self._items.pop(key, None)
        self._items[key] = (value, until)
        while len(self._items) > self._max:
            self._items.popitem(last=False)
            self.evicted += 1

    def get(self, key: K) -> Optional[V]:
        item = self._items.get(key)
        return None if item is None else item[0]

    def pop(self, key: K) -> Optional[V]:
        item = self._items.pop(key, None)
        return None if item is None else item[0]

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __len__(self) -> int:
        return len(self._items)

    def expire(self, now: float) -> None:
        """Drops the entries that ended before `now`, from the oldest insertion on, up to the first that has not."""
        while self._items:
            key, (_, until) = next(iter(self._items.items()))
            if until >= now:
                return
            del self._items[key]
