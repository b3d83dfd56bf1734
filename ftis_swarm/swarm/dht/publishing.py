"""Signing records, and storing them on the peers nearest their keys, counting who accepted each.

Why not `DHTNode.store`: it reports success as soon as any replica (this node included)
took the record, so a record that never left this node, or that p2pd dropped for size,
still reads as stored. Here each record is signed and checked by this node's own
checker (`sign_records`: the client gossips the signed pointer before storing it), the
nearest `num_replicas` other peers of all keys are found in one lookup, each is asked to
store its key's record, and the record is kept in local storage; the result is the number
of those peers that hold each record afterwards.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging

from hivemind.dht.node import DHTNode
from hivemind.dht.protocol import DHTProtocol
from hivemind.dht.routing import DHTID
from hivemind.dht.storage import DictionaryDHTValue
from hivemind.dht.validation import DHTRecord
from hivemind.p2p import PeerID

from ftis_swarm.swarm.counters import SwarmCounters
from ftis_swarm.swarm.keys import key_id

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Record:
    """One record to store: its key, serialized subkey, value (a dict, unsigned) and expiry."""

    key: str
    subkey: bytes
    value: dict
    expiration: float


@dataclasses.dataclass(frozen=True)
class StoreOutcome:
    """How many of the peers asked to hold a record accepted it."""

    accepted: int
    asked: int


@dataclasses.dataclass(frozen=True)
class SignedRecord:
    """A record with its key's DHT id and the signed DHT form (what peers store, and what is gossiped)."""

    record: Record
    kid: DHTID
    signed: DHTRecord


def sign_records(node: DHTNode, records: list[Record]) -> list[SignedRecord]:
    """Signs each record with this node's key and checks it as any peer would; raises ValueError if one fails."""
    validator = node.protocol.record_validator
    out = []
    for record in records:
        kid = key_id(record.key)
        raw = DHTRecord(kid.to_bytes(), DHTProtocol.serializer.dumps(record.subkey),
                        DHTProtocol.serializer.dumps(record.value), record.expiration)
        raw = dataclasses.replace(raw, value=validator.sign_value(raw))
        if not validator.validate(raw):
            raise ValueError(f"this node's own record under {record.key!r} fails its checks")
        out.append(SignedRecord(record, kid, raw))
    return out


async def store_records(node: DHTNode, signed: list[SignedRecord], counters: SwarmCounters) -> list[StoreOutcome]:
    """Stores each signed record on the nearest other peers of its key, then locally; one outcome per record."""
    protocol = node.protocol
    nearest = await node.find_nearest_nodes([s.kid for s in signed], k_nearest=node.num_replicas, exclude_self=True)
    outcomes = await asyncio.gather(*(_store_everywhere(protocol, list(nearest.get(s.kid, {}).values()), s, counters)
                                      for s in signed))
    if not protocol.client_mode:  # after the remote stores, so that no routing-table push pre-empts them
        for s in signed:
            protocol.storage.store_subkey(s.kid, s.record.subkey, s.signed.value, s.record.expiration)
    return list(outcomes)


async def _store_everywhere(protocol: DHTProtocol, peers: list[PeerID], signed: SignedRecord,
                            counters: SwarmCounters) -> StoreOutcome:
    holds = await asyncio.gather(*(_store_at(protocol, peer, signed, counters) for peer in peers))
    logger.debug("record under %s: %d of %d peers hold it", signed.record.key, sum(holds), len(peers))
    return StoreOutcome(accepted=sum(holds), asked=len(peers))


async def _store_at(protocol: DHTProtocol, peer: PeerID, signed: SignedRecord, counters: SwarmCounters) -> bool:
    """Whether `peer` holds the record after asking it to store it.

    A peer answers "no" both when it refuses a record and when it already has it (another
    peer may have passed it on while meeting it); only in the second case does it count.
    """
    kid, subkey, raw = signed.kid, signed.record.subkey, signed.signed
    counters.add("dht_requests")
    counters.add("dht_bytes", len(raw.subkey) + len(raw.value))
    answer = await protocol.call_store(peer, keys=[kid], values=[raw.value],
                                       expiration_time=[raw.expiration_time], subkeys=[subkey])
    if answer is None:
        return False
    if answer[0]:
        return True
    counters.add("dht_requests")
    found = await protocol.call_find(peer, [kid])
    held = found.get(kid, (None, None))[0] if found else None
    if held is None or not isinstance(held.value, DictionaryDHTValue):
        return False
    item = held.value.get(subkey)
    return item is not None and (item.value, item.expiration_time) == (raw.value, raw.expiration_time)
