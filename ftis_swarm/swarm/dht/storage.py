"""What a peer stores for others, bounded per key, per owner, per requesting peer, per origin and in total.

hivemind's `DHTLocalStorage` keeps whatever it is given until it expires. `GuardedStorage`
admits a record (already checked by `validators.RecordChecker`) only while:

- its key holds at most `MAX_KEY_BYTES` of subkeys and values: every reply stays far
  below p2pd's 4 MiB message, whatever one asks for (two keys per request at most);
- its owner (the key that signed it) and the peer that sent it each have fewer than
  `max_records_per_peer` records here;
- the peer holds fewer than `max_records` records, and at most `max_bytes` bytes, in all.
  A record is charged what it takes in this process's memory:
  `len(subkey) + len(value) + RECORD_OVERHEAD`, the overhead measured (hivemind's
  dictionary entry, this module's indexes, the key and subkey objects: ~1 KB beside a
  pointer's ~1 KB of subkey and value; `docs/swarm.md`). So records near
  `max_record_bytes` fill it in fewer slots, and its memory is bounded whatever they hold;
- records of publishers with no history here (rank below `_KNOWN`) take at most
  `1 - reserve` of those records and bytes: the rest is the **reserve**, kept for
  publishers that have published before.

Ranks: 4 this peer's own records; 3 an owner the policy scores above 0 (a peer whose
groups were used); 2 a **known publisher**: an owner that stored its own records here
and whose first such record was admitted at least `known_after` seconds ago (its history
is kept while it holds records, and a while after); 1 a record its owner stored itself,
or whose owner is a DHT peer in the routing table; 0 anyone else (a key that only signs,
stored through a third peer). A record's rank is taken again when it would be evicted,
so one stored before its owner was scored or known is kept as such.

When a key or the storage is full, a newcomer evicts, in this order:

1. the newest record of the lowest rank below its own;
2. else, if it is of rank 1 or 2 and came from a known network origin (`origin`), the
   newest record of rank at most its own (and below 3) of the origin that holds the most
   records here, if that origin holds more than the newcomer's would after admission
   (**eviction by share**: a fill by many origins cannot keep a publisher of a lighter
   origin out, and each crowd's origin loses its own records first);

otherwise it is refused. So a stranger never evicts a scored or known peer's record, a
fill by new identities cannot enter the reserve, and a fill by identities that built a
history can only take records from origins heavier than the one publishing. A record
already held is replaced only by one with a later expiry (hivemind's rule).

Refusal reasons (`REFUSALS`), counted per requesting peer: `owner_quota`,
`requester_quota`, `key_full`, `storage_full`, `denied` (the policy refuses the owner).
None costs the requester anything (`peers/faults.py`): each says what this peer has room
for, not what the requester signed. Evictions are counted in `evicted` (by share:
`evicted_by_share`). Runs on the swarm's event loop thread only.
"""

from __future__ import annotations

import dataclasses
import heapq
import logging
import math
from collections import Counter, OrderedDict
from typing import Callable, Optional

from hivemind.dht.routing import DHTID
from hivemind.dht.storage import DHTLocalStorage, DictionaryDHTValue
from hivemind.utils.timed_storage import get_dht_time

from ftis_swarm.peers import faults
from ftis_swarm.peers.policy import PeerPolicy

logger = logging.getLogger(__name__)

MAX_KEY_BYTES = 1 << 20
"""Subkey and value bytes under one key: about 1,000 records of ~1 KB."""
REFUSALS = (faults.OWNER_QUOTA, faults.REQUESTER_QUOTA, faults.KEY_FULL, faults.STORAGE_FULL, faults.DENIED)
RECORD_OVERHEAD = 1024
"""Bytes of memory a stored record takes beyond its subkey and value (measured: `docs/swarm.md`)."""
_SELF, _SCORED, _KNOWN, _DIRECT, _STRANGER = 4, 3, 2, 1, 0
_RANKS = _SELF + 1

_Slot = tuple[DHTID, bytes]  # (key, subkey)


@dataclasses.dataclass
class _Entry:
    owner: str
    requester: str
    origin: Optional[str]
    size: int
    expiration: float
    rank: int


class GuardedStorage(DHTLocalStorage):
    """hivemind's local storage with quotas, a reserve and rank-ordered eviction (see the module docstring)."""

    def __init__(self, *, self_id: str, policy: PeerPolicy, is_dht_peer: Callable[[str], bool],
                 max_records: int, max_records_per_peer: int, max_key_bytes: int = MAX_KEY_BYTES,
                 max_bytes: int = 1 << 62, reserve: float = 0.0, known_after: float = 60.0):
        super().__init__()
        self._self_id, self._policy, self._is_dht_peer = self_id, policy, is_dht_peer
        self._max_records, self._max_per_peer, self._max_key_bytes = max_records, max_records_per_peer, max_key_bytes
        self._max_bytes, self._bytes = max_bytes, 0
        self._open_records = math.floor(max_records * (1.0 - reserve))
        self._open_bytes = math.floor(min(max_bytes, 1 << 62) * (1.0 - reserve))
        self._known_after = known_after
        self._entries: dict[_Slot, _Entry] = {}
        self._key_bytes: Counter[DHTID] = Counter()
        self._by_owner: Counter[str] = Counter()
        self._by_requester: Counter[str] = Counter()
        self.by_origin: Counter[str] = Counter()
        """Records held per network origin of the peer that sent them (none for records of no known origin)."""
        self._origin_slots: dict[str, OrderedDict[_Slot, None]] = {}
        self._ranked: list[OrderedDict[_Slot, None]] = [OrderedDict() for _ in range(_RANKS)]
        self._key_ranked: dict[DHTID, list[OrderedDict[_Slot, None]]] = {}
        self._rank_records, self._rank_bytes = [0] * _RANKS, [0] * _RANKS
        self._history: OrderedDict[str, float] = OrderedDict()  # owner -> when its first own record came
        self._expiry: list[tuple[float, DHTID, bytes]] = []
        self.evicted: Counter[str] = Counter()
        """Records evicted for a newcomer: "rank" (a lower rank's) and "share" (a heavier origin's)."""

    def admit(self, key_id: DHTID, subkey: bytes, value: bytes, expiration: float, *,
              owner: str, requester: str, origin: Optional[str] = None) -> str:
        """Stores a checked record; "" when it is held afterwards, else why not.

        `origin`: the requester's network origin, when known. "not_newer" (this record, or a
        later version, is held) and "expired" are no faults.
        """
        now = get_dht_time()
        self._purge(now)
        slot, size = (key_id, subkey), len(subkey) + len(value)
        held, rank = self._entries.get(slot), self._rank(owner, requester, now)
        if held is not None:  # a newer version of a record held: same owner, same place
            if expiration <= held.expiration:
                return faults.NOT_NEWER
            if held.rank != _SELF and self._key_bytes[key_id] + size - held.size > self._max_key_bytes:
                return faults.KEY_FULL
        else:
            if not self._policy.allows(owner):
                return faults.DENIED
            reason = self._make_room(key_id, size, owner, requester, origin, rank)
            if reason:
                return reason
        if not DHTLocalStorage.store_subkey(self, key_id, subkey, value, expiration):
            return faults.NOT_NEWER if held is not None else faults.EXPIRED
        if held is not None:
            self._key_bytes[key_id] += size - held.size
            self._bytes += size - held.size
            self._rank_bytes[held.rank] += size - held.size
            held.size, held.expiration = size, expiration
        else:
            entry = _Entry(owner=owner, requester=requester, origin=origin if rank != _SELF else None, size=size,
                           expiration=expiration, rank=rank)
            self._entries[slot] = entry
            self._key_bytes[key_id] += size
            self._bytes += size + RECORD_OVERHEAD
            self._by_owner[owner] += 1
            self._by_requester[requester] += 1
            if entry.origin is not None:
                self.by_origin[entry.origin] += 1
                self._origin_slots.setdefault(entry.origin, OrderedDict())[slot] = None
            self._place(slot, entry)
        if owner == requester and rank != _SELF:
            self._note_history(owner, now)
        heapq.heappush(self._expiry, (expiration, key_id, subkey))
        if len(self.expiration_heap) > 2 * len(self.data) + 64:  # hivemind's: one entry per later expiry of a key
            self.expiration_heap = list(self.key_to_heap.values())
            heapq.heapify(self.expiration_heap)
        return ""

    def store_subkey(self, key: DHTID, subkey: bytes, value: bytes, expiration_time: float) -> bool:
        """This peer's own record (the only caller that reaches storage without `admit`)."""
        return self.admit(key, subkey, value, expiration_time, owner=self._self_id, requester=self._self_id) == ""

    def store(self, key: DHTID, value: bytes, expiration_time: float, subkey: object = None) -> bool:
        """Regular (subkey-less) values are never stored: every record of the swarm has an owner subkey."""
        if subkey is not None and isinstance(subkey, bytes):
            return self.store_subkey(key, subkey, value, expiration_time)
        return False

    @property
    def held(self) -> int:
        """Records held now (expired ones included until the next store purges them); safe from any thread."""
        return len(self._entries)

    @property
    def held_bytes(self) -> int:
        """What the records held now are charged (`RECORD_OVERHEAD` each beside their bytes)."""
        return self._bytes

    def known(self, owner: str, now: Optional[float] = None) -> bool:
        """Whether `owner` has published here before: its first own record came `known_after` s ago or more."""
        first = self._history.get(owner)
        return first is not None and (get_dht_time() if now is None else now) - first >= self._known_after

    def _note_history(self, owner: str, now: float) -> None:
        self._history.setdefault(owner, now)
        self._history.move_to_end(owner)
        while len(self._history) > self._max_records:  # forget the longest-quiet owners that hold nothing here
            quiet = next(iter(self._history))
            if self._by_owner[quiet] > 0:
                self._history.move_to_end(quiet)
                if next(iter(self._history)) == owner:
                    break
                continue
            del self._history[quiet]

    def _rank(self, owner: str, requester: str, now: float) -> int:
        if owner == self._self_id:
            return _SELF
        if self._policy.score(owner) > 0:
            return _SCORED
        if owner == requester and self.known(owner, now):
            return _KNOWN
        if owner == requester or self._is_dht_peer(owner):
            return _DIRECT
        return _STRANGER

    def _make_room(self, key_id: DHTID, size: int, owner: str, requester: str, origin: Optional[str],
                   rank: int) -> str:
        if rank == _SELF:
            return ""
        if self._by_owner[owner] >= self._max_per_peer:
            return faults.OWNER_QUOTA
        if requester != self._self_id and self._by_requester[requester] >= self._max_per_peer:
            return faults.REQUESTER_QUOTA
        while self._key_bytes[key_id] + size > self._max_key_bytes:
            if not self._evict_by_rank(rank, key_id):
                return faults.KEY_FULL
        cost = size + RECORD_OVERHEAD
        if rank < _KNOWN:  # the reserve: records without history take at most `1 - reserve` of the storage
            while (sum(self._rank_records[:_KNOWN]) + 1 > self._open_records
                   or sum(self._rank_bytes[:_KNOWN]) + cost > self._open_bytes):
                if not self._evict(rank, origin, ceiling=_KNOWN):
                    return faults.STORAGE_FULL
        while len(self._entries) >= self._max_records or self._bytes + cost > self._max_bytes:
            if not self._evict(rank, origin, ceiling=_SCORED):
                return faults.STORAGE_FULL
        return ""

    def _evict(self, rank: int, origin: Optional[str], *, ceiling: int) -> bool:
        """Evicts one record below `ceiling` for a newcomer: by rank, else by share (the module docstring)."""
        if self._evict_by_rank(min(rank, ceiling), None):
            self.evicted["rank"] += 1
            return True
        if _DIRECT <= rank <= _KNOWN and origin is not None and self._evict_by_share(min(rank, ceiling - 1), origin):
            self.evicted["share"] += 1
            return True
        return False

    def _evict_by_rank(self, below: int, key_id: Optional[DHTID]) -> bool:
        """Evicts the newest record of the lowest rank under `below` (under `key_id`, if given)."""
        now = get_dht_time()
        while True:
            tables = self._ranked if key_id is None else self._key_ranked.get(key_id, [])
            slot = next((next(reversed(slots)) for slots in tables[:below] if slots), None)
            if slot is None:
                return False
            if not self._rerank(slot, now):
                self._drop(slot)
                return True

    def _evict_by_share(self, top: int, origin: str) -> bool:
        """Evicts the newest record of rank <= `top` of the heaviest origin, if it holds more than `origin` will."""
        now = get_dht_time()
        for heavy, count in self.by_origin.most_common():
            if count <= self.by_origin[origin] + 1:
                return False
            if heavy == origin:
                continue
            for slot in reversed(self._origin_slots[heavy]):
                entry = self._entries[slot]
                if entry.rank <= top and not self._rerank(slot, now):
                    self._drop(slot)
                    return True
        return False

    def _rerank(self, slot: _Slot, now: float) -> bool:
        """Moves a held record up to its owner's rank now, if that is higher (scored or known since it came)."""
        entry = self._entries[slot]
        rank = self._rank(entry.owner, entry.requester, now)
        if rank <= entry.rank:
            return False
        self._unplace(slot, entry)
        entry.rank = rank
        self._place(slot, entry)
        return True

    def _place(self, slot: _Slot, entry: _Entry) -> None:
        self._ranked[entry.rank][slot] = None
        self._key_ranked.setdefault(slot[0], [OrderedDict() for _ in range(_RANKS)])[entry.rank][slot] = None
        self._rank_records[entry.rank] += 1
        self._rank_bytes[entry.rank] += entry.size + RECORD_OVERHEAD

    def _unplace(self, slot: _Slot, entry: _Entry) -> None:
        del self._ranked[entry.rank][slot]
        by_rank = self._key_ranked[slot[0]]
        del by_rank[entry.rank][slot]
        if not any(by_rank):
            del self._key_ranked[slot[0]]
        self._rank_records[entry.rank] -= 1
        self._rank_bytes[entry.rank] -= entry.size + RECORD_OVERHEAD

    def _drop(self, slot: _Slot) -> None:
        entry = self._entries.pop(slot)
        self._key_bytes[slot[0]] -= entry.size
        self._bytes -= entry.size + RECORD_OVERHEAD
        if self._key_bytes[slot[0]] <= 0:
            del self._key_bytes[slot[0]]
        self._unplace(slot, entry)
        for table, peer in ((self._by_owner, entry.owner), (self._by_requester, entry.requester),
                            (self.by_origin, entry.origin)):
            if peer is not None:
                table[peer] -= 1
                if table[peer] <= 0:
                    del table[peer]
        if entry.origin is not None:
            slots = self._origin_slots[entry.origin]
            del slots[slot]
            if not slots:
                del self._origin_slots[entry.origin]
        self._forget_value(slot)
        if len(self._expiry) > 2 * len(self._entries) + 64:  # evicted records' expiries: drop them at once
            self._expiry = [(e.expiration, s[0], s[1]) for s, e in self._entries.items()]
            heapq.heapify(self._expiry)

    def _forget_value(self, slot: _Slot) -> None:
        """Deletes a record from hivemind's dictionary, and the dictionary once empty (its memory goes with it)."""
        key_id, subkey = slot
        held = self.data.get(key_id)
        if held is None or not isinstance(held.value, DictionaryDHTValue):
            return
        value = held.value
        del value[subkey]
        if not value.data:
            del self[key_id]
        elif len(value.expiration_heap) > 2 * len(value.data) + 16:  # ghosts of deleted subkeys
            value.expiration_heap = list(value.key_to_heap.values())
            heapq.heapify(value.expiration_heap)

    def _purge(self, now: float) -> None:
        while self._expiry and self._expiry[0][0] < now:
            expiration, key_id, subkey = heapq.heappop(self._expiry)
            slot = (key_id, subkey)
            entry = self._entries.get(slot)
            if entry is not None and entry.expiration == expiration:
                self._drop(slot)
