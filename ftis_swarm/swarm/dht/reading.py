"""Reading DHT keys: a lookup of the peers nearest each key, every reply decoded strictly and checked record by record.

Why not `DHTNode.get_many`: it lets hivemind decode replies (extension types and all),
drops a peer's whole reply for one bad record, merges what it finds into this peer's own
storage without bound, and cannot say which peer sent what. `KeyReader.read` walks the
same Kademlia lookup (hivemind's `traverse_dht`), but asks each peer for at most
`KEYS_PER_CALL` keys (so a reply holds two keys' worth, about 2 MiB at most), decodes it
with `dhtcodec`, checks each record with `RecordChecker.examine`, keeps the latest version
of each subkey, and counts what each peer got wrong as its faults: `dht_no_reply`,
`bad_reply`, `bad_encoding`, `regular_value`, `oversized_reply`, and any record refusal.
A read returns what it has when its time is up; nothing it reads is stored.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
from collections import Counter
from typing import Collection

from hivemind.dht.node import DHTNode
from hivemind.dht.protocol import DHTProtocol
from hivemind.dht.routing import DHTID
from hivemind.dht.storage import DictionaryDHTValue
from hivemind.dht.traverse import traverse_dht
from hivemind.dht.validation import DHTRecord
from hivemind.p2p import PeerID
from hivemind.proto import dht_pb2
from hivemind.utils.timed_storage import get_dht_time

from ftis_swarm.peers import faults as fault_names
from ftis_swarm.swarm.counters import SwarmCounters
from ftis_swarm.swarm.dht.codec import Item, NotPointerForm, value_items
from ftis_swarm.swarm.dht.validators import NOT_A_FAULT, Content, RecordChecker
from ftis_swarm.swarm.keys import key_id

logger = logging.getLogger(__name__)

KEYS_PER_CALL = 2
MAX_RECORDS_PER_KEY = 2048
"""More than one key of an honest peer holds (1 MiB of ~1 KB records); a reply with more is cut."""


@dataclasses.dataclass(frozen=True)
class FoundRecord:
    """One checked record: its owner's peer id, its parsed content and its expiry."""

    owner: str
    content: Content
    expiration: float


@functools.lru_cache(maxsize=4096)
def peer_id_of(raw: bytes) -> PeerID:
    """hivemind's `PeerID(raw)`, remembered: it base58-encodes the id at once, and a lookup's replies name the
    same few dozen peers again and again (a tenth of a node's process under a fill, measured with py-spy)."""
    return PeerID(raw)


class KeyReader:
    """Reads keys for one DHT peer (on its event loop)."""

    def __init__(self, node: DHTNode, checker: RecordChecker, counters: SwarmCounters):
        self._node, self._protocol, self._checker, self._counters = node, node.protocol, checker, counters

    async def read(self, keys: Collection[str], *, timeout: float) -> dict[str, dict[bytes, FoundRecord]]:
        """{key: {subkey: record}} for every key, from this peer and every peer the lookup reaches in time."""
        by_id = {key_id(key): key for key in keys}
        found: dict[DHTID, dict[bytes, FoundRecord]] = {kid: {} for kid in by_id}
        for kid in by_id:
            held = self._protocol.storage.get(kid)
            if held is not None and isinstance(held.value, DictionaryDHTValue):
                items = [(DHTProtocol.serializer.dumps(sk), v, e) for sk, (v, e) in held.value.items()]
                self._merge(found[kid], kid, items, Counter())
        routing = self._protocol.routing_table
        node_to_peer: dict[DHTID, PeerID] = {}
        for kid in by_id:
            node_to_peer.update(routing.get_nearest_neighbors(kid, self._protocol.bucket_size,
                                                              exclude=self._node.node_id))

        async def get_neighbors(node_id: DHTID, queries: Collection[DHTID]) -> dict:
            return await self._ask(node_to_peer, node_to_peer[node_id], list(queries), found)

        lookup = asyncio.ensure_future(traverse_dht(
            queries=list(by_id), initial_nodes=list(node_to_peer), beam_size=self._protocol.bucket_size,
            num_workers=self._node.num_workers, queries_per_call=KEYS_PER_CALL, get_neighbors=get_neighbors,
            visited_nodes={kid: {self._node.node_id} for kid in by_id},
        ))
        done, _ = await asyncio.wait({lookup}, timeout=timeout)
        if not done:
            lookup.cancel()
            logger.debug("reading %d keys took over %.1f s; using what arrived", len(by_id), timeout)
        elif not lookup.cancelled() and lookup.exception() is not None:
            logger.warning("the lookup of %d keys failed: %r", len(by_id), lookup.exception())
        return {by_id[kid]: records for kid, records in found.items()}

    async def _ask(self, node_to_peer: dict[DHTID, PeerID], peer: PeerID, queries: list[DHTID],
                   found: dict[DHTID, dict[bytes, FoundRecord]]) -> dict:
        """One find call: merges the records in the reply, returns each key's next peers for the lookup."""
        faults: Counter[str] = Counter()
        nothing = {query: ((), False) for query in queries}
        request = dht_pb2.FindRequest(keys=[q.to_bytes() for q in queries], peer=self._protocol.node_info)
        self._counters.add("dht_requests")
        try:
            response = await self._protocol.get_stub(peer).rpc_find(request, timeout=self._protocol.wait_timeout)
            self._counters.add("dht_bytes", response.ByteSize())
        except Exception as exc:  # p2pd and hivemind raise assorted types for a peer that does not answer
            logger.debug("no find reply from %s: %r", peer, exc)
            self._counters.fault(peer.to_base58(), Counter({fault_names.DHT_NO_REPLY: 1}))
            asyncio.create_task(self._protocol.update_routing_table(None, peer, responded=False))
            return nothing
        try:
            out = self._parse(peer, response, queries, found, faults, node_to_peer)
        except Exception as exc:  # whatever a peer's reply makes fail (DHTID.from_bytes asserts its range) is its fault
            logger.debug("a bad find reply from %s: %r", peer, exc, exc_info=True)
            faults[fault_names.BAD_REPLY] += 1
            out = nothing
        if faults:
            self._counters.fault(peer.to_base58(), faults)
        return out

    def _parse(self, peer: PeerID, response: dht_pb2.FindResponse, queries: list[DHTID], found: dict,
               faults: Counter[str], node_to_peer: dict[DHTID, PeerID]) -> dict:
        if len(response.results) != len(queries):
            raise ValueError("a reply not aligned with the keys asked")
        if response.peer and response.peer.node_id:
            asyncio.create_task(self._protocol.update_routing_table(DHTID.from_bytes(response.peer.node_id), peer,
                                                                    responded=True))
        out = {}
        for query, result in zip(queries, response.results):
            if len(result.nearest_node_ids) != len(result.nearest_peer_ids) or \
                    len(result.nearest_node_ids) > 2 * self._protocol.bucket_size:
                raise ValueError("a reply with a malformed list of nearest peers")
            nearest = {DHTID.from_bytes(n): peer_id_of(p) for n, p in zip(result.nearest_node_ids,
                                                                             result.nearest_peer_ids)}
            node_to_peer.update(nearest)
            out[query] = (tuple(nearest), False)
            if result.type == dht_pb2.FOUND_DICTIONARY:
                try:
                    self._merge(found[query], query, value_items(result.value), faults)
                except NotPointerForm:
                    faults[fault_names.BAD_ENCODING] += 1
            elif result.type == dht_pb2.FOUND_REGULAR:
                faults[fault_names.REGULAR_VALUE] += 1
        return out

    def _merge(self, records: dict[bytes, FoundRecord], kid: DHTID, items: list[Item], faults: Counter[str]) -> None:
        now = get_dht_time()
        for subkey, value, expiration in items:
            if expiration < now:
                continue
            if len(records) >= MAX_RECORDS_PER_KEY and subkey not in records:
                faults[fault_names.OVERSIZED_REPLY] += 1
                return
            verdict = self._checker.examine(DHTRecord(kid.to_bytes(), subkey, value, expiration))
            if verdict.reason in NOT_A_FAULT:
                self._counters.add(verdict.reason)
                continue
            if verdict.reason:
                faults[verdict.reason] += 1
                continue
            held = records.get(subkey)
            if held is None or expiration > held.expiration:
                records[subkey] = FoundRecord(owner=verdict.owner.peer_id, content=verdict.content,
                                              expiration=expiration)
