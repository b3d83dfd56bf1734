"""The bodies a node serves: its own encoded groups and others' it holds, and the cap on what it uploads.

Holders: a node keeps the bodies it accepted from others (`BodyStore.hold`, at most
`hold_bytes`, each until its pointer can no longer be alive) and serves them through the
body protocol (`streams`): a body is named by its hash in a signed pointer, so whoever sends
it, the fetcher checks it alike. Serving is bounded by `UploadCap`: with
`upload_bytes_per_window` set, this node serves at most about that many bytes per
`upload_window` s, its own bodies first (one is sent while the window's bytes are below the
cap) and held ones at lowest priority (only within half the cap, and at most
`max_holder_serves` at once); past that it answers busy, which costs the requester a poll's
wait and nobody points. Each body of a request is admitted on its own.
"""

from __future__ import annotations

import math
import threading
import time


class BodyStore:
    """This node's own encoded groups, and others' it holds (at most `hold_bytes` of them), each served
    until its record expires (thread-safe)."""

    def __init__(self, *, hold_bytes: int = 0) -> None:
        self._bodies: dict[str, tuple[bytes, float]] = {}
        self._held: dict[str, tuple[bytes, float]] = {}  # in the order they were accepted
        self._hold_bytes, self._held_bytes = hold_bytes, 0
        self._next_expiry = math.inf  # no body expires before it (a lower bound: eviction scans only from then)
        self._lock = threading.Lock()

    def put(self, group_id: str, body: bytes, *, until: float) -> None:
        with self._lock:
            self._evict(time.time())
            self._bodies[group_id] = (body, until)
            self._next_expiry = min(self._next_expiry, until)

    def hold(self, group_id: str, body: bytes, *, until: float) -> bool:
        """Keeps another peer's accepted body to serve; the oldest held ones go when `hold_bytes` is full.
        False when it does not fit at all (or holding is off)."""
        if len(body) > self._hold_bytes:
            return False
        with self._lock:
            self._evict(time.time())
            if group_id in self._bodies or group_id in self._held:
                return group_id in self._held
            while self._held and self._held_bytes + len(body) > self._hold_bytes:
                self._drop_held(next(iter(self._held)))
            self._held[group_id] = (body, until)
            self._held_bytes += len(body)
            self._next_expiry = min(self._next_expiry, until)
            return True

    def get(self, group_id: str) -> bytes | None:
        found = self.lookup(group_id)
        return found[0] if found else None

    def lookup(self, group_id: str) -> tuple[bytes, bool] | None:
        """(body, whether it is held for another peer) or None."""
        with self._lock:
            self._evict(time.time())
            entry = self._bodies.get(group_id)
            if entry is not None:
                return entry[0], False
            entry = self._held.get(group_id)
        return (entry[0], True) if entry else None

    def held(self, limit: int) -> list[str]:
        """The ids of the `limit` most recently held bodies, newest first."""
        with self._lock:
            self._evict(time.time())
            return list(reversed(self._held))[:limit]

    def __len__(self) -> int:
        with self._lock:
            return len(self._bodies)

    def _evict(self, now: float) -> None:
        """Drops the expired bodies; scans them only once one may have expired (each lookup calls it)."""
        if now <= self._next_expiry:
            return
        for gid in [g for g, (_, until) in self._bodies.items() if until < now]:
            del self._bodies[gid]
        for gid in [g for g, (_, until) in self._held.items() if until < now]:
            self._drop_held(gid)
        self._next_expiry = min((until for _, until in [*self._bodies.values(), *self._held.values()]),
                                default=math.inf)

    def _drop_held(self, group_id: str) -> None:
        body, _ = self._held.pop(group_id)
        self._held_bytes -= len(body)


class UploadCap:
    """What this node may still upload in the current window (see the module docstring); loop thread only."""

    HELD_SHARE = 0.5
    """The part of the cap held bodies may fill: own bodies always have the rest."""

    def __init__(self, *, bytes_per_window: int, window: float, max_held_serves: int):
        self._cap, self._window, self._max_held = bytes_per_window, window, max_held_serves
        self._started, self._used, self._held_serving = -math.inf, 0, 0
        self.peak = 0
        """The most bytes admitted in one window so far: at most the cap plus one own body."""

    def admit(self, size: int, *, held: bool, now: float) -> bool:
        """Whether a body of `size` bytes may be sent now; when True, `release(held)` must follow."""
        if now - self._started >= self._window:
            self._started, self._used = now, 0
        if held and (self._held_serving >= self._max_held
                     or (self._cap and self._used + size > self._cap * self.HELD_SHARE)):
            return False
        if self._cap and self._used >= self._cap:
            return False
        self._used += size
        self._held_serving += held
        self.peak = max(self.peak, self._used)
        return True

    def release(self, held: bool) -> None:
        self._held_serving -= held
