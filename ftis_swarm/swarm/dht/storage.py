"""What a peer stores for others, bounded per key, per owner, per requesting peer and in total.

hivemind's `DHTLocalStorage` keeps whatever it is given until it expires. `GuardedStorage`
admits a record (already checked by `validators.RecordChecker`) only while:

- its key holds at most `MAX_KEY_BYTES` of subkeys and values: every reply stays far
  below p2pd's 4 MiB message, whatever one asks for (two keys per request at most);
- its owner (the key that signed it) and the peer that sent it each have fewer than
  `max_records_per_peer` records here;
- the peer holds fewer than `max_stored_records` records, and at most `max_stored_bytes`
  bytes, in all. A record is charged what it takes in this process's memory:
  `len(subkey) + len(value) + RECORD_OVERHEAD`, the overhead measured (hivemind's
  dictionary entry, this module's indexes, the key and subkey objects: ~1 KB beside a
  pointer's ~1 KB of subkey and value; `docs/swarm.md`). So records near
  `max_record_bytes` fill it in fewer slots, and its memory is bounded whatever they hold.

When a key or the whole storage is full, a newcomer may evict a record of a lower rank,
newest first; otherwise it is refused. Ranks: 3 this peer's own records; 2 an owner the
policy scores above 0 (a peer whose groups were used); 1 a record its owner stored itself,
or whose owner is a DHT peer in the routing table; 0 anyone else (a key that only signs,
stored through a third peer). So a stranger never evicts a scored peer's record, and
identities that only sign cannot crowd out peers that store their own records. A record
already held is replaced only by one with a later expiry (hivemind's rule).

Refusal reasons (`REFUSALS`), counted per requesting peer: `owner_quota`,
`requester_quota`, `key_full`, `storage_full`, `denied` (the policy refuses the owner).
None costs the requester anything (`peers/faults.py`): each says what this peer has room
for, not what the requester signed.
Runs on the swarm's event loop thread only.
"""

from __future__ import annotations

import dataclasses
import heapq
import logging
from collections import Counter, OrderedDict
from typing import Callable

from hivemind.dht.routing import DHTID
from hivemind.dht.storage import DHTLocalStorage, DictionaryDHTValue
from hivemind.utils.timed_storage import get_dht_time

from ftis_swarm.peers.policy import PeerPolicy
from ftis_swarm.peers import faults

logger = logging.getLogger(__name__)

MAX_KEY_BYTES = 1 << 20
"""Subkey and value bytes under one key: about 1,000 records of ~1 KB."""
REFUSALS = (faults.OWNER_QUOTA, faults.REQUESTER_QUOTA, faults.KEY_FULL, faults.STORAGE_FULL, faults.DENIED)
RECORD_OVERHEAD = 1024
"""Bytes of memory a stored record takes beyond its subkey and value (measured: `docs/swarm.md`)."""
_SELF, _SCORED, _DIRECT, _STRANGER = 3, 2, 1, 0

_Slot = tuple[DHTID, bytes]  # (key, subkey)


@dataclasses.dataclass
class _Entry:
    owner: str
    requester: str
    size: int
    expiration: float
    rank: int


class GuardedStorage(DHTLocalStorage):
    """hivemind's local storage with quotas and rank-ordered eviction (see the module docstring)."""

    def __init__(self, *, self_id: str, policy: PeerPolicy, is_dht_peer: Callable[[str], bool],
                 max_records: int, max_records_per_peer: int, max_key_bytes: int = MAX_KEY_BYTES,
                 max_bytes: int = 1 << 62):
        super().__init__()
        self._self_id, self._policy, self._is_dht_peer = self_id, policy, is_dht_peer
        self._max_records, self._max_per_peer, self._max_key_bytes = max_records, max_records_per_peer, max_key_bytes
        self._max_bytes, self._bytes = max_bytes, 0
        self._entries: dict[_Slot, _Entry] = {}
        self._key_bytes: Counter[DHTID] = Counter()
        self._by_owner: Counter[str] = Counter()
        self._by_requester: Counter[str] = Counter()
        self._ranked: list[OrderedDict[_Slot, None]] = [OrderedDict() for _ in range(_SELF + 1)]
        self._key_ranked: dict[DHTID, list[OrderedDict[_Slot, None]]] = {}
        self._expiry: list[tuple[float, DHTID, bytes]] = []

    def admit(self, key_id: DHTID, subkey: bytes, value: bytes, expiration: float, *,
              owner: str, requester: str) -> str:
        """Stores a checked record; "" when it is held afterwards, else why not.

        "not_newer" (this record, or a later version, is held) and "expired" are no faults.
        """
        self._purge(get_dht_time())
        slot, size = (key_id, subkey), len(subkey) + len(value)
        held, rank = self._entries.get(slot), self._rank(owner, requester)
        if held is not None:  # a newer version of a record held: same owner, same place
            if expiration <= held.expiration:
                return faults.NOT_NEWER
            if held.rank != _SELF and self._key_bytes[key_id] + size - held.size > self._max_key_bytes:
                return faults.KEY_FULL
        else:
            if not self._policy.allows(owner):
                return faults.DENIED
            reason = self._make_room(key_id, size, owner, requester, rank)
            if reason:
                return reason
        if not DHTLocalStorage.store_subkey(self, key_id, subkey, value, expiration):
            return faults.NOT_NEWER if held is not None else faults.EXPIRED
        if held is not None:
            self._key_bytes[key_id] += size - held.size
            self._bytes += size - held.size
            held.size, held.expiration = size, expiration
        else:
            entry = _Entry(owner=owner, requester=requester, size=size, expiration=expiration, rank=rank)
            self._entries[slot] = entry
            self._key_bytes[key_id] += size
            self._bytes += size + RECORD_OVERHEAD
            self._by_owner[owner] += 1
            self._by_requester[requester] += 1
            self._place(slot, entry.rank)
        heapq.heappush(self._expiry, (expiration, key_id, subkey))
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

    def _rank(self, owner: str, requester: str) -> int:
        if owner == self._self_id:
            return _SELF
        if self._policy.score(owner) > 0:
            return _SCORED
        if owner == requester or self._is_dht_peer(owner):
            return _DIRECT
        return _STRANGER

    def _make_room(self, key_id: DHTID, size: int, owner: str, requester: str, rank: int) -> str:
        if rank == _SELF:
            return ""
        if self._by_owner[owner] >= self._max_per_peer:
            return faults.OWNER_QUOTA
        if requester != self._self_id and self._by_requester[requester] >= self._max_per_peer:
            return faults.REQUESTER_QUOTA
        while self._key_bytes[key_id] + size > self._max_key_bytes:
            if not self._evict(rank, key_id):
                return faults.KEY_FULL
        while len(self._entries) >= self._max_records or self._bytes + size + RECORD_OVERHEAD > self._max_bytes:
            if not self._evict(rank, None):
                return faults.STORAGE_FULL
        return ""

    def _evict(self, below: int, key_id: DHTID | None) -> bool:
        """Evicts the newest record of the lowest rank under `below` (under `key_id`, if given)."""
        tables = self._ranked if key_id is None else self._key_ranked.get(key_id, [])
        for rank, slots in enumerate(tables[:below]):
            for slot in reversed(slots):
                entry = self._entries[slot]
                if rank < _SCORED and self._policy.score(entry.owner) > 0:  # scored since it was stored
                    self._unplace(slot, rank)
                    entry.rank = _SCORED
                    self._place(slot, _SCORED)
                    return self._evict(below, key_id)
                self._drop(slot)
                return True
        return False

    def _place(self, slot: _Slot, rank: int) -> None:
        self._ranked[rank][slot] = None
        self._key_ranked.setdefault(slot[0], [OrderedDict() for _ in range(_SELF + 1)])[rank][slot] = None

    def _unplace(self, slot: _Slot, rank: int) -> None:
        del self._ranked[rank][slot]
        by_rank = self._key_ranked[slot[0]]
        del by_rank[rank][slot]
        if not any(by_rank):
            del self._key_ranked[slot[0]]

    def _drop(self, slot: _Slot) -> None:
        entry = self._entries.pop(slot)
        self._key_bytes[slot[0]] -= entry.size
        self._bytes -= entry.size + RECORD_OVERHEAD
        if self._key_bytes[slot[0]] <= 0:
            del self._key_bytes[slot[0]]
        self._unplace(slot, entry.rank)
        for table, peer in ((self._by_owner, entry.owner), (self._by_requester, entry.requester)):
            table[peer] -= 1
            if table[peer] <= 0:
                del table[peer]
        held = DHTLocalStorage.get(self, slot[0])
        if held is not None and isinstance(held.value, DictionaryDHTValue):
            del held.value[slot[1]]

    def _purge(self, now: float) -> None:
        while self._expiry and self._expiry[0][0] < now:
            expiration, key_id, subkey = heapq.heappop(self._expiry)
            slot = (key_id, subkey)
            entry = self._entries.get(slot)
            if entry is not None and entry.expiration == expiration:
                self._drop(slot)
