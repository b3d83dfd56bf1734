"""Cumulative counts of a swarm client, as one JSON-able dict for the node's metrics sink.

Rejection reasons (each counted in `rejected` and in `rejected_by_peer[peer]`):

- before download: `run_id`, `tokenizer` (another run or tokenizer), `stale` (signed
  creation time older than the TTL; also checked again when `gather` hands groups out),
  `future` (created further ahead than the clock skew), `oversize` (larger than
  `wire.max_bytes`);
- on download: `fetch_failed` (publisher unreachable or without the body after
  `max_fetch_attempts` tries), `size_mismatch`, `hash_mismatch` (body differs from the
  signed pointer);
- on decode: `malformed` (the wire decoder refused it), `sender_mismatch` (the group's
  sender is not the peer whose key signed the pointer), `pointer_mismatch` (run id,
  tokenizer or creation time differ between body and pointer).

`deferred` counts groups held back once because their peer had reached
`max_groups_per_peer_per_gather`; they are fetched for a later gather, not rejected.
"""

from __future__ import annotations

import threading
from collections import Counter, defaultdict


class SwarmCounters:
    """Thread-safe counters; `snapshot()` copies them."""

    _PLAIN = ("published", "publish_failed", "gathered", "deferred", "fetched_bytes", "served_bytes", "fetch_retries")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._plain: Counter[str] = Counter({name: 0 for name in self._PLAIN})
        self._rejected: Counter[str] = Counter()
        self._by_peer: defaultdict[str, Counter[str]] = defaultdict(Counter)

    def add(self, name: str, n: int = 1) -> None:
        if name not in self._PLAIN:
            raise KeyError(f"unknown counter {name!r}")
        with self._lock:
            self._plain[name] += n

    def reject(self, peer: str, reason: str) -> None:
        with self._lock:
            self._rejected[reason] += 1
            self._by_peer[peer][reason] += 1

    def snapshot(self) -> dict:
        with self._lock:
            return {
                **{name: int(self._plain[name]) for name in self._PLAIN},
                "rejected": dict(self._rejected),
                "rejected_by_peer": {peer: dict(c) for peer, c in self._by_peer.items()},
            }
