"""The storage quota by network origin, a layer over `storage.GuardedStorage`'s quotas by identity.

A crowd of identities on one machine (each with its puzzle solved, `swarm.puzzle`) shares
its network origin (`swarm.origins`: a /24 or /48 of its connections' address, or one
origin for every relayed peer). `OriginQuotaStorage.admit` refuses a new record whose
requesting peer's origin already sent `max_records_per_origin` of the records held here
(`origin_quota`, a fault of the requester), before the quotas by identity run; a record
already held may still be renewed. This peer's own records, and requesters of no known
origin, are left to the quotas by identity. The count is the base storage's `by_origin`,
which follows its evictions and expiries; the base storage also evicts by origin share
when it is full (`storage`, eviction by share).
"""

from __future__ import annotations

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

    def admit(self, key_id: DHTID, subkey: bytes, value: bytes, expiration: float, *, owner: str, requester: str,
              origin: Optional[str] = None) -> str:
        if origin is not None and (key_id, subkey) not in self._entries:
            self._purge(get_dht_time())
            if self.by_origin[origin] >= self._max_per_origin:
                return ORIGIN_REFUSAL
        return super().admit(key_id, subkey, value, expiration, owner=owner, requester=requester, origin=origin)
