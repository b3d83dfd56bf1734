"""Storing one signed pointer on the peers nearest its key, and counting who accepted it.

Why not `DHTNode.store`: it reports success as soon as any replica (this node included)
took the record, so a record that never left this node, or that p2pd dropped for size,
still reads as stored. Here the record is signed and checked by this node's own
validators, sent to the `num_replicas` nearest other peers, and kept in local storage;
the result is the number of those peers that hold it afterwards.
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

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class StoreOutcome:
    """How many of the peers asked to hold a record accepted it."""

    accepted: int
    asked: int


async def store_pointer(node: DHTNode, *, key: str, subkey: bytes, value: dict, expiration: float) -> StoreOutcome:
    """Signs (key, subkey, value, expiration), stores it on the nearest other peers, then locally."""
    protocol = node.protocol
    key_id = DHTID.generate(source=key)
    record = DHTRecord(key_id.to_bytes(), DHTProtocol.serializer.dumps(subkey), DHTProtocol.serializer.dumps(value),
                       expiration)
    signed = dataclasses.replace(record, value=protocol.record_validator.sign_value(record))
    if not protocol.record_validator.validate(signed):
        raise ValueError(f"this node's own pointer under {key!r} fails its validators")

    nearest = await node.find_nearest_nodes([key_id], k_nearest=node.num_replicas, exclude_self=True)
    peers = list(nearest.get(key_id, {}).values())
    holds = await asyncio.gather(*(_store_at(protocol, peer, key_id, subkey, signed) for peer in peers))
    if not protocol.client_mode:  # after the remote stores, so that no routing-table push pre-empts them
        protocol.storage.store_subkey(key_id, subkey, signed.value, expiration)
    logger.debug("pointer under %s: %d of %d peers hold it", key, sum(holds), len(peers))
    return StoreOutcome(accepted=sum(holds), asked=len(peers))


async def _store_at(protocol: DHTProtocol, peer: PeerID, key_id: DHTID, subkey: bytes, signed: DHTRecord) -> bool:
    """Whether `peer` holds the record after asking it to store it.

    A peer answers "no" both when it refuses a record and when it already has it (another
    peer may have passed it on while meeting it); only in the second case does it count.
    """
    answer = await protocol.call_store(peer, keys=[key_id], values=[signed.value],
                                       expiration_time=[signed.expiration_time], subkeys=[subkey])
    if answer is None:
        return False
    if answer[0]:
        return True
    found = await protocol.call_find(peer, [key_id])
    held = found.get(key_id, (None, None))[0] if found else None
    if held is None or not isinstance(held.value, DictionaryDHTValue):
        return False
    item = held.value.get(subkey)
    return item is not None and (item.value, item.expiration_time) == (signed.value, signed.expiration_time)
