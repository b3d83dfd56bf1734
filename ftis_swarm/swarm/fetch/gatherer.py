"""The background half of `gather`: learn of pointers (pushed, or read from the DHT), fetch and check bodies.

Owns the way a pointer comes in and how its record moves (docs/swarm.md, "Gathering", says why):

- **In**: a pointer admitted on the gossip topic is considered at once (`on_gossip`); every
  `dht_poll_interval` the membership keys of the recent windows are read, and a peer whose
  membership record claims more pointers than this node has seen has its pointer key read (at
  once for proven or scored peers, `STRANGER_READS` strangers a poll in turns, re-read with
  back-off `MAX_REREADS` times for one claim, then `member_overclaim`). A holder's have adds a
  second source (`note_holders`) and revives a pointer rejected for want of a source
  (`REVIVABLE`, `pointers_revived`).
- **Considered once**: a pointer with a record in the `PointerTable` (or its own) is ignored;
  a new one is screened (run id, tokenizer, age, size, policy) and offered to the budget's
  `Selection` (or, without a budget, handed to the `FetchScheduler`); a group id accepted from
  another publisher is that pointer's `sender_mismatch`. A screened pointer's hint, fetched or
  not, is kept for `drain_announced` (the node's check of cherry-picked groups, `peers/cherry.py`).
- **Out**: a fetched body must match its signed pointer and pass the wire decoder with this
  node's limits and vocabulary; accepted groups wait in an inbox that `drain` empties (those
  gone stale meanwhile dropped), each with its `legs.Legs`. Every pointer is noted in the
  `RoundTracker`, every settled one settled there, and each change sets `changed`.

Invariants: a group id is delivered at most once; an error in handling one peer's input is
contained (`counters.LoopErrors`), never raised out of the loop. Runs on the swarm's event loop
thread; `drain`, `drain_announced`, `waiting`, `owed` and `sourceless` are called from the node's thread. Imports:
the fetch, gossip and dht wings, swarm's base modules, peers.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
import time
from collections import Counter, deque
from typing import TYPE_CHECKING, Callable, Optional

from hivemind.p2p import P2P
from hivemind.utils.timed_storage import get_dht_time

from ftis_swarm.config import SwarmConfig
from ftis_swarm.peers import faults
from ftis_swarm.peers.intake import Budget
from ftis_swarm.peers.policy import PeerPolicy
from ftis_swarm.swarm.counters import LoopErrors, SwarmCounters, ThrottledLog
from ftis_swarm.swarm.dht.reading import FoundRecord, KeyReader
from ftis_swarm.swarm.fetch.legs import Legs
from ftis_swarm.swarm.fetch.pointers import Phase, PointerTable, key_of
from ftis_swarm.swarm.fetch.rounds import RoundTracker
from ftis_swarm.swarm.fetch.scheduler import FetchScheduler
from ftis_swarm.swarm.fetch.selection import Selection
from ftis_swarm.swarm.keys import member_key, pointer_key, window_of, windows_between
from ftis_swarm.swarm.origins import OriginBook
from ftis_swarm.swarm.records import GroupPointer, HaveRecord, MemberRecord, RoundPointer, check_body, screen_pointer
from ftis_swarm.wire import Group

if TYPE_CHECKING:
    from ftis_swarm.swarm.gossip.channel import GossipChannel

logger = logging.getLogger(__name__)

READ_TIMEOUT = 10.0
STRANGER_READS = 16
MAX_REREADS = 6
MAX_ANNOUNCED = 65536
"""Hinted groups `drain_announced` holds between two calls (a round's; the oldest go first past it)."""
REVIVABLE = (faults.FETCH_FAILED, faults.STALLED)
"""Rejections that say no source answered, not that the pointer or its body is wrong: a later have undoes them."""


@dataclasses.dataclass
class _Member:
    """What one peer claims for one window, and what this node has read of it."""

    claimed: int = 0
    have: int = 0
    rereads: int = 0
    next_read: float = 0.0
    last_read: float = 0.0
    paced_until: float = 0.0
    """Not read again before this, whatever it claims: the records its last read returned, at
    `fetch.member_read_rate` (a key filled with a thousand pointers is read about once a minute)."""


class Gatherer:
    """Polls membership and pointers, fetches bodies in the background; `drain` hands the accepted groups out."""

    def __init__(self, *, reader: KeyReader, p2p: P2P, cfg: SwarmConfig, peer_id: str, tokenizer_fp: str,
                 vocab_size: Optional[int], counters: SwarmCounters, policy: PeerPolicy,
                 origins: Optional[OriginBook] = None,
                 on_accepted: Callable[[GroupPointer, bytes], None] = lambda pointer, body: None):
        self._reader, self._cfg, self._peer_id, self._policy = reader, cfg, peer_id, policy
        self._tokenizer_fp, self._vocab_size, self._counters = tokenizer_fp, vocab_size, counters
        self._read_from = get_dht_time() - cfg.records.ttl - cfg.records.max_clock_skew
        self._lookback = cfg.records.max_clock_skew + cfg.records.publish_timeout
        self._lock = threading.Lock()  # guards the inbox, shared with the node's thread
        self._inbox: list[tuple[Group, Legs]] = []
        self._inbox_by_peer: Counter[str] = Counter()
        self._announced: deque[tuple[str, int, int]] = deque(maxlen=MAX_ANNOUNCED)  # `drain_announced`'s
        # loop-thread state
        self._members: dict[tuple[str, int], _Member] = {}
        self.table = PointerTable(span=cfg.records.ttl + cfg.records.max_clock_skew)
        """Every pointer's record at this node (`pointers`): the only writer of their phases."""
        self._log = ThrottledLog(logger, "rejected groups", level=logging.INFO)
        self._contain = LoopErrors(logger, counters)
        self._gossip: Optional["GossipChannel"] = None
        self._gossiped: dict[tuple[str, int], set[int]] = {}  # (peer, window) -> rounds pushed to this node
        self._next_member_read = 0.0
        self._members_from = 0  # the oldest window whose membership is remembered (set at each tick)
        self.rounds = RoundTracker(max_clock_skew=cfg.records.max_clock_skew)
        self.changed = threading.Event()
        """Set whenever a pointer is noted or a group settled (a gather of a round waits on it)."""
        self._origins, self._on_accepted = origins, on_accepted
        self._scheduler = FetchScheduler(p2p=p2p, cfg=cfg, policy=policy, counters=counters, room=self._room,
                                         on_body=self._accept_body, on_reject=self._reject,
                                         origin_of=_origin_lookup(origins),
                                         seed=peer_id, table=self.table, contain=self._contain)
        self._selection: Optional[Selection] = None
        self._horizon = 2 * cfg.fetch.poll_interval

    # -- the budget (`selection`) -----------------------------------------------------------------
    async def use_budget(self, budget: Optional[Budget]) -> None:
        """From now on fetch only what `budget` takes (`selection`); None: every group (the default)."""
        self._selection = None if budget is None else self._new_selection(budget)

    def _new_selection(self, budget: Budget) -> Selection:
        policy = self._policy
        # the ledger's (peers/ledger.py); a policy without them: none recent, none settled, one tier
        recent, settled, tier = (getattr(policy, name, None) for name in ("recent", "settled", "tenure_class"))
        return Selection(budget, seed=self._peer_id, table=self.table,
                         score=lambda peer: policy.score(peer) if policy.allows(peer) else 0.0,
                         origin_of=self._origins.origin_of if self._origins is not None else None,
                         recent=None if recent is None else lambda peer: bool(recent(peer)),
                         settled=None if settled is None else lambda peer: policy.allows(peer) and bool(settled(peer)),
                         tier=tier)

    def _selection_failed(self, where: str, exc: Exception) -> None:
        """The selection's own bookkeeping raised (a bug): contained, and the selection starts afresh with the
        same budget over the same table (the offers stay; the bodies in flight are still fetched and
        delivered, and no longer hold budget)."""
        self._contain(where, exc)
        if self._selection is not None:
            self._selection = self._new_selection(self._selection.budget)

    async def open_gather(self, horizon: float, round: Optional[int] = None) -> None:
        """A gather (for the node's round `round`: the strangers' draw) began: strangers may be chosen;
        peers seen within `horizon` s count as live."""
        self._horizon = horizon
        if self._selection is not None:
            try:
                self._selection.open(round)
            except Exception as exc:
                self._selection_failed("opening a gather", exc)
            self._select()
            self._scheduler.schedule()

    async def close_gather(self) -> tuple[int, int]:
        """The gather ended: drops the offers left since the gather before (the later ones stay on offer
        for the next: `Selection.next_gather`); (tokens, groups) it chose, refusals not counted."""
        if self._selection is None:
            return 0, 0
        try:
            used = self._selection.used()
            dropped = self._selection.next_gather()
        except Exception as exc:
            self._selection_failed("closing a gather", exc)
            return 0, 0
        for pointer in dropped:
            self._pass(pointer)
        return used

    def waiting(self, horizon: float) -> bool:
        """Whether a gather of a round should wait on: an owed peer's round (earned peers only, with a
        budget), or a chosen body not in yet. Thread-safe."""
        if self._selection is None:
            return bool(self.owed(horizon))
        return bool(self._earned_owed(horizon)) or self._selection.in_flight() > 0

    def _earned_owed(self, horizon: float) -> list[str]:
        policy = self._policy
        return self.rounds.owed(now=get_dht_time(), horizon=horizon, proven_counts=False,
                                scored=lambda peer: policy.allows(peer) and policy.score(peer) > 0)

    def _offer(self, pointer: GroupPointer) -> None:
        self.rounds.settle(pointer, accepted=False)  # an offer is in for a round's wait; a chosen one is fetched
        for older in self._selection.offer(pointer):
            self._pass(older)

    def _select(self) -> None:
        if self._selection is None:
            return
        try:
            choice = self._selection.choose()
        except Exception as exc:
            self._selection_failed("choosing offers", exc)
            return
        for pointer in choice.dropped:
            self._pass(pointer)
        for pointer in choice.chosen:
            self._counters.add("chosen")
            self._scheduler.add(pointer)

    def _pass(self, pointer: GroupPointer) -> None:
        """An offer the selection passed over (its record PASSED): not fetched, not charged, not offered again."""
        self._counters.add("not_chosen")
        self.rounds.settle(pointer, accepted=False)
        self.changed.set()

    async def run(self) -> None:
        """Polls until cancelled. A failed poll is logged with its traceback and tried again."""
        try:
            while True:
                started = time.monotonic()
                try:
                    await self.poll_once()
                except Exception:
                    logger.exception("a poll of the swarm's keys failed; next try in %.1f s",
                                     self._cfg.fetch.poll_interval)
                await asyncio.sleep(max(0.0, self._cfg.fetch.poll_interval - (time.monotonic() - started)))
        finally:
            self._scheduler.cancel()

    def rewire(self, *, reader: KeyReader, p2p: P2P, origins: Optional[OriginBook]) -> None:
        """Reads and fetches through a new DHT peer and daemon (the node switched mode); call while `run` is
        not running. What it saw, accepted and still owes is kept; fetches the cancel interrupted are pending."""
        self._reader, self._origins = reader, origins
        self._scheduler.rewire(p2p=p2p, origin_of=_origin_lookup(origins))

    def use_gossip(self, channel: "GossipChannel") -> None:
        """Reads the DHT every `dht_poll_interval` from now on, and keeps `channel` connected to members."""
        self._gossip = channel

    async def poll_once(self) -> None:
        cfg = self._cfg
        if self._origins is not None:
            await self._origins.refresh()  # the publishers' origins, for the fetch slots
        now = get_dht_time()
        if time.monotonic() >= self._next_member_read:
            await self._read_members(now)
        due = self._due(now)
        if due:
            keys = {pointer_key(cfg.run_id, peer, w): (peer, w) for peer, w in due}
            found = await self._reader.read(list(keys), timeout=READ_TIMEOUT)
            for key, records in found.items():
                self._note_read(keys[key], len(records), now)
                for record in records.values():
                    if isinstance(record.content, RoundPointer):
                        for pointer in record.content.views():
                            try:
                                self._consider(pointer, source="pointers_read")
                            except Exception as exc:  # one pointer's fault ends neither the poll nor the rest
                                self._contain("considering a pointer read from the DHT", exc)
        self._forget(now)
        self._select()
        self._scheduler.schedule()

    async def _read_members(self, now: float) -> None:
        cfg = self._cfg
        windows = windows_between(self._read_from, now + cfg.records.max_clock_skew, cfg.records.window)
        members = await self._reader.read([member_key(cfg.run_id, w, s) for w in windows
                                           for s in range(cfg.records.member_shards)], timeout=READ_TIMEOUT)
        for records in members.values():
            for record in records.values():
                try:
                    self._note_member(record)
                except Exception as exc:
                    self._contain("noting a membership record", exc)
        self._read_from = max(self._read_from, now - self._lookback)
        interval = cfg.fetch.dht_poll_interval if self._gossip is not None else cfg.fetch.poll_interval
        self._next_member_read = time.monotonic() + interval
        if self._gossip is not None:
            await self._gossip.keep_connected(self._run_members())

    def on_gossip(self, record: FoundRecord) -> None:
        """A pointer admitted from the run's topic: considered at once, as if read from its key. An error in
        handling it is contained (`LoopErrors`), never raised into the gossip channel."""
        try:
            self._on_gossip(record)
        except Exception as exc:
            self._contain(f"handling a gossiped {type(record.content).__name__}", exc)

    def _on_gossip(self, record: FoundRecord) -> None:
        pointer = record.content
        if isinstance(pointer, HaveRecord):
            self._note_have(record)
            return
        if not isinstance(pointer, RoundPointer):
            return
        member, cfg = (pointer.publisher, pointer.window), self._cfg
        records = cfg.records
        if self._members_from <= pointer.window <= window_of(get_dht_time() + records.max_clock_skew, records.window):
            pushed = self._gossiped.setdefault(member, set())  # a window the membership reads can still see
            pushed.add(pointer.round)
            state = self._members.get(member)
            if state is not None:
                state.have = max(state.have, len(pushed))
        for view in pointer.views():
            try:
                self._consider(view, source="pointers_gossiped")
            except Exception as exc:  # one group's fault: the pointer's other groups are still considered
                self._contain("considering a gossiped pointer", exc)
        self._select()
        self._scheduler.schedule()

    def _note_have(self, record: FoundRecord) -> None:
        """A holder's admitted announcement: a second source of those bodies (`scheduler`)."""
        have = record.content
        if have.run_id != self._cfg.run_id or record.owner == self._peer_id:
            return
        self._counters.add("haves_received")
        group_ids = have.group_ids()
        self._scheduler.note_holders(record.owner, group_ids, until=record.expiration)
        for group_id in group_ids:
            for record in self.table.sourceless_of(group_id):
                if self.table.revive(record):
                    self._consider(record.pointer, source="pointers_revived")
        self._select()
        self._scheduler.schedule()

    def fetch_times(self) -> dict[str, list[float]]:
        """Seconds of the fetches that succeeded since the last call, by source (`publisher`, `holder`);
        from any thread (a deque's popleft is atomic), so a starved loop does not hold it up."""
        times, out = self._scheduler.fetch_times, {"publisher": [], "holder": []}
        while times:
            from_holder, seconds = times.popleft()
            out["holder" if from_holder else "publisher"].append(seconds)
        return out

    def sourceless(self) -> list[str]:
        """Group ids whose pointers are rejected for want of a source now (a have would revive them); from
        any thread (a copy of the keys, taken under the GIL at once)."""
        return self.table.sourceless()

    def owed(self, horizon: float) -> list[str]:
        """Live peers (a pointer seen within `horizon` s) whose newest round is not in yet; thread-safe."""
        policy = self._policy
        return self.rounds.owed(now=get_dht_time(), horizon=horizon,
                                scored=lambda peer: policy.allows(peer) and policy.score(peer) > 0)

    def _run_members(self) -> list[str]:
        """The run's members this node knows of: proven and scored ones first, then the most recent."""
        latest: dict[str, int] = {}
        for peer, w in self._members:
            if self._policy.allows(peer):
                latest[peer] = max(latest.get(peer, w), w)
        return sorted(latest, key=lambda p: (not (self._scheduler.is_proven(p) or self._policy.score(p) > 0),
                                             -latest[p]))

    def drain(self) -> list[tuple[Group, Legs]]:
        """(group, its `Legs`: `accepted` is when its body was accepted) for the groups accepted since the
        last drain, minus any that went stale while waiting."""
        with self._lock:
            groups, self._inbox = self._inbox, []
            self._inbox_by_peer.clear()
        now = get_dht_time()
        fresh = []
        for group, legs in groups:
            if now - group.created_at > self._cfg.records.ttl:
                self._counters.reject(group.sender, faults.STALE)
            else:
                fresh.append((group, legs))
        self._counters.add("gathered", len(fresh))
        return fresh

    def _note_member(self, record: FoundRecord) -> None:
        member = record.content
        if not isinstance(member, MemberRecord) or record.owner == self._peer_id or member.run_id != self._cfg.run_id:
            return
        if not self._policy.allows(record.owner):
            return
        key = (record.owner, member.window)
        state = self._members.get(key)
        if state is None:
            state = self._members[key] = _Member(have=len(self._gossiped.get(key, ())))
        if member.groups > state.claimed:
            state.claimed, state.rereads, state.next_read = member.groups, 0, state.paced_until

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
        state.paced_until = state.next_read = now + count / self._cfg.fetch.member_read_rate
        if state.claimed > state.have:
            state.rereads += 1
            backoff = now + self._cfg.fetch.poll_interval * 2 ** min(state.rereads, 6)
            state.next_read = max(state.paced_until, backoff)
            if state.rereads >= MAX_REREADS:  # claims more than it stored: believe it again when it claims more
                state.have = state.claimed
                self._counters.fault(member[0], Counter({faults.MEMBER_OVERCLAIM: 1}))

    def _consider(self, pointer: GroupPointer, *, source: str) -> None:
        """Hands a pointer to the scheduler, unless it is known already; counts where it came from first."""
        if pointer.publisher == self._peer_id or self.table.known(key_of(pointer)):
            return
        accepted = self.table.accepted_from(pointer.group_id)
        self._counters.add(source)
        cfg, now = self._cfg, get_dht_time()
        reason = screen_pointer(pointer, now=now, run_id=cfg.run_id, tokenizer_fp=self._tokenizer_fp,
                                ttl=cfg.records.ttl, max_clock_skew=cfg.records.max_clock_skew,
                                max_bytes=cfg.wire.max_bytes, other_tokenizers=cfg.fetch.other_tokenizers)
        if reason not in (faults.FUTURE, faults.STALE):  # a pointer outside the TTL is no part of a round, and never forgotten
            self.rounds.note(pointer, now=now)
            self.changed.set()
        if accepted is not None:  # the body names its sender, who is not this publisher
            self._reject(pointer, faults.SENDER_MISMATCH, "re-announces a group accepted from its sender")
            return
        if not reason and not self._policy.allows(pointer.publisher):
            reason = faults.DENIED
        if not reason and pointer.correct is not None and pointer.samples is not None:
            with self._lock:
                self._announced.append((pointer.publisher, pointer.samples, pointer.correct))
        if reason:
            self._reject(pointer, reason, "screened from its pointer")
        elif self._selection is not None:
            self._offer(pointer)
        else:
            self.table.see(pointer, Phase.CHOSEN)
            self._scheduler.add(pointer)

    def drain_announced(self) -> list[tuple[str, int, int]]:
        """(publisher, samples, correct) of each hinted group a screened pointer named since the last call (at most
        `MAX_ANNOUNCED`, the newest). Any thread."""
        with self._lock:
            out = list(self._announced)
            self._announced.clear()
        return out

    def _room(self, publisher: str) -> int:
        with self._lock:
            return self._cfg.fetch.max_groups_per_peer_per_gather - self._inbox_by_peer[publisher]

    def _accept_body(self, pointer: GroupPointer, body: bytes) -> bool:
        try:
            group, reason, detail = check_body(body, pointer, vocab_size=self._vocab_size, limits=self._cfg.wire,
                                               tokenizer_fp=self._tokenizer_fp)
        except Exception as exc:  # the wire decoder's contract is WireError; anything else is a bug, contained
            logger.exception("checking group %s from %s failed unexpectedly", pointer.group_id, pointer.publisher)
            group, reason, detail = None, faults.FETCH_ERROR, repr(exc)
        if group is None:
            self._reject(pointer, reason, detail)
            return False
        record = self.table.get(key_of(pointer)) or self.table.see(pointer, Phase.CHOSEN)
        legs = self.table.accept(record)
        self._counters.add("fetched_bytes", len(body))
        self._counters.add("fetched_bodies")
        self._on_accepted(pointer, body)  # the client holds it to serve others (`bodies`)
        with self._lock:
            self._inbox.append((group, legs))
            self._inbox_by_peer[pointer.publisher] += 1
        self.rounds.settle(pointer, accepted=True)
        if self._selection is not None:
            self._selection.settled(pointer, accepted=True)
        self.changed.set()
        return True

    def _reject(self, pointer: GroupPointer, reason: str, detail: str) -> None:
        self.table.reject(pointer, reason, revivable=reason in REVIVABLE)  # revivable: a have may come (`_note_have`)
        self.rounds.settle(pointer, accepted=False)
        if self._selection is not None:
            self._selection.settled(pointer, accepted=False)
            self._select()  # its tokens went back to the budget
        self.changed.set()
        self._counters.reject(pointer.publisher, reason)
        self._log.note(pointer.publisher, Counter({reason: 1}))
        logger.debug("rejected group %s from %s: %s (%s)", pointer.group_id, pointer.publisher, reason, detail)

    def _forget(self, now: float) -> None:
        cfg = self._cfg
        self.table.expire(now)
        records = cfg.records
        oldest = self._members_from = window_of(now - records.ttl - 2 * records.max_clock_skew - records.window,
                                                records.window)
        for member in [m for m in self._members if m[1] < oldest]:
            del self._members[member]
        for member in [m for m in self._gossiped if m[1] < oldest]:
            del self._gossiped[member]
        self.rounds.forget(now=now, ttl=cfg.records.ttl)
        for pointer in self._scheduler.pending():  # pending pointers that went stale while they waited
            if now - pointer.created_at > cfg.records.ttl:
                self._reject(pointer, faults.STALE, "went stale while pending")
        self._scheduler.forget_idle(now)


def _origin_lookup(origins: Optional[OriginBook]) -> Callable[[str], Optional[str]]:
    """A peer's network origin as the scheduler's per-origin cap asks it (None for every peer without a book)."""
    return origins.origin_of if origins is not None else lambda peer: None
