"""The DHT calls other peers make on this one, answered with the storage guarded.

hivemind's `DHTProtocol.rpc_store` decodes a whole-dictionary store with its msgpack
extension types before any validator runs, stores regular values and cache entries
without bound, and keeps everything until it expires. `DHTServicer` answers the same
three calls (it is registered under hivemind's handler names, so peers see no
difference) in this order, each record on its own:

1. cheap screens on the raw bytes: no cache stores (`cache_store`), no regular values
   (`regular_value`), a subkey of the swarm's form (`not_pointer_form`); a
   whole-dictionary store (hivemind's replication push) is decoded strictly
   (`dhtcodec`), refused whole at its first item of another form (`bad_encoding`);
2. the requester's store rate (`StoreRate`): `store_rate` records a second from one peer, in
   a token bucket of `store_burst` (a dictionary's records each count; per peer, never per
   origin: see `StoreRate`); the records past it are refused as
   `store_rate` before any signature or puzzle check (no one's fault: a fill by many
   identities costs this peer at most that rate in checks, where it took the nodes' event
   loops whole before, issue 40);
3. `RecordChecker.examine` (size, expiry, signature, schema, key binding);
4. `GuardedStorage.admit` (quotas, the reserve, eviction by rank and by origin share), with
   the requester's network origin (`origins.OriginBook`; `origin_quota` caps it too).

Refusals are counted per requesting peer as faults and logged at most once per peer per
10 s (`ThrottledLog`), never once per item. `rpc_find` answers at most `MAX_FIND_KEYS`
keys and stops adding values past `MAX_REPLY_BYTES`, so no reply nears p2pd's 4 MiB.
A requester the policy does not allow gets nothing stored and nothing found.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, OrderedDict
from typing import Optional

from hivemind.dht.protocol import DHTProtocol
from hivemind.dht.routing import DHTID
from hivemind.dht.validation import DHTRecord
from hivemind.p2p import P2PContext
from hivemind.proto import dht_pb2

from ftis_swarm.peers import faults
from ftis_swarm.peers.policy import PeerPolicy
from ftis_swarm.swarm.counters import SwarmCounters, ThrottledLog
from ftis_swarm.swarm.dht.codec import NotPointerForm, value_items
from ftis_swarm.swarm.dht.storage import GuardedStorage
from ftis_swarm.swarm.dht.validators import NOT_A_FAULT, RecordChecker, owner_of
from ftis_swarm.swarm.origins import OriginBook

logger = logging.getLogger(__name__)

MAX_FIND_KEYS = 64
MAX_REPLY_BYTES = 5 << 19
"""2.5 MiB: two full keys (1 MiB each) always fit, and no reply nears p2pd's 4 MiB."""
_HARMLESS = frozenset({faults.NOT_NEWER, faults.EXPIRED})


MAX_BUCKETS = 4096
"""Requesters whose buckets are kept (the longest-quiet leaves first: it comes back full)."""


class StoreRate:
    """A token bucket of records a second per requesting peer (a bounded table).

    Per peer only, never per network origin: honest nodes behind one address, or every relayed
    peer (one origin), would share a bucket that a crowd there could empty, and their own
    stores would then be refused (found by `test_swarm_flood`, where every peer is on
    127.0.0.1: the bootstrap refused honest membership records). A crowd of identities pays a
    puzzle for each; what it holds is capped per origin (`origin_quota`)."""

    def __init__(self, rate: float, burst: int, clock=time.monotonic):
        self._rate, self._burst, self._clock = rate, burst, clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def take(self, requester: str, n: int) -> int:
        """How many of `n` records the requester may have checked now (its bucket is charged for them)."""
        now = self._clock()
        level, at = self._buckets.pop(requester, (float(self._burst), now))
        level = min(float(self._burst), level + (now - at) * self._rate)
        granted = max(0, min(n, int(level)))
        self._buckets[requester] = (level - granted, now)  # most recently heard last
        while len(self._buckets) > MAX_BUCKETS:
            self._buckets.popitem(last=False)
        return granted


class DHTServicer:
    """Answers `rpc_ping`, `rpc_store` and `rpc_find` for one peer (see the module docstring)."""

    def __init__(self, *, protocol: DHTProtocol, storage: GuardedStorage, checker: RecordChecker,
                 policy: PeerPolicy, counters: SwarmCounters, origins: Optional[OriginBook] = None,
                 store_rate: Optional[StoreRate] = None):
        self._protocol, self._storage, self._checker, self._origins = protocol, storage, checker, origins
        self._policy, self._counters = policy, counters
        self._rate = store_rate
        self._log = ThrottledLog(logger, "refused DHT requests")

    async def rpc_ping(self, request: dht_pb2.PingRequest, context: P2PContext) -> dht_pb2.PingResponse:
        return await self._protocol.rpc_ping(request, context)

    async def rpc_store(self, request: dht_pb2.StoreRequest, context: P2PContext) -> dht_pb2.StoreResponse:
        requester = context.remote_id.to_base58()
        n = len(request.keys)
        refused: Counter[str] = Counter()
        store_ok = [False] * n
        try:
            if not (len(request.subkeys) == len(request.values) == len(request.expiration_time)
                    == len(request.in_cache) == n):
                refused[faults.MALFORMED_REQUEST] += 1
            elif not self._policy.allows(requester):
                refused[faults.DENIED] += n
            else:
                if request.peer and request.peer.node_id:
                    asyncio.create_task(self._protocol.rpc_ping(dht_pb2.PingRequest(peer=request.peer), context))
                origin = await self._origins.lookup(requester) if self._origins is not None else None
                for i in range(n):
                    store_ok[i] = self._store_item(request, i, requester, origin, refused)
        except Exception:  # a bug here must cost the requester one refusal, never this peer's handler
            logger.exception("a store request from %s failed", requester)
            refused[faults.STORE_ERROR] += 1
        self._count(requester, refused)
        return dht_pb2.StoreResponse(store_ok=store_ok, peer=self._protocol.node_info)

    async def rpc_find(self, request: dht_pb2.FindRequest, context: P2PContext) -> dht_pb2.FindResponse:
        requester = context.remote_id.to_base58()
        if not self._policy.allows(requester):
            self._count(requester, Counter({faults.DENIED: 1}))
            return dht_pb2.FindResponse(results=[dht_pb2.FindResult() for _ in request.keys],
                                        peer=self._protocol.node_info)
        extra = max(0, len(request.keys) - MAX_FIND_KEYS)
        if extra:
            self._count(requester, Counter({faults.OVERSIZED_REQUEST: 1}))
            request = dht_pb2.FindRequest(keys=request.keys[:MAX_FIND_KEYS], peer=request.peer)
        response = await self._protocol.rpc_find(request, context)
        budget = MAX_REPLY_BYTES
        for result in response.results:
            if result.type != dht_pb2.NOT_FOUND:
                if len(result.value) > budget:
                    result.type, result.value, result.expiration_time = dht_pb2.NOT_FOUND, b"", 0.0
                else:
                    budget -= len(result.value)
        response.results.extend(dht_pb2.FindResult() for _ in range(extra))
        return response

    def _store_item(self, request: dht_pb2.StoreRequest, i: int, requester: str, origin: Optional[str],
                    refused: Counter[str]) -> bool:
        key, tag, value, expiration = request.keys[i], request.subkeys[i], request.values[i], request.expiration_time[i]
        if request.in_cache[i]:
            refused[faults.CACHE_STORE] += 1
            return False
        if tag == DHTProtocol.IS_REGULAR_VALUE:
            refused[faults.REGULAR_VALUE] += 1
            return False
        if tag == DHTProtocol.IS_DICTIONARY:
            try:
                items = value_items(value)
            except NotPointerForm:
                refused[faults.BAD_ENCODING] += 1
                return False
            if any(owner_of(subkey) is None for subkey, _, _ in items):
                refused[faults.NOT_POINTER_FORM] += 1
                return False
            allowed = self._take(requester, len(items))
            if allowed < len(items):
                refused[faults.STORE_RATE] += len(items) - allowed
            return all([self._admit(key, subkey, item_value, item_expiration, requester, origin, refused)
                        for subkey, item_value, item_expiration in items[:allowed]]) and allowed == len(items)
        if owner_of(tag) is None:
            refused[faults.NOT_POINTER_FORM] += 1
            return False
        if not self._take(requester, 1):
            refused[faults.STORE_RATE] += 1
            return False
        return self._admit(key, tag, value, expiration, requester, origin, refused)

    def _take(self, requester: str, n: int) -> int:
        """How many of `n` records the requester's store rate lets through (all of them without a rate)."""
        return n if self._rate is None else self._rate.take(requester, n)

    def _admit(self, key: bytes, subkey: bytes, value: bytes, expiration: float, requester: str,
               origin: Optional[str], refused: Counter[str]) -> bool:
        verdict = self._checker.examine(DHTRecord(key, subkey, value, expiration))
        if verdict.reason in NOT_A_FAULT:
            self._counters.add(verdict.reason)
            return False
        if verdict.reason:
            refused[verdict.reason] += 1
            return False
        reason = self._storage.admit(DHTID.from_bytes(key), DHTProtocol.serializer.loads(subkey), value, expiration,
                                     owner=verdict.owner.peer_id, requester=requester, origin=origin)
        if reason and reason not in _HARMLESS:
            refused[reason] += 1
        return not reason

    def _count(self, requester: str, refused: Counter[str]) -> None:
        if refused:
            self._counters.fault(requester, refused)
            self._log.note(requester, refused)
