"""Which pending bodies to fetch, from whom, and what a failing source loses: `FetchScheduler`.

Owns the stream slots, each publisher's `PublisherState` (allowance, failures, suspension, turn) over
the `PointerTable`'s chosen and fetching records, the `HolderBook`, and `fetch_times`: (from a holder,
seconds from the stream's request) of the last `MAX_FETCH_TIMES` bodies that came in whole. Entry
points: `add`, `schedule`, `note_holders`, `forget_idle`, `rewire`; `Outcomes` settles each answer. Runs
on the swarm's loop. Imports: fetch's holders, outcomes, pointers, streams; swarm's counters and
records; peers (faults, policy); config; hivemind.

- Slots: a stream (`streams.fetch_bodies`) of up to `max_bodies_per_stream` bodies of one source. At most
  `max_concurrent_fetches` streams, a publisher's allowance (`max_fetches_per_peer`, halved by failures,
  never below 1), `max_fetches_per_origin` per origin (`origin_of`), half of the slots for strangers.
- Order: publishers by score (none while `PointerTable.note_stall` marks them), proven, strangers,
  each by its last turn; a publisher's ready pointers least-tried, newest round, then a hash of this
  node's peer id and the group id (`_spread`), from one source, within `room(publisher)` less its
  groups in flight (the rest `deferred`, once).
- Each answer is settled alone; the pointers a stream ended before are pending again, uncharged.
- A counted failure halves the allowance and suspends the publisher for `poll_interval * 2^(k-1)` (at
  most a quarter TTL); `max_fetch_attempts` in a row reject its pending pointers no holder has
  (`stalled`, else `fetch_failed`). `busy` and a dial backoff's echo only wait. A suspended
  publisher's groups go to a holder, which alone answers for the bytes it sends.
- A publisher's stall or missing body rejects at once its pointers a budget chose that no holder has.

The rules in full, and why: docs/swarm.md, "Gathering", "Holders" and "A stall costs its place".
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections import Counter, deque
from typing import Callable, Optional

from hivemind.p2p import P2P
from hivemind.utils.timed_storage import get_dht_time

from ftis_swarm.config import SwarmConfig
from ftis_swarm.peers import faults
from ftis_swarm.peers.policy import PeerPolicy
from ftis_swarm.swarm.counters import SwarmCounters
from ftis_swarm.swarm.fetch.holders import HolderBook
from ftis_swarm.swarm.fetch.outcomes import Outcomes, PublisherState
from ftis_swarm.swarm.fetch.pointers import Phase, PointerTable, Record, key_of
from ftis_swarm.swarm.fetch.streams import BodyUnavailable, ends_stream, fetch_bodies
from ftis_swarm.swarm.records import GroupPointer

logger = logging.getLogger(__name__)

MAX_FETCH_TIMES = 4096


class FetchScheduler:
    """Pending pointers and the streams that fetch their bodies (runs on the swarm's event loop)."""

    def __init__(self, *, p2p: P2P, cfg: SwarmConfig, policy: PeerPolicy, counters: SwarmCounters,
                 room: Callable[[str], int], on_body: Callable[[GroupPointer, bytes], bool],
                 on_reject: Callable[[GroupPointer, str, str], None],
                 origin_of: Callable[[str], Optional[str]] = lambda publisher: None, seed: str = "",
                 table: Optional[PointerTable] = None,
                 contain: Optional[Callable[[str, Exception], None]] = None):
        """`seed` (this node's peer id) orders a round's groups for this node (`_spread`); `table` holds
        every pointer's record (`pointers`: the pending ones are its CHOSEN records, those in a stream its
        FETCHING ones, with their attempts and leg times); `contain` is told of an error in settling one
        answer (the gatherer's `LoopErrors`; by default it is logged): the stream goes on with the next."""
        self.table = table if table is not None else PointerTable(span=cfg.records.ttl + cfg.records.max_clock_skew)
        self._p2p, self._cfg, self._policy, self._counters = p2p, cfg, policy, counters
        self._seed = seed
        self._origin_of = origin_of
        self._room = room
        self._holders = HolderBook(cfg, counters)
        self._outcomes = Outcomes(cfg=cfg, counters=counters, holders=self._holders, table=self.table,
                                  on_body=on_body, on_reject=on_reject)
        self._on_reject = on_reject
        self._publishers: dict[str, PublisherState] = {}
        self._streams = self._stranger_streams = 0
        self._origin_streams: Counter[str] = Counter()
        self._turns = 0
        self._contain = contain or (lambda where, exc: logger.error("%s failed", where, exc_info=exc))
        self._tasks: set[asyncio.Task] = set()
        self.fetch_times: deque[tuple[bool, float]] = deque(maxlen=MAX_FETCH_TIMES)
        """(from a holder, seconds) of each successful fetch, oldest first (see the module docstring)."""

    def note_holders(self, holder: str, group_ids: list[str], *, until: float) -> None:
        """`holder` announced (signed) that it holds these bodies until `until`."""
        self._holders.note(holder, group_ids, until=until)

    def _spread(self, group_id: str) -> bytes:
        """This node's own order of a round's groups (see the module docstring)."""
        return hashlib.sha256(f"{self._seed}/{group_id}".encode()).digest()

    def _pending(self, publisher: str) -> dict[str, Record]:
        """The publisher's records waiting for a stream (CHOSEN), by group id."""
        return self.table.of(publisher, Phase.CHOSEN)

    def _source(self, pointer: GroupPointer, state: PublisherState, now: float) -> Optional[str]:
        """Whom to fetch `pointer`'s body from now: its publisher unless suspended, else its least loaded
        holder that is not; None when no source is free."""
        if now >= state.resume_at:
            return pointer.publisher
        return self._holders.least_loaded(pointer.group_id, now)

    def _batch(self, publisher: str, state: PublisherState, now: float,
               most: int) -> tuple[list[GroupPointer], str]:
        """Up to `most` of the publisher's ready pointers that one source can send, in the publisher's order,
        and that source (the source of the first)."""
        pending = self._pending(publisher)
        sources = {gid: self._source(r.pointer, state, now) for gid, r in pending.items()}
        ready = [r.pointer for r in sorted((r for r in pending.values() if sources[r.pointer.group_id] is not None),
                                           key=lambda r: (r.attempts, -r.pointer.round,
                                                          self._spread(r.pointer.group_id)))]
        if not ready:
            return [], ""
        source = sources[ready[0].group_id]
        if source != publisher:
            ready = [p for p in ready if self._holders.serves(source, p.group_id, now)]
        return ready[:most], source

    def add(self, pointer: GroupPointer) -> None:
        """A pointer to fetch: its CHOSEN record (made here when the table has none: without a gatherer)."""
        if not self.table.known(key_of(pointer)):
            self.table.see(pointer, Phase.CHOSEN)
        self._publishers.setdefault(pointer.publisher, PublisherState(allowance=self._cfg.fetch.max_fetches_per_peer))

    def is_proven(self, publisher: str) -> bool:
        state = self._publishers.get(publisher)
        return state is not None and state.proven

    def pending(self) -> list[GroupPointer]:
        """Pointers waiting for a stream."""
        return [r.pointer for r in self.table.live(Phase.CHOSEN)]

    def schedule(self) -> None:
        """Starts streams while slots are free (see the module docstring for the order)."""
        cfg, now = self._cfg, get_dht_time()
        half = cfg.fetch.max_concurrent_fetches // 2
        order = sorted((p for p in self.table.publishers(Phase.CHOSEN) if p in self._publishers),
                       key=lambda p: (-self._precedence(p), not self._publishers[p].proven,
                                      self._publishers[p].turn))
        started = True
        while started and self._streams < cfg.fetch.max_concurrent_fetches:
            started = False
            for publisher in order:
                state, pending = self._publishers[publisher], self._pending(publisher)
                if not pending or state.streams >= state.allowance:
                    continue
                if now < state.resume_at and not any(self._holders.has(g) for g in pending):
                    continue
                room = self._room(publisher) - len(self.table.of(publisher, Phase.FETCHING))
                if room <= 0:
                    self._defer(publisher)
                    continue
                stranger = not state.proven and self._policy.score(publisher) <= 0
                if stranger and self._stranger_streams >= half:
                    continue
                origin = self._origin_of(publisher)
                if origin is not None and self._origin_streams[origin] >= cfg.fetch.max_fetches_per_origin:
                    continue
                batch, source = self._batch(publisher, state, now, min(room, cfg.fetch.max_bodies_per_stream))
                if not batch:
                    continue
                self._start(batch, state, stranger, origin, source)
                started = True
                if self._streams >= cfg.fetch.max_concurrent_fetches:
                    return

    def _precedence(self, publisher: str) -> float:
        """What the publisher's score buys it in the slots' order: nothing while it has stalls (module docstring)."""
        return 0.0 if self.table.stalled(publisher) else max(self._policy.score(publisher), 0.0)

    def _answered(self, pointer: GroupPointer, answer: object) -> None:
        """After its publisher's answer was settled: a served body clears the publisher's stall mark; a stall or
        a missing body marks it and rejects its chosen pointers that no holder has (module docstring)."""
        publisher = pointer.publisher
        if isinstance(answer, bytes):
            record = self.table.get(key_of(pointer))
            if record is not None and record.phase is Phase.ACCEPTED:
                self.table.note_served(publisher)
            return
        if not (isinstance(answer, BodyUnavailable) and answer.reason in (faults.BODY_STALLED, faults.BODY_MISSING)):
            return
        stalls = self.table.stalled(publisher)
        if self.table.note_stall(publisher) > stalls:
            logger.debug("%s stalled on a chosen body (%s): it loses its precedence until it serves", publisher,
                         answer.reason)
        reason = faults.STALLED if answer.reason == faults.BODY_STALLED else faults.FETCH_FAILED
        for record in list(self._pending(publisher).values()):
            if record.tier is not None and not self._holders.has(record.pointer.group_id):
                self._on_reject(record.pointer, reason, "its publisher stalled on a chosen body: its budget goes to "
                                                        "the next candidate")

    def forget_idle(self, now: float) -> None:
        """Drops unproven publishers with nothing pending or in flight and no suspension for a TTL."""
        for publisher, state in list(self._publishers.items()):
            if (not (self._pending(publisher) or state.streams or state.proven)
                    and now > state.resume_at + self._cfg.records.ttl):
                del self._publishers[publisher]
        self._holders.forget(now)

    def rewire(self, *, p2p: P2P, origin_of: Callable[[str], Optional[str]]) -> None:
        """Fetches through this daemon from now on (the node switched mode: `peer.switch.reopen_peer`)."""
        self._p2p, self._origin_of = p2p, origin_of

    def cancel(self) -> None:
        for task in list(self._tasks):
            task.cancel()

    def _defer(self, publisher: str) -> None:
        for record in list(self._pending(publisher).values()):
            if self.table.defer(record):
                self._counters.add("deferred")

    def _start(self, batch: list[GroupPointer], state: PublisherState, stranger: bool, origin: Optional[str],
               source: str) -> None:
        for pointer in batch:
            self.table.start(self.table.get(key_of(pointer)))
        self._holders.in_flight[source] += len(batch)
        state.streams += 1
        state.turn = self._turns = self._turns + 1
        self._streams += 1
        self._stranger_streams += stranger
        if origin is not None:
            self._origin_streams[origin] += 1
        self._counters.add("body_streams")
        task = asyncio.get_running_loop().create_task(self._stream(batch, state, stranger, origin, source,
                                                                   time.time()))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _stream(self, batch: list[GroupPointer], state: PublisherState, stranger: bool, origin: Optional[str],
                      source: str, taken: float) -> None:
        """One stream of `batch` from `source` (its slot taken at unix time `taken`): each answer settled as it
        comes, the unanswered back to pending."""
        cfg, started, left = self._cfg, time.monotonic(), list(batch)
        answers = fetch_bodies(self._p2p, source, [(p.group_id, p.size) for p in batch],
                               timeout=cfg.fetch.fetch_timeout,
                               first_byte_timeout=cfg.fetch.first_byte_timeout, min_rate=cfg.fetch.min_body_rate)
        try:
            async with contextlib.aclosing(answers):
                while left:
                    began = time.time()  # the generator reads the next body only once asked
                    try:
                        _, answer = await anext(answers)  # in the order of `batch`
                    except StopAsyncIteration:
                        break
                    except Exception as exc:  # a bug must not leave the pointer to be fetched again at every poll
                        logger.exception("fetching group %s from %s failed unexpectedly", left[0].group_id, source)
                        answer = exc
                    pointer = left.pop(0)
                    self._release([pointer], source)
                    if ends_stream(answer):  # before the answer: a final failure rejects them with the rest
                        self._release(left, source, pending=True)
                    elif isinstance(answer, bytes):
                        self.fetch_times.append((source != pointer.publisher, time.monotonic() - started))
                        self.table.fetched(self.table.get(key_of(pointer)), started=taken, began=began,
                                           received=time.time())
                    try:
                        lied = self._outcomes.settle(pointer, state, source, answer)
                        if source == pointer.publisher:
                            self._answered(pointer, answer)
                    except Exception as exc:  # a bug in settling one answer: the pointer is dropped, not retried
                        self._contain(f"settling group {pointer.group_id} from {source}", exc)
                        self._drop(pointer, repr(exc))
                        lied = False
                    if lied:  # its bytes lied: no more from it
                        self._release(left, source, pending=True)
        except asyncio.CancelledError:  # the daemon is being replaced (`rewire`): fetch them again afterwards
            self._release(left, source, pending=True)
            raise
        finally:
            self._release(left, source, pending=True)  # none unless the stream ended early
            state.streams -= 1
            self._streams -= 1
            self._stranger_streams -= stranger
            if origin is not None:
                self._origin_streams[origin] -= 1
        self.schedule()

    def _drop(self, pointer: GroupPointer, detail: str) -> None:
        """A pointer whose answer could not be settled (a bug, contained): rejected if it is still live."""
        record = self.table.get(key_of(pointer))
        if record is not None and record.phase in (Phase.CHOSEN, Phase.FETCHING):
            try:
                self._on_reject(pointer, faults.FETCH_ERROR, detail)
            except Exception as exc:
                self._contain(f"rejecting group {pointer.group_id}", exc)
                self.table.reject(pointer, faults.FETCH_ERROR, revivable=False)

    def _release(self, pointers: list[GroupPointer], source: str, *, pending: bool = False) -> None:
        """No longer in this stream (`pending`: pending again, uncharged, unless settled meanwhile); empties
        `pointers`."""
        for pointer in pointers:
            record = self.table.get(key_of(pointer))
            if pending and record is not None and record.phase is Phase.FETCHING:
                self.table.back(record)
        self._holders.in_flight[source] -= len(pointers)
        if self._holders.in_flight[source] <= 0:
            del self._holders.in_flight[source]
        pointers.clear()
