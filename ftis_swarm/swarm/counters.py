"""Cumulative counts of a swarm peer, as one JSON-able dict for the node's metrics sink.

Rejections: a pointer or group refused, each counted once in `rejected` and in
`rejected_by_peer[publisher]`:

- before download: `run_id`, `tokenizer` (another run or tokenizer), `stale` (signed
  creation time older than the TTL; also checked again when `gather` hands groups out),
  `future` (created further ahead than the clock skew), `oversize` (larger than
  `wire.max_bytes`), `denied` (the peer policy refuses the publisher);
- on download: `fetch_failed` (publisher unreachable, without the body, or its stream
  broke, `max_fetch_attempts` times in a row), `stalled` (no header within
  `first_byte_timeout`, or the body slower than `min_body_rate`, as many times),
  `size_mismatch`, `hash_mismatch` (body differs from the signed pointer), `fetch_error`
  (an unexpected error, logged with its traceback; never retried);
- on decode: `malformed` (the wire decoder refused it), `sender_mismatch` (the group's
  sender is not the peer whose key signed the pointer), `pointer_mismatch` (run id,
  tokenizer or creation time differ between body and pointer).

Faults: every other error a peer caused, in `faults` {reason: n}: records it asked this
peer to store and that were refused (`storage.REFUSALS`), bad DHT replies (`reading`),
failed body fetches before the pointer is rejected, and misbehaving body requests
(`bodies`). `drain_peer_faults()` hands rejections and faults out per peer, since the
last call, for the node's ledger.

`deferred` counts groups held back once because their peer had reached
`max_groups_per_peer_per_gather`; they are fetched for a later gather, not rejected.

Traffic: `gossip_sent`, `gossip_failed`, `gossip_received`, `gossip_bytes` (messages and
bytes received on the run's topic), `gossip_disconnects` (senders disconnected for
flooding; their refusals are faults `gossip_<reason>`, see `gossip`); `dht_requests` and
`dht_bytes`: the find and store calls this peer made for the swarm's records and the
bytes of their records and replies (hivemind's own nearest-peer lookups not included);
`pointers_gossiped` and `pointers_read`: peers' pointers first seen on the topic, or first
read from the DHT (the fallback).
`published` counts groups, `published_rounds` the round pointers that carried them;
`dht_stores_late` and `dht_stores_refused`: replicas that took, or did not take, a record
after its publish returned (`dht.publishing`). `fetched_bodies` and `fetched_bytes`: the
bodies this node downloaded and accepted; `body_streams` the streams it opened to fetch bodies
(each up to `max_bodies_per_stream` of them, `fetch.scheduler`). With a budget (`SwarmClient.set_budget`),
`chosen` counts the groups selected for fetching and `not_chosen` those left out (never
fetched, never charged to anyone; `fetch.selection`); `gather_loop_late`: a gather that
waited over its deadline + 10 s for the swarm's event loop to open or close its budget;
`loop_errors`: errors in handling one peer's input or a gather's bookkeeping on the swarm's
loop, contained (`LoopErrors`: each kind logged once with its traceback; the node goes on).
Holders (`fetch.bodies`): `held_bodies` counts others' bodies this node kept to serve,
`served_bytes` all body bytes it sent and `held_served_bytes` those of held bodies;
`haves_sent`, `haves_received`: announcements of held bodies (`records.HaveRecord`) gossiped
and admitted; `fetched_from_holders`: accepted bodies that came from a holder, not their
publisher; `holder_fetch_failures`: fetches from holders that failed (then another source);
`pointers_revived`: pointers rejected for want of a source (`fetch_failed`, `stalled`) that a
later have brought back (`fetch.gatherer`; their rejection stays counted); `haves_over_cap`:
announced groups a holder named past `holders.MAX_GROUPS_PER_HOLDER` (its earliest-ending
announcements go; charged to no one); `puzzle_busy`: records of a new identity the puzzle
verifier had no rate left for (no one's fault; a gossiped one waits and is checked again).
`publishers_unreachable`: times a publisher's pending groups were dropped because no stream to
it could be opened (behind NAT without a relay slot, or gone), each said in a WARNING.
`reach_switches`: times an `auto` node restarted its daemon in the other mode after its rechecks
contradicted its mode (`peer.switch.reopen_peer`); `reach_switch_failed`: such restarts whose new
daemon did not start (the node went on in its old mode).
Gathers of a round end `gathers_complete` (every live peer's round in) or
`gathers_at_deadline`.
Per-peer maps hold at most `MAX_PEERS` peers; the rest are counted under `OTHERS`.
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
