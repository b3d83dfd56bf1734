"""Storing signed records on the peers nearest their keys, and counting who accepted each.

Why not `DHTNode.store`: it reports success as soon as any replica (this node included)
took the record, so a record that never left this node, or that p2pd dropped for size,
still reads as stored. Here each record is signed and checked by this node's own
checker, the nearest `num_replicas` other peers of all keys are found in one lookup, each
is asked to store its key's record, and the record is kept in local storage; the result
is the number of those peers that hold each record afterwards.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging

from hivemind.dht.node import DHTNode
from hivemind.dht.protocol import DHTProtocol
from hivemind.dht.storage import DictionaryDHTValue
from hivemind.dht.validation import DHTRecord
from hivemind.p2p import PeerID

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


async def store_records(node: DHTNode, records: list[Record]) -> list[StoreOutcome]:
    """Signs each record, stores it on the nearest other peers of its key, then locally; one outcome per record."""
    protocol = node.protocol
    signed = []
    for record in records:
        kid = key_id(record.key)
        raw = DHTRecord(kid.to_bytes(), DHTProtocol.serializer.dumps(record.subkey),
                        DHTProtocol.serializer.dumps(record.value), record.expiration)
        raw = dataclasses.replace(raw, value=protocol.record_validator.sign_value(raw))
        if not protocol.record_validator.validate(raw):
            raise ValueError(f"this node's own record under {record.key!r} fails its checks")
        signed.append((kid, record, raw))
    nearest = await node.find_nearest_nodes([kid for kid, _, _ in signed], k_nearest=node.num_replicas,
                                            exclude_self=True)
    outcomes = await asyncio.gather(*(_store_everywhere(protocol, list(nearest.get(kid, {}).values()), kid, record,
                                                        raw) for kid, record, raw in signed))
    if not protocol.client_mode:  # after the remote stores, so that no routing-table push pre-empts them
        for kid, record, raw in signed:
            protocol.storage.store_subkey(kid, record.subkey, raw.value, record.expiration)
    return list(outcomes)


async def _store_everywhere(protocol: DHTProtocol, peers: list[PeerID], kid, record: Record,
                            signed: DHTRecord) -> StoreOutcome:
    holds = await asyncio.gather(*(_store_at(protocol, peer, kid, record.subkey, signed) for peer in peers))
    logger.debug("record under %s: %d of %d peers hold it", record.key, sum(holds), len(peers))
    return StoreOutcome(accepted=sum(holds), asked=len(peers))


async def _store_at(protocol: DHTProtocol, peer: PeerID, kid, subkey: bytes, signed: DHTRecord) -> bool:
    """Whether `peer` holds the record after asking it to store it.

    A peer answers "no" both when it refuses a record and when it already has it (another
    peer may have passed it on while meeting it); only in the second case does it count.
    """
    answer = await protocol.call_store(peer, keys=[kid], values=[signed.value],
                                       expiration_time=[signed.expiration_time], subkeys=[subkey])
    if answer is None:
        return False
    if answer[0]:
        return True
    found = await protocol.call_find(peer, [kid])
    held = found.get(kid, (None, None))[0] if found else None
    if held is None or not isinstance(held.value, DictionaryDHTValue):
        return False
    item = held.value.get(subkey)
    return item is not None and (item.value, item.expiration_time) == (signed.value, signed.expiration_time)
