"""The storage quota by network origin, a layer over `storage.GuardedStorage`'s quotas by identity.

A crowd of identities on one machine (each with its puzzle solved, `swarm.puzzle`) shares
its network origin (`swarm.origins`: a /24 or /48 of its connections' address, or one
origin for every relayed peer). `OriginQuotaStorage.admit` refuses a new record whose
requesting peer's origin already sent `max_records_per_origin` of the records held here
(`origin_quota`, a fault of the requester), before the quotas by identity run; a record
already held may still be renewed. This peer's own records, and requesters of no known
origin, are left to the quotas by identity. The count follows the base storage's own
evictions and expiries (`_drop`).
"""

from __future__ import annotations

from collections import Counter
from typing import Optional

from hivemind.dht.routing import DHTID
from hivemind.utils.timed_storage import get_dht_time

from ftis_swarm.peers import faults
from ftis_swarm.swarm.dht.storage import GuardedStorage

ORIGIN_REFUSAL = faults.ORIGIN_QUOTA


class OriginQuotaStorage(GuardedStorage):
    """`GuardedStorage` with at most `max_records_per_origin` records from one origin's requesters."""

    def __init__(self, *, max_records_per_origin: int, **limits):
        super().__init__(**limits)
        self._max_per_origin = max_records_per_origin
        self._origin_of_slot: dict[tuple[DHTID, bytes], str] = {}
        self.by_origin: Counter[str] = Counter()
        """Records held per origin of the peer that sent them."""

    def admit(self, key_id: DHTID, subkey: bytes, value: bytes, expiration: float, *, owner: str, requester: str,
              origin: Optional[str] = None) -> str:
        slot = (key_id, subkey)
        if origin is not None and slot not in self._entries:
            self._purge(get_dht_time())
            if self.by_origin[origin] >= self._max_per_origin:
                return ORIGIN_REFUSAL
        reason = super().admit(key_id, subkey, value, expiration, owner=owner, requester=requester)
        if not reason and origin is not None and slot in self._entries and slot not in self._origin_of_slot:
            self._origin_of_slot[slot] = origin
            self.by_origin[origin] += 1
        return reason

    def _drop(self, slot: tuple[DHTID, bytes]) -> None:
        super()._drop(slot)
        origin = self._origin_of_slot.pop(slot, None)
        if origin is not None:
            self.by_origin[origin] -= 1
            if self.by_origin[origin] <= 0:
                del self.by_origin[origin]
