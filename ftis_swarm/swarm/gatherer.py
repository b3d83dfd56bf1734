"""The background half of `gather`: read who published, read their pointers, fetch and check bodies.

Every `poll_interval` the gatherer reads the membership keys (`keys.member_key`) of the
windows that may have received records since its last read ([last read - skew -
publish_timeout, now + skew]; on the first poll, back to the TTL). A membership record
says a peer published `groups` pointers in a window; when that is more than the gatherer
has seen under the peer's pointer key, it reads that key: at once for peers whose bodies
it accepted before (or that the policy scores), and for `STRANGER_READS` strangers a poll
at most, in turns. A key that still holds fewer pointers than claimed is read again after
`poll_interval * 2^k`, `MAX_REREADS` times at most for one claim. So a flood of pointers
lands under the flooder's own keys, and a flood of identities costs a bounded number of
reads a poll; neither hides another peer's pointers.

Each new pointer is screened (run id, tokenizer, age, size, policy) and handed to the
`FetchScheduler`. A fetched body must match its signed pointer and pass the wire decoder
with this node's limits and vocabulary. Accepted groups wait in an inbox that `drain`
empties. A group id is delivered at most once; rejections are remembered per (publisher,
group id), so a peer that re-announces someone else's group cannot make this node skip
the genuine pointer. Memory of a group ends when no record of it can still be alive.

Runs on the swarm's event loop thread; `drain` is called from the node's thread.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
import time
from collections import Counter
from typing import Optional

from hivemind.p2p import P2P
from hivemind.utils.timed_storage import get_dht_time

from ftis_swarm.config import SwarmConfig
from ftis_swarm.swarm.counters import SwarmCounters, ThrottledLog
from ftis_swarm.swarm.fetching import FetchScheduler
from ftis_swarm.swarm.keys import member_key, pointer_key, windows_between
from ftis_swarm.swarm.policy import PeerPolicy
from ftis_swarm.swarm.reading import FoundRecord, KeyReader
from ftis_swarm.swarm.records import GroupPointer, MemberRecord, check_body, screen_pointer
from ftis_swarm.wire import Group

logger = logging.getLogger(__name__)

_Key = tuple[str, str]  # (publisher, group id)
READ_TIMEOUT = 10.0
STRANGER_READS = 16
MAX_REREADS = 6


@dataclasses.dataclass
class _Member:
    """What one peer claims for one window, and what this node has read of it."""

    claimed: int = 0
    have: int = 0
    rereads: int = 0
    next_read: float = 0.0
    last_read: float = 0.0


class Gatherer:
    """Polls membership and pointers, fetches bodies in the background; `drain` hands the accepted groups out."""

    def __init__(self, *, reader: KeyReader, p2p: P2P, cfg: SwarmConfig, peer_id: str, tokenizer_fp: str,
                 vocab_size: Optional[int], counters: SwarmCounters, policy: PeerPolicy):
        self._reader, self._cfg, self._peer_id, self._policy = reader, cfg, peer_id, policy
        self._tokenizer_fp, self._vocab_size, self._counters = tokenizer_fp, vocab_size, counters
        self._read_from = get_dht_time() - cfg.ttl - cfg.max_clock_skew
        self._lookback = cfg.max_clock_skew + cfg.publish_timeout
        self._lock = threading.Lock()  # guards the inbox, shared with the node's thread
        self._inbox: list[Group] = []
        self._inbox_by_peer: Counter[str] = Counter()
        # loop-thread state
        self._members: dict[tuple[str, int], _Member] = {}
        self._accepted: dict[str, tuple[str, float]] = {}  # group id -> (publisher, forget after)
        self._rejected: dict[_Key, float] = {}  # -> forget after
        self._log = ThrottledLog(logger, "rejected groups", level=logging.INFO)
        self._scheduler = FetchScheduler(p2p=p2p, cfg=cfg, policy=policy, counters=counters, room=self._room,
                                         on_body=self._accept_body, on_reject=self._reject)

    async def run(self) -> None:
        """Polls until cancelled. A failed poll is logged with its traceback and tried again."""
        try:
            while True:
                started = time.monotonic()
                try:
                    await self.poll_once()
                except Exception:
                    logger.exception("a poll of the swarm's keys failed; next try in %.1f s", self._cfg.poll_interval)
                await asyncio.sleep(max(0.0, self._cfg.poll_interval - (time.monotonic() - started)))
        finally:
            self._scheduler.cancel()

    async def poll_once(self) -> None:
        cfg = self._cfg
        now = get_dht_time()
        windows = windows_between(self._read_from, now + cfg.max_clock_skew, cfg.window)
        members = await self._reader.read([member_key(cfg.run_id, w, s) for w in windows
                                           for s in range(cfg.member_shards)], timeout=READ_TIMEOUT)
        for records in members.values():
            for record in records.values():
                self._note_member(record)
        due = self._due(now)
        if due:
            keys = {pointer_key(cfg.run_id, peer, w): (peer, w) for peer, w in due}
            found = await self._reader.read(list(keys), timeout=READ_TIMEOUT)
            for key, records in found.items():
                self._note_read(keys[key], len(records), now)
                for record in records.values():
                    if isinstance(record.content, GroupPointer):
                        self._consider(record.content)
        self._read_from = max(self._read_from, now - self._lookback)
        self._forget(now)
        self._scheduler.schedule()

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

    def _note_member(self, record: FoundRecord) -> None:
        member = record.content
        if not isinstance(member, MemberRecord) or record.owner == self._peer_id or member.run_id != self._cfg.run_id:
            return
        if not self._policy.allows(record.owner):
            return
        state = self._members.setdefault((record.owner, member.window), _Member())
        if member.groups > state.claimed:
            state.claimed, state.rereads, state.next_read = member.groups, 0, 0.0

    def _due(self, now: float) -> list[tuple[str, int]]:
        """The (peer, window) pointer keys to read this poll: every known peer's, a few strangers'."""
        due, strangers = [], []
        for (peer, w), state in self._members.items():
            if state.claimed > state.have and now >= state.next_read:
                known = self._scheduler.is_proven(peer) or self._policy.score(peer) > 0
                (due if known else strangers).append((state.last_read, peer, w))
        strangers.sort()
        return [(peer, w) for _, peer, w in due + strangers[:STRANGER_READS]]

    def _note_read(self, member: tuple[str, int], count: int, now: float) -> None:
        state = self._members.get(member)
        if state is None:
            return
        state.have, state.last_read = max(state.have, count), now
        if state.claimed > state.have:
            state.rereads += 1
            state.next_read = now + self._cfg.poll_interval * 2 ** min(state.rereads, 6)
            if state.rereads >= MAX_REREADS:  # claims more than it stored: believe it again when it claims more
                state.have = state.claimed
                self._counters.fault(member[0], Counter(member_overclaim=1))

    def _consider(self, pointer: GroupPointer) -> None:
        """Hands a pointer read from its publisher's key to the scheduler, unless it is known already."""
        key = (pointer.publisher, pointer.group_id)
        accepted = self._accepted.get(pointer.group_id)
        if (pointer.publisher == self._peer_id or key in self._rejected or self._scheduler.holds(*key)
                or (accepted is not None and accepted[0] == pointer.publisher)):
            return
        if accepted is not None:  # the body names its sender, who is not this publisher
            self._reject(pointer, "sender_mismatch", "re-announces a group accepted from its sender")
            return
        cfg = self._cfg
        reason = screen_pointer(pointer, now=get_dht_time(), run_id=cfg.run_id, tokenizer_fp=self._tokenizer_fp,
                                ttl=cfg.ttl, max_clock_skew=cfg.max_clock_skew, max_bytes=cfg.wire.max_bytes)
        if not reason and not self._policy.allows(pointer.publisher):
            reason = "denied"
        if reason:
            self._reject(pointer, reason, "screened from its pointer")
        else:
            self._scheduler.add(pointer)

    def _room(self, publisher: str) -> int:
        with self._lock:
            return self._cfg.max_groups_per_peer_per_gather - self._inbox_by_peer[publisher]

    def _accept_body(self, pointer: GroupPointer, body: bytes) -> bool:
        try:
            group, reason, detail = check_body(body, pointer, vocab_size=self._vocab_size, limits=self._cfg.wire)
        except Exception as exc:  # the wire decoder's contract is WireError; anything else is a bug, contained
            logger.exception("checking group %s from %s failed unexpectedly", pointer.group_id, pointer.publisher)
            group, reason, detail = None, "fetch_error", repr(exc)
        if group is None:
            self._reject(pointer, reason, detail)
            return False
        self._scheduler.settle(pointer)
        self._accepted[pointer.group_id] = (pointer.publisher, self._forget_after(pointer))
        self._counters.add("fetched_bytes", len(body))
        with self._lock:
            self._inbox.append(group)
            self._inbox_by_peer[pointer.publisher] += 1
        return True

    def _reject(self, pointer: GroupPointer, reason: str, detail: str) -> None:
        self._scheduler.settle(pointer)
        self._rejected[(pointer.publisher, pointer.group_id)] = self._forget_after(pointer)
        self._counters.reject(pointer.publisher, reason)
        self._log.note(pointer.publisher, Counter({reason: 1}))
        logger.debug("rejected group %s from %s: %s (%s)", pointer.group_id, pointer.publisher, reason, detail)

    def _forget_after(self, pointer: GroupPointer) -> float:
        """When no record of this pointer can still be alive (a record lives at most ttl + skew)."""
        return max(pointer.created_at, get_dht_time()) + self._cfg.ttl + self._cfg.max_clock_skew

    def _forget(self, now: float) -> None:
        cfg = self._cfg
        for gid in [g for g, (_, until) in self._accepted.items() if until < now]:
            del self._accepted[gid]
        for key in [k for k, until in self._rejected.items() if until < now]:
            del self._rejected[key]
        oldest = windows_between(now - cfg.ttl - 2 * cfg.max_clock_skew - cfg.window, now, cfg.window)[0]
        for member in [m for m in self._members if m[1] < oldest]:
            del self._members[member]
        for pointer in self._scheduler.pending():  # pending pointers that went stale while they waited
            if now - pointer.created_at > cfg.ttl:
                self._reject(pointer, "stale", "went stale while pending")
        self._scheduler.forget_idle(now)
