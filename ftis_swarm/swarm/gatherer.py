"""The background half of `gather`: read peers' pointers, fetch and check bodies, hold the groups.

Every `poll_interval` the gatherer reads the window keys that may have received pointers
since its last read (`window_keys` over [last read - skew - publish_timeout, now + skew];
on the first poll, back to the TTL). Each new pointer joins a pending set and is screened
(run id, tokenizer, age, size). Pending pointers are fetched from their publishers,
freshest first, at most `max_groups_per_peer_per_gather` per peer between two `gather`
calls; the rest stay pending (deferred) for the next gather, as do pointers whose fetch
failed fewer than `max_fetch_attempts` times. A fetched body must match its signed pointer
and pass the wire decoder with this node's limits and vocabulary. Accepted groups wait in
an inbox that `drain` empties.

Deduplication: a group id is delivered at most once. Rejections are remembered per
(publisher, group id), so a peer that re-announces someone else's group under its own key
cannot make this node skip the genuine pointer. Memory of a group is dropped once no
record of it can still be alive (the later of its creation and now, plus ttl + skew).

Runs on the swarm's event loop thread; `drain` is called from the node's thread.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter
from typing import Optional

from hivemind.dht.node import DHTNode
from hivemind.utils.timed_storage import get_dht_time

from ftis_swarm.config import SwarmConfig
from ftis_swarm.swarm.bodies import BodyRefused, BodyUnavailable, fetch_body
from ftis_swarm.swarm.counters import SwarmCounters
from ftis_swarm.swarm.identity import peer_id_from_public_key
from ftis_swarm.swarm.records import GroupPointer, check_body, parse_subkey, screen_pointer, window_keys
from ftis_swarm.wire import Group

logger = logging.getLogger(__name__)

_Key = tuple[str, str]  # (publisher, group id)
_READ_TIMEOUT = 30.0


class Gatherer:
    """Polls pointers and fetches bodies in the background; `drain` hands the accepted groups out."""

    def __init__(self, *, node: DHTNode, cfg: SwarmConfig, peer_id: str, tokenizer_fp: str,
                 vocab_size: Optional[int], counters: SwarmCounters):
        self._node, self._cfg, self._peer_id = node, cfg, peer_id
        self._tokenizer_fp, self._vocab_size, self._counters = tokenizer_fp, vocab_size, counters
        self._read_from = get_dht_time() - cfg.ttl - cfg.max_clock_skew
        self._lookback = cfg.max_clock_skew + cfg.publish_timeout
        self._lock = threading.Lock()  # guards the inbox, shared with the node's thread
        self._inbox: list[Group] = []
        self._inbox_by_peer: Counter[str] = Counter()
        # loop-thread state
        self._pending: dict[_Key, GroupPointer] = {}  # seen, not yet accepted or rejected
        self._accepted: dict[str, tuple[str, float]] = {}  # group id -> (publisher, forget after)
        self._rejected: dict[_Key, float] = {}  # -> forget after
        self._deferred: set[_Key] = set()  # pending keys already counted as deferred
        self._in_flight: set[_Key] = set()
        self._in_flight_by_peer: Counter[str] = Counter()
        self._attempts: Counter[_Key] = Counter()
        self._tasks: set[asyncio.Task] = set()
        self._slots: Optional[asyncio.Semaphore] = None

    async def run(self) -> None:
        """Polls until cancelled. A failed poll is logged with its traceback and tried again."""
        self._slots = asyncio.Semaphore(self._cfg.max_concurrent_fetches)
        try:
            while True:
                started = time.monotonic()
                try:
                    await self.poll_once()
                except Exception:
                    logger.exception("reading the pointer keys failed; next try in %.1f s", self._cfg.poll_interval)
                await asyncio.sleep(max(0.0, self._cfg.poll_interval - (time.monotonic() - started)))
        finally:
            for task in list(self._tasks):
                task.cancel()

    async def poll_once(self) -> None:
        cfg = self._cfg
        now = get_dht_time()
        keys = window_keys(cfg.run_id, self._read_from, now + cfg.max_clock_skew, cfg.window)
        found = await self._read(keys)
        self._read_from = max(self._read_from, now - self._lookback)
        for key in keys:
            entry = found.get(key)
            if entry is None or not isinstance(entry.value, dict):
                continue
            for subkey, item in entry.value.items():
                self._consider(subkey, item.value)
        self._forget(now)
        self._schedule(now)

    def drain(self) -> list[Group]:
        """The groups accepted since the last drain, minus any that went stale while waiting."""
        with self._lock:
            groups, self._inbox = self._inbox, []
            self._inbox_by_peer.clear()
        now = get_dht_time()
        fresh = []
        for group in groups:
            if now - group.created_at > self._cfg.ttl:
                self._counters.reject(group.sender, "stale")
            else:
                fresh.append(group)
        self._counters.add("gathered", len(fresh))
        return fresh

    async def _read(self, keys: list[str]) -> dict:
        """All subkeys of `keys` from every peer that answers, within `_READ_TIMEOUT` seconds.

        The read runs as its own task, so a hivemind search that hangs or cancels its own
        futures ends this read with an error, never the gatherer's loop.
        """
        read = asyncio.ensure_future(self._node.get_many(keys, sufficient_expiration_time=float("inf")))
        try:
            done, _ = await asyncio.wait({read}, timeout=_READ_TIMEOUT)
        finally:
            read.cancel()
        if not done:
            raise TimeoutError(f"reading {len(keys)} window keys took over {_READ_TIMEOUT:.0f} s")
        if read.cancelled():
            raise RuntimeError(f"hivemind cancelled the read of {len(keys)} window keys")
        return read.result()

    def _consider(self, subkey: object, value: object) -> None:
        """Adds the pointer of one DHT entry to the pending set, unless it is known already.

        The validators checked the entry; this re-checks its binding cheaply, and parses the
        value only for a (publisher, group id) it has not seen.
        """
        try:
            owner = parse_subkey(subkey)
            if owner is None:
                raise ValueError("subkey is not [owner:<key>]/<group id>")
            key = (peer_id_from_public_key(owner[0]), owner[1])
            accepted = self._accepted.get(key[1])
            if (key[0] == self._peer_id or key in self._rejected or key in self._pending
                    or (accepted is not None and accepted[0] == key[0])):
                return
            pointer = GroupPointer.parse_strict(value)
            if (pointer.publisher, pointer.group_id) != key:
                raise ValueError("pointer does not match its subkey")
        except ValueError as exc:
            logger.warning("ignored a DHT entry that passed the validators but is not a pointer: %s", exc)
            return
        if accepted is None:
            self._pending[key] = pointer
        else:  # the body names its sender, who is not this publisher
            self._reject(pointer, "sender_mismatch", "re-announces a group accepted from its sender")

    def _schedule(self, now: float) -> None:
        """Screens pending pointers and starts fetches, up to each peer's room in the current gather."""
        cfg = self._cfg
        by_peer: dict[str, list[GroupPointer]] = {}
        for key, pointer in list(self._pending.items()):
            if key in self._in_flight:
                continue
            reason = screen_pointer(pointer, now=now, run_id=cfg.run_id, tokenizer_fp=self._tokenizer_fp,
                                    ttl=cfg.ttl, max_clock_skew=cfg.max_clock_skew, max_bytes=cfg.wire.max_bytes)
            if reason:
                self._reject(pointer, reason, "screened from its pointer")
            else:
                by_peer.setdefault(pointer.publisher, []).append(pointer)
        for publisher, items in by_peer.items():
            items.sort(key=lambda p: (-p.created_at, p.group_id))
            with self._lock:
                held = self._inbox_by_peer[publisher]
            room = max(0, cfg.max_groups_per_peer_per_gather - held - self._in_flight_by_peer[publisher])
            for pointer in items[:room]:
                self._start_fetch(pointer)
            for pointer in items[room:]:
                key = (publisher, pointer.group_id)
                if key not in self._deferred:
                    self._deferred.add(key)
                    self._counters.add("deferred")

    def _start_fetch(self, pointer: GroupPointer) -> None:
        self._in_flight.add((pointer.publisher, pointer.group_id))
        self._in_flight_by_peer[pointer.publisher] += 1
        task = asyncio.get_running_loop().create_task(self._fetch(pointer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _fetch(self, pointer: GroupPointer) -> None:
        key = (pointer.publisher, pointer.group_id)
        try:
            async with self._slots:
                body = await fetch_body(self._node.p2p, pointer.publisher, pointer.group_id,
                                        size=pointer.size, timeout=self._cfg.fetch_timeout)
        except BodyUnavailable as exc:
            self._attempts[key] += 1
            self._counters.add("fetch_retries")
            if self._attempts[key] >= self._cfg.max_fetch_attempts:
                self._reject(pointer, "fetch_failed", str(exc))
            else:
                logger.debug("fetch %d of %s failed: %s", self._attempts[key], pointer.group_id, exc)
            return
        except BodyRefused as exc:
            self._reject(pointer, exc.reason, str(exc))
            return
        finally:
            self._in_flight.discard(key)
            self._in_flight_by_peer[pointer.publisher] -= 1
        group, reason, detail = check_body(body, pointer, vocab_size=self._vocab_size, limits=self._cfg.wire)
        if group is None:
            self._reject(pointer, reason, detail)
            return
        self._settle(key)
        self._accepted[pointer.group_id] = (pointer.publisher, self._forget_after(pointer))
        self._counters.add("fetched_bytes", len(body))
        with self._lock:
            self._inbox.append(group)
            self._inbox_by_peer[pointer.publisher] += 1

    def _reject(self, pointer: GroupPointer, reason: str, detail: str) -> None:
        key = (pointer.publisher, pointer.group_id)
        self._settle(key)
        self._rejected[key] = self._forget_after(pointer)
        self._counters.reject(pointer.publisher, reason)
        logger.info("rejected group %s from %s: %s (%s)", pointer.group_id, pointer.publisher, reason, detail)

    def _settle(self, key: _Key) -> None:
        self._pending.pop(key, None)
        self._attempts.pop(key, None)
        self._deferred.discard(key)

    def _forget_after(self, pointer: GroupPointer) -> float:
        """When no record of this pointer can still be alive (a record lives at most ttl + skew)."""
        return max(pointer.created_at, get_dht_time()) + self._cfg.ttl + self._cfg.max_clock_skew

    def _forget(self, now: float) -> None:
        for gid in [g for g, (_, until) in self._accepted.items() if until < now]:
            del self._accepted[gid]
        for key in [k for k, until in self._rejected.items() if until < now]:
            del self._rejected[key]
