"""Cumulative counts of a swarm peer, as one JSON-able dict for the node's metrics sink.

Owns `SwarmCounters`, every count the swarm's wings keep (`client.counters()` adds its gauges and
`reach`), and two helpers of the swarm's loop: `ThrottledLog` (one log line per peer per interval,
with the counts since the last) and `LoopErrors` (an error in handling one peer's input: counted
as `loop_errors`, each kind logged once with its traceback, never raised further). Imports: the
standard library only (a base module of the swarm: every wing may import it, it imports none).

- `add(name)`: the plain counters, the names of `SwarmCounters._PLAIN` alone (another is a KeyError).
- `reject(peer, reason)`: a pointer or group refused, counted once in `rejected` and once in
  `rejected_by_peer[peer]` (its publisher); `fault(peer, reasons)`: every other error a peer
  caused, in `faults` {reason: n}. The reasons are the callers' (`peers/faults.py` prices them).
- `drain_peer_faults()` hands both out per peer, as counted since its last call, for the node's
  ledger; `snapshot()` copies everything.
- Thread-safe (one lock); cumulative since the client started; the per-peer maps hold at most
  `MAX_PEERS` peers, the rest under `OTHERS`.

What each counter and reason counts: docs/swarm.md, "Counters".
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, defaultdict

MAX_PEERS = 4096
OTHERS = "<others>"


class SwarmCounters:
    """Thread-safe counters; `snapshot()` copies them."""

    _PLAIN = ("published", "publish_failed", "gathered", "deferred", "fetched_bytes", "served_bytes", "fetch_retries",
              "gossip_sent", "gossip_failed", "gossip_received", "gossip_bytes", "gossip_disconnects",
              "dht_requests", "dht_bytes", "pointers_gossiped", "pointers_read", "gathers_complete",
              "gathers_at_deadline", "published_rounds", "dht_stores_late", "dht_stores_refused", "fetched_bodies",
              "chosen", "not_chosen", "gather_loop_late", "publishers_unreachable", "held_bodies",
              "held_served_bytes", "haves_sent", "haves_received", "fetched_from_holders", "holder_fetch_failures",
              "pointers_revived", "reach_switches", "reach_switch_failed", "body_streams",
              "loop_errors", "haves_over_cap", "puzzle_busy")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._plain: Counter[str] = Counter({name: 0 for name in self._PLAIN})
        self._rejected: Counter[str] = Counter()
        self._by_peer: defaultdict[str, Counter[str]] = defaultdict(Counter)
        self._faults: Counter[str] = Counter()
        self._undrained: defaultdict[str, Counter[str]] = defaultdict(Counter)

    def add(self, name: str, n: int = 1) -> None:
        if name not in self._PLAIN:
            raise KeyError(f"unknown counter {name!r}")
        with self._lock:
            self._plain[name] += n

    def reject(self, peer: str, reason: str) -> None:
        """A pointer or group from `peer` refused for `reason`."""
        with self._lock:
            self._rejected[reason] += 1
            self._by_peer[_slot(self._by_peer, peer)][reason] += 1
            self._undrained[_slot(self._undrained, peer)][reason] += 1

    def fault(self, peer: str, reasons: Counter[str]) -> None:
        """Any other errors `peer` caused, by reason."""
        with self._lock:
            self._faults.update(reasons)
            self._undrained[_slot(self._undrained, peer)].update(reasons)

    def drain_peer_faults(self) -> dict[str, Counter[str]]:
        """Rejections and faults per peer since the last call."""
        with self._lock:
            drained, self._undrained = dict(self._undrained), defaultdict(Counter)
        return drained

    def snapshot(self) -> dict:
        with self._lock:
            return {
                **{name: int(self._plain[name]) for name in self._PLAIN},
                "rejected": dict(self._rejected),
                "rejected_by_peer": {peer: dict(c) for peer, c in self._by_peer.items()},
                "faults": dict(self._faults),
            }


def _slot(table: dict, peer: str) -> str:
    return peer if peer in table or len(table) < MAX_PEERS else OTHERS


class ThrottledLog:
    """At most one log line per peer per `interval` seconds, with the counts since the last line.

    A flood of refused records or requests then costs one line, not one per item.
    """

    def __init__(self, log: logging.Logger, what: str, *, interval: float = 10.0, level: int = logging.WARNING):
        self._log, self._what, self._interval, self._level = log, what, interval, level
        self._lock = threading.Lock()
        self._held: dict[str, tuple[float, Counter[str]]] = {}

    def note(self, peer: str, reasons: Counter[str]) -> None:
        now = time.monotonic()
        with self._lock:
            last, held = self._held.get(peer, (float("-inf"), Counter()))
            held = held + reasons
            if now - last < self._interval:
                if peer in self._held or len(self._held) < MAX_PEERS:
                    self._held[peer] = (last, held)
                return
            self._held[peer] = (now, Counter())
            if len(self._held) > MAX_PEERS:  # forget the quiet ones
                for stale in [p for p, (t, c) in self._held.items() if now - t >= self._interval and not c]:
                    del self._held[stale]
        summary = ", ".join(f"{reason} x{n}" for reason, n in held.most_common())
        self._log.log(self._level, "%s from %s: %s", self._what, peer, summary)


class LoopErrors:
    """Errors in handling one peer's input on the swarm's loop (a pointer, a have, a body, a gather's
    bookkeeping): each counted (`loop_errors`), each kind (where, exception type) logged once with its
    traceback and then at debug level, and never raised further: no peer's input ends a gather or the node.
    """

    def __init__(self, log: logging.Logger, counters: "SwarmCounters", *, max_kinds: int = 256):
        self._log, self._counters, self._max_kinds = log, counters, max_kinds
        self._seen: set[tuple[str, str]] = set()

    def __call__(self, where: str, exc: BaseException) -> None:
        self._counters.add("loop_errors")
        kind = (where, type(exc).__name__)
        if kind in self._seen or len(self._seen) >= self._max_kinds:
            self._log.debug("%s failed again: %r", where, exc)
            return
        self._seen.add(kind)
        self._log.error("%s failed (%s); contained, the node goes on (further ones at debug level)", where,
                        type(exc).__name__, exc_info=exc)
