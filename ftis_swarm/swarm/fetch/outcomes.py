"""What one pointer's answer does to it and to its source (the rules are `scheduler`'s docstring).

Each pointer of a stream is settled on its own, as its answer comes in: a body from its
publisher (accepted, or refused by `on_body`), a body that cannot match (`BodyRefused`), an
unavailable one (`BodyUnavailable`: busy, a dial backoff's echo, or a counted failure), an
unexpected error, or any answer from a holder (the holder answers for its bytes, the
publisher for its content). `settle` says whether a body contradicted its pointer: the
scheduler then ends the stream (bytes that lie once are not trusted to frame the next answer).
The ids a stream did not answer are not settled here: the scheduler puts them back to
pending, uncharged.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import math
from collections import Counter
from typing import Callable, Union

from hivemind.utils.timed_storage import get_dht_time

from ftis_swarm.config import SwarmConfig
from ftis_swarm.peers import faults
from ftis_swarm.swarm.counters import SwarmCounters
from ftis_swarm.swarm.fetch.holders import HolderBook
from ftis_swarm.swarm.fetch.pointers import Phase, PointerTable, key_of
from ftis_swarm.swarm.fetch.streams import BodyRefused, BodyUnavailable
from ftis_swarm.swarm.peer import reach
from ftis_swarm.swarm.records import GroupPointer

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class PublisherState:
    """How one publisher fares as a source (its pointers are the table's records: `pointers`)."""

    allowance: int
    """Streams it may have open at once (`max_fetches_per_peer`, halved by failures)."""
    streams: int = 0
    """Streams open now for its groups: what the allowance counts."""
    proven: bool = False
    failures: int = 0
    resume_at: float = 0.0
    turn: int = 0
    failed_at: float = -math.inf
    """When its last counted failure was (a dial backoff soon after it is that failure's echo)."""


class Outcomes:
    """Settles each pointer's answer (loop thread only)."""

    def __init__(self, *, cfg: SwarmConfig, counters: SwarmCounters, holders: HolderBook, table: PointerTable,
                 on_body: Callable[[GroupPointer, bytes], bool], on_reject: Callable[[GroupPointer, str, str], None]):
        self._cfg, self._counters, self._holders, self._table = cfg, counters, holders, table
        self._on_body, self._on_reject = on_body, on_reject

    def settle(self, pointer: GroupPointer, state: PublisherState, source: str,
               answer: Union[bytes, BaseException]) -> bool:
        """`source`'s answer for `pointer`: its body, or the exception that stands for it. True when it was a
        body that contradicts the pointer (refused by its check)."""
        cfg = self._cfg
        if source != pointer.publisher:
            return self._from_holder(pointer, state, source, answer)
        if isinstance(answer, bytes) and self._on_body(pointer, answer):
            state.failures, state.proven = 0, True
            state.allowance = min(cfg.fetch.max_fetches_per_peer, state.allowance + 1)
        elif isinstance(answer, bytes):  # a body that does not match its pointer (rejected by `on_body`)
            state.allowance = max(1, state.allowance // 2)
            return True
        elif isinstance(answer, BodyUnavailable):
            self._unavailable(pointer, state, answer)
        elif isinstance(answer, BodyRefused):
            state.allowance = max(1, state.allowance // 2)
            self._on_reject(pointer, answer.reason, str(answer))
        else:
            self._on_reject(pointer, faults.FETCH_ERROR, repr(answer))
        return False

    def _from_holder(self, pointer: GroupPointer, state: PublisherState, holder: str,
                     answer: Union[bytes, BaseException]) -> bool:
        """The holder answers for its bytes, the publisher for its content."""
        contradicts = isinstance(answer, bytes) and hashlib.sha256(answer).hexdigest() != pointer.sha256
        if contradicts:
            answer = BodyRefused(faults.HASH_MISMATCH, f"{holder} sent bytes whose sha256 differs from the pointer")
        if isinstance(answer, bytes):
            self._holders.answered(holder)
            if self._on_body(pointer, answer):
                self._counters.add("fetched_from_holders")
                state.proven = True
                return False
            state.allowance = max(1, state.allowance // 2)
            return True
        if isinstance(answer, BodyUnavailable) and answer.reason == faults.BODY_BUSY:
            self._holders.busy(holder, get_dht_time())
        else:
            self._holders.failed(holder, pointer.group_id, answer, get_dht_time())
        self._back(pointer)
        return contradicts

    def _back(self, pointer: GroupPointer) -> None:
        """Pending again (unless something settled it meanwhile)."""
        record = self._table.get(key_of(pointer))
        if record is not None:
            self._table.back(record)

    def _unavailable(self, pointer: GroupPointer, state: PublisherState, exc: BodyUnavailable) -> None:
        cfg, now = self._cfg, get_dht_time()
        if exc.reason == faults.BODY_BUSY:
            self._back(pointer)
            state.resume_at = max(state.resume_at, now + cfg.fetch.poll_interval)
            return
        self._counters.add("fetch_retries")
        if (exc.reason == faults.BODY_UNREACHABLE and reach.in_dial_backoff(exc)
                and now - state.failed_at < 2 * reach.DIAL_BACKOFF):  # the echo of a failed dial just counted
            self._back(pointer)
            state.resume_at = max(state.resume_at, now + reach.DIAL_BACKOFF)
            return
        self._counters.fault(pointer.publisher, Counter({exc.reason: 1}))
        logger.debug("fetch of %s from its publisher %s failed (%s)", pointer.group_id, pointer.publisher, exc)
        state.failures += 1
        state.failed_at = now
        state.allowance = max(1, state.allowance // 2)
        state.resume_at = now + min(cfg.records.ttl / 4, cfg.fetch.poll_interval * 2 ** (state.failures - 1))
        record = self._table.get(key_of(pointer))
        attempts = self._table.attempt(record) if record is not None else cfg.fetch.max_fetch_attempts
        final = faults.STALLED if exc.reason == faults.BODY_STALLED else faults.FETCH_FAILED
        has_holder = self._holders.has
        pending = self._table.of(pointer.publisher, Phase.CHOSEN)
        if state.failures >= cfg.fetch.max_fetch_attempts:
            if exc.reason == faults.BODY_UNREACHABLE and state.failures == cfg.fetch.max_fetch_attempts:  # once a series
                self._counters.add("publishers_unreachable")
                logger.warning("cannot fetch the groups of %s: no stream to it in %d tries (%s); it is behind NAT "
                               "without a relay slot, or gone. Dropping its %d pending groups", pointer.publisher,
                               state.failures, exc, len(pending) + 1)
            else:
                logger.info("%s failed %d fetches in a row (%s); dropping its %d pending groups", pointer.publisher,
                            state.failures, exc, len(pending) + 1)
            for other in [r.pointer for r in list(pending.values()) if not has_holder(r.pointer.group_id)]:
                self._on_reject(other, final, f"its publisher failed {state.failures} fetches in a row")
            if has_holder(pointer.group_id):
                self._back(pointer)
            else:
                self._on_reject(pointer, final, str(exc))
        elif attempts >= cfg.fetch.max_fetch_attempts and not has_holder(pointer.group_id):
            self._on_reject(pointer, final, str(exc))
        else:
            self._back(pointer)
            logger.debug("fetch of %s failed (%s); trying again later", pointer.group_id, exc)
