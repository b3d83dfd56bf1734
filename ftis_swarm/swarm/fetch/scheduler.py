"""Which pending bodies to fetch, from whom, and what a failing publisher loses.

Slots: at most `max_concurrent_fetches` fetches at once, at most `max_fetches_per_peer`
of them from one publisher (below the slot count), at most `max_fetches_per_origin` from
the publishers of one network origin (`origin_of`, see `swarm.origins`; relayed ones as
one origin, publishers of no known origin by identity only), and at most half of them
from strangers (publishers with no body accepted yet and no positive policy score). A fetch
starts only when a slot is free, so its whole time (dial, header, body) runs inside its
own timeouts (`bodies.fetch_body`). Publishers take turns: scored ones first, then proven
ones, then strangers, each in the order it last had a turn; each publisher's least-tried,
then newest round's pointer first, within a round in an order of this node's own (a hash of
its peer id and the group id: fetchers of one publisher start on different groups, so its
first serves leave holders of many of its groups, not of the same few), and never more than
its room in the current gather (`room(publisher)`, what `max_groups_per_peer_per_gather`
leaves it); pointers held back for that are counted once as `deferred`.

Failures: a fetch that finds the publisher unreachable, without the body, broken off or
stalled halves the publisher's allowance (to 1 at least) and suspends it for
`poll_interval * 2^(k-1)` (k failures in a row, at most a quarter of the TTL); the pointer
is tried again unless it failed `max_fetch_attempts` times; once the publisher has failed
that many times in a row, all its pending pointers are rejected with the failure's reason
(`stalled`, else `fetch_failed`). A body that cannot match its pointer halves the
allowance too. A success gives back one slot and resets the count. `busy` costs a short
wait only, and so does p2pd's "dial backoff" within `2 x reach.DIAL_BACKOFF` of the publisher's
last counted failure (`reach.in_dial_backoff`: the echo of the dial that failed before, which is
counted; the pointer waits `reach.DIAL_BACKOFF` seconds). A backoff later than that counts, so a
publisher nobody can dial is still dropped (and said unreachable) after `max_fetch_attempts`. Each failed attempt
is counted against the publisher (`body_<reason>`, priced 0 in `peers/faults.py`: load,
links and restarts cause them; the back-off above is all it loses).

Holders: a peer that gossiped a signed `HaveRecord` naming a group (`note_holders`) is a second
source of its body. A fetch goes to the publisher while it is not suspended (busy, failed),
else to the holder of the group with the fewest fetches from this node in flight, then the
fewest failures; a publisher's series of failures rejects only the pointers no holder has. A
holder that answers missing, busy, unreachable or stalls is suspended as a publisher would be
(missing: for that group; after `max_fetch_attempts` failures in a row: forgotten) and the
pointer goes back to pending, not counted against its publisher. The holder alone pays for
the bytes it sent: a length or sha256 that differs from the signed pointer is its
`size_mismatch` / `hash_mismatch` (priced as in `peers/faults.py`: the bytes contradict the
pointer its signed announcement says it holds), never its publisher's; a body that matches
the hash is the publisher's own signed content, and `on_body` judges it as such.

`fetch_times` keeps the last `MAX_FETCH_TIMES` successful fetches' seconds (stream opened to
body in), each marked whether a holder sent it: what a holder costs a fetcher in latency.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import hashlib
import logging
import time
from collections import Counter, deque
from typing import Callable, Optional

from hivemind.p2p import P2P
from hivemind.utils.timed_storage import get_dht_time

from ftis_swarm.config import SwarmConfig
from ftis_swarm.swarm.fetch.bodies import BodyRefused, BodyUnavailable, fetch_body
from ftis_swarm.swarm import reach
from ftis_swarm.swarm.counters import SwarmCounters
from ftis_swarm.peers.policy import PeerPolicy
from ftis_swarm.swarm.records import GroupPointer
from ftis_swarm.peers import faults

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class _Publisher:
    allowance: int
    pending: dict[str, GroupPointer] = dataclasses.field(default_factory=dict)
    fetching: set[str] = dataclasses.field(default_factory=set)
    attempts: Counter[str] = dataclasses.field(default_factory=Counter)
    in_flight: int = 0
    proven: bool = False
    failures: int = 0
    resume_at: float = 0.0
    turn: int = 0
    failed_at: float = -math.inf
    """When its last counted failure was (a dial backoff soon after it is that failure's echo)."""


MAX_FETCH_TIMES = 4096
MAX_HOLDERS_PER_GROUP = 8
MAX_HELD_GROUPS = 4096
"""Groups whose holders are remembered; past it the ones whose announcements end first go."""


@dataclasses.dataclass
class _Holder:
    failures: int = 0
    resume_at: float = 0.0


class FetchScheduler:
    """Pending pointers and the fetches of their bodies (runs on the swarm's event loop)."""

    def __init__(self, *, p2p: P2P, cfg: SwarmConfig, policy: PeerPolicy, counters: SwarmCounters,
                 room: Callable[[str], int], on_body: Callable[[GroupPointer, bytes], bool],
                 on_reject: Callable[[GroupPointer, str, str], None],
                 origin_of: Callable[[str], Optional[str]] = lambda publisher: None, seed: str = ""):
        """`seed` (this node's peer id) orders a round's groups for this node (`_spread`)."""
        self._p2p, self._cfg, self._policy, self._counters = p2p, cfg, policy, counters
        self._seed = seed
        self._origin_of = origin_of
        self._origin_in_flight: Counter[str] = Counter()
        self._room, self._on_body, self._on_reject = room, on_body, on_reject
        self._publishers: dict[str, _Publisher] = {}
        self._deferred: set[tuple[str, str]] = set()
        self._in_flight = self._strangers_in_flight = 0
        self._turns = 0
        self._tasks: set[asyncio.Task] = set()
        self._held_by: dict[str, dict[str, float]] = {}  # group id -> {holder: its announcement ends}
        self._holders: dict[str, _Holder] = {}
        self._source_in_flight: Counter[str] = Counter()
        self.fetch_times: deque[tuple[bool, float]] = deque(maxlen=MAX_FETCH_TIMES)
        """(from a holder, seconds) of each successful fetch, oldest first (see the module docstring)."""

    def note_holders(self, holder: str, group_ids: list[str], *, until: float) -> None:
        """`holder` announced (signed) that it holds these bodies until `until`."""
        for group_id in group_ids:
            held = self._held_by.setdefault(group_id, {})
            held[holder] = until
            if len(held) > MAX_HOLDERS_PER_GROUP:
                del held[min(held, key=held.get)]
        self._holders.setdefault(holder, _Holder())
        while len(self._held_by) > MAX_HELD_GROUPS:
            del self._held_by[min(self._held_by, key=lambda g: max(self._held_by[g].values()))]

    def _spread(self, group_id: str) -> bytes:
        """This node's own order of a round's groups (see the module docstring)."""
        return hashlib.sha256(f"{self._seed}/{group_id}".encode()).digest()

    def _has_holder(self, group_id: str) -> bool:
        return bool(self._held_by.get(group_id))

    def _source(self, pointer: GroupPointer, state: _Publisher, now: float) -> Optional[str]:
        """Whom to fetch `pointer`'s body from now: its publisher unless suspended, else its least loaded
        holder that is not; None when no source is free."""
        if now >= state.resume_at:
            return pointer.publisher
        free = [h for h, until in self._held_by.get(pointer.group_id, {}).items()
                if until > now and now >= self._holders[h].resume_at]
        if not free:
            return None
        return min(free, key=lambda h: (self._source_in_flight[h], self._holders[h].failures, h))

    def add(self, pointer: GroupPointer) -> None:
        state = self._publishers.setdefault(pointer.publisher, _Publisher(allowance=self._cfg.max_fetches_per_peer))
        state.pending[pointer.group_id] = pointer

    def holds(self, publisher: str, group_id: str) -> bool:
        """Whether the pointer is pending or being fetched."""
        state = self._publishers.get(publisher)
        return state is not None and (group_id in state.pending or group_id in state.fetching)

    def is_proven(self, publisher: str) -> bool:
        state = self._publishers.get(publisher)
        return state is not None and state.proven

    def pending(self) -> list[GroupPointer]:
        return [p for state in self._publishers.values() for p in state.pending.values()]

    def settle(self, pointer: GroupPointer) -> None:
        """Forgets a pointer that was accepted or rejected elsewhere."""
        state = self._publishers.get(pointer.publisher)
        if state is not None:
            state.pending.pop(pointer.group_id, None)
            state.attempts.pop(pointer.group_id, None)
        self._deferred.discard((pointer.publisher, pointer.group_id))

    def schedule(self) -> None:
        """Starts fetches while slots are free (see the module docstring for the order)."""
        now = get_dht_time()
        half = self._cfg.max_concurrent_fetches // 2
        order = sorted((p for p, s in self._publishers.items() if s.pending),
                       key=lambda p: (-max(self._policy.score(p), 0.0), not self._publishers[p].proven,
                                      self._publishers[p].turn))
        started = True
        while started and self._in_flight < self._cfg.max_concurrent_fetches:
            started = False
            for publisher in order:
                state = self._publishers[publisher]
                if not state.pending or state.in_flight >= state.allowance:
                    continue
                if now < state.resume_at and not any(self._has_holder(g) for g in state.pending):
                    continue
                if self._room(publisher) - state.in_flight <= 0:
                    self._defer(publisher, state)
                    continue
                stranger = not state.proven and self._policy.score(publisher) <= 0
                if stranger and self._strangers_in_flight >= half:
                    continue
                origin = self._origin_of(publisher)
                if origin is not None and self._origin_in_flight[origin] >= self._cfg.max_fetches_per_origin:
                    continue
                sources = {p.group_id: self._source(p, state, now) for p in state.pending.values()}
                ready = [p for p in state.pending.values() if sources[p.group_id] is not None]
                if not ready:
                    continue
                pointer = min(ready, key=lambda p: (state.attempts[p.group_id], -p.round, self._spread(p.group_id)))
                self._start(pointer, state, stranger, origin, sources[pointer.group_id])
                started = True
                if self._in_flight >= self._cfg.max_concurrent_fetches:
                    return

    def forget_idle(self, now: float) -> None:
        """Drops unproven publishers with nothing pending or in flight and no suspension for a TTL."""
        for publisher, state in list(self._publishers.items()):
            if not (state.pending or state.in_flight or state.proven) and now > state.resume_at + self._cfg.ttl:
                del self._publishers[publisher]
        for group_id, held in list(self._held_by.items()):
            for holder in [h for h, until in held.items() if until < now]:
                del held[holder]
            if not held:
                del self._held_by[group_id]
        live = {h for held in self._held_by.values() for h in held}
        for holder in [h for h in self._holders if h not in live and not self._source_in_flight[h]]:
            del self._holders[holder]

    def rewire(self, *, p2p: P2P, origin_of: Callable[[str], Optional[str]]) -> None:
        """Fetches through this daemon from now on (the node switched mode: `runtime.reopen_peer`)."""
        self._p2p, self._origin_of = p2p, origin_of

    def cancel(self) -> None:
        for task in list(self._tasks):
            task.cancel()

    def _defer(self, publisher: str, state: _Publisher) -> None:
        for group_id in state.pending:
            if (publisher, group_id) not in self._deferred:
                self._deferred.add((publisher, group_id))
                self._counters.add("deferred")

    def _start(self, pointer: GroupPointer, state: _Publisher, stranger: bool, origin: Optional[str],
               source: str) -> None:
        del state.pending[pointer.group_id]
        self._source_in_flight[source] += 1
        state.fetching.add(pointer.group_id)
        state.in_flight += 1
        state.turn = self._turns = self._turns + 1
        self._in_flight += 1
        self._strangers_in_flight += stranger
        if origin is not None:
            self._origin_in_flight[origin] += 1
        task = asyncio.get_running_loop().create_task(self._fetch(pointer, state, stranger, origin, source))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _fetch(self, pointer: GroupPointer, state: _Publisher, stranger: bool, origin: Optional[str],
                     source: str) -> None:
        cfg = self._cfg
        body, error, started = b"", None, time.monotonic()
        try:
            body = await fetch_body(self._p2p, source, pointer.group_id, size=pointer.size,
                                    timeout=cfg.fetch_timeout, first_byte_timeout=cfg.first_byte_timeout,
                                    min_rate=cfg.min_body_rate)
            self.fetch_times.append((source != pointer.publisher, time.monotonic() - started))
        except asyncio.CancelledError:  # the daemon is being replaced (`rewire`): fetch it again afterwards
            state.pending[pointer.group_id] = pointer
            raise
        except (BodyUnavailable, BodyRefused) as exc:
            error = exc
        except Exception as exc:  # a bug must not leave the pointer to be fetched again at every poll
            logger.exception("fetching group %s from %s failed unexpectedly", pointer.group_id, pointer.publisher)
            error = exc
        finally:
            state.fetching.discard(pointer.group_id)
            state.in_flight -= 1
            self._in_flight -= 1
            self._strangers_in_flight -= stranger
            self._source_in_flight[source] -= 1
            if not self._source_in_flight[source]:
                del self._source_in_flight[source]
            if origin is not None:
                self._origin_in_flight[origin] -= 1
        if source != pointer.publisher:
            self._from_holder(pointer, state, source, body, error)
        elif error is None and self._on_body(pointer, body):
            state.failures, state.proven = 0, True
            state.allowance = min(cfg.max_fetches_per_peer, state.allowance + 1)
        elif error is None:  # a body that does not match its pointer (rejected by `on_body`)
            state.allowance = max(1, state.allowance // 2)
        elif isinstance(error, BodyUnavailable):
            self._unavailable(pointer, state, error)
        elif isinstance(error, BodyRefused):
            state.allowance = max(1, state.allowance // 2)
            self._on_reject(pointer, error.reason, str(error))
        else:
            self._on_reject(pointer, faults.FETCH_ERROR, repr(error))
        self.schedule()

    def _from_holder(self, pointer: GroupPointer, state: _Publisher, holder: str, body: bytes,
                     error: Optional[BaseException]) -> None:
        """The end of a fetch from a holder: the holder answers for its bytes, the publisher for its content."""
        if error is None and hashlib.sha256(body).hexdigest() != pointer.sha256:
            error = BodyRefused(faults.HASH_MISMATCH, f"{holder} sent bytes whose sha256 differs from the pointer")
        if error is None:
            self._holders[holder].failures = 0
            if self._on_body(pointer, body):
                self._counters.add("fetched_from_holders")
                state.proven = True
            else:
                state.allowance = max(1, state.allowance // 2)
        elif isinstance(error, BodyUnavailable) and error.reason == faults.BODY_BUSY:
            self._holders[holder].resume_at = get_dht_time() + self._cfg.poll_interval
            state.pending[pointer.group_id] = pointer
        else:
            self._holder_failed(pointer, holder, error)
            state.pending[pointer.group_id] = pointer
        self.schedule()

    def _holder_failed(self, pointer: GroupPointer, holder: str, error: BaseException) -> None:
        """Charges the holder (its body_* reason, or what its bytes contradict) and suspends or forgets it."""
        reason = getattr(error, "reason", faults.FETCH_ERROR)
        if not isinstance(error, (BodyUnavailable, BodyRefused)):
            logger.error("fetching group %s from holder %s failed unexpectedly: %r", pointer.group_id, holder, error)
        self._counters.add("holder_fetch_failures")
        self._counters.fault(holder, Counter({reason: 1}))
        state = self._holders[holder]
        state.failures += 1
        state.resume_at = get_dht_time() + min(self._cfg.ttl / 4, self._cfg.poll_interval * 2 ** (state.failures - 1))
        if reason == faults.BODY_MISSING or isinstance(error, BodyRefused):
            self._held_by.get(pointer.group_id, {}).pop(holder, None)
        if isinstance(error, BodyRefused) or state.failures >= self._cfg.max_fetch_attempts:
            for held in self._held_by.values():
                held.pop(holder, None)
        logger.debug("fetch of %s from holder %s failed (%s); another source next", pointer.group_id, holder, error)

    def _unavailable(self, pointer: GroupPointer, state: _Publisher, exc: BodyUnavailable) -> None:
        cfg, now = self._cfg, get_dht_time()
        if exc.reason == faults.BODY_BUSY:
            state.pending[pointer.group_id] = pointer
            state.resume_at = max(state.resume_at, now + cfg.poll_interval)
            return
        self._counters.add("fetch_retries")
        if (exc.reason == faults.BODY_UNREACHABLE and reach.in_dial_backoff(exc)
                and now - state.failed_at < 2 * reach.DIAL_BACKOFF):  # the echo of a failed dial just counted
            state.pending[pointer.group_id] = pointer
            state.resume_at = max(state.resume_at, now + reach.DIAL_BACKOFF)
            return
        self._counters.fault(pointer.publisher, Counter({exc.reason: 1}))
        logger.debug("fetch of %s from its publisher %s failed (%s)", pointer.group_id, pointer.publisher, exc)
        state.failures += 1
        state.failed_at = now
        state.allowance = max(1, state.allowance // 2)
        state.resume_at = now + min(cfg.ttl / 4, cfg.poll_interval * 2 ** (state.failures - 1))
        state.attempts[pointer.group_id] += 1
        final = faults.STALLED if exc.reason == faults.BODY_STALLED else faults.FETCH_FAILED
        if state.failures >= cfg.max_fetch_attempts:
            if exc.reason == faults.BODY_UNREACHABLE and state.failures == cfg.max_fetch_attempts:  # once per series
                self._counters.add("publishers_unreachable")
                logger.warning("cannot fetch the groups of %s: no stream to it in %d tries (%s); it is behind NAT "
                               "without a relay slot, or gone. Dropping its %d pending groups", pointer.publisher,
                               state.failures, exc, len(state.pending) + 1)
            else:
                logger.info("%s failed %d fetches in a row (%s); dropping its %d pending groups", pointer.publisher,
                            state.failures, exc, len(state.pending) + 1)
            for other in [p for p in state.pending.values() if not self._has_holder(p.group_id)]:
                self._on_reject(other, final, f"its publisher failed {state.failures} fetches in a row")
            if self._has_holder(pointer.group_id):
                state.pending[pointer.group_id] = pointer
            else:
                self._on_reject(pointer, final, str(exc))
        elif state.attempts[pointer.group_id] >= cfg.max_fetch_attempts and not self._has_holder(pointer.group_id):
            self._on_reject(pointer, final, str(exc))
        else:
            state.pending[pointer.group_id] = pointer
            logger.debug("fetch of %s failed (%s); trying again later", pointer.group_id, exc)
