"""The record validators every peer runs, on each record it is asked to store and each it reads.

hivemind applies them highest priority first, each on the value the previous one stripped:

1. `EnvelopeValidator` (priority 20, cheap checks before any signature work): the record
   sits under a subkey of the pointer form `[owner:<key>]/<group id>` whose key is RSA;
   the signed value is at most `max_record_bytes`; its expiry lies no further ahead than
   `ttl + max_clock_skew` (nobody can squat a key, or keep a record alive for good).
2. hivemind's `RSASignatureValidator` (priority 10): the value carries exactly one valid
   signature by the owner key over (key, subkey, value, expiry). An overwrite of another
   peer's subkey, a forged signature and a replay with a changed expiry all fail here.
3. `PointerValidator` (priority 0): the stripped value is a `GroupPointer` (strict
   pydantic.v1 schema, no coercion, no extra fields), its group id is the subkey's, its
   sha256 starts with that id, and its publisher is the peer id of the owner key.

`RememberingValidator` runs the chain and remembers what it accepted, so that the pointers
read again at every poll are not verified again.

Everything in this DHT is a pointer: a regular (subkey-less) value, or any record of
another shape, is refused. hivemind refuses a whole dictionary a peer returns when one of
its records fails, so a peer that serves forged records is simply not read from.
"""

from __future__ import annotations

import hashlib
import logging
from collections import OrderedDict
from typing import Optional

import msgpack
from hivemind.dht.crypto import RSASignatureValidator
from hivemind.dht.protocol import DHTProtocol
from hivemind.dht.validation import CompositeValidator, DHTRecord, RecordValidatorBase
from hivemind.utils.crypto import RSAPrivateKey
from hivemind.utils.timed_storage import get_dht_time

from ftis_swarm.swarm.identity import peer_id_from_public_key
from ftis_swarm.swarm.records import GroupPointer, parse_subkey

logger = logging.getLogger(__name__)

_MAX_SUBKEY_BYTES = 2048


def _unpack(data: bytes, *, max_bytes: int) -> object:
    """msgpack without ext types or pickle, and with every length bounded by the record size."""
    return msgpack.unpackb(
        data, raw=False, strict_map_key=True, max_bin_len=max_bytes, max_str_len=max_bytes,
        max_array_len=64, max_map_len=64, max_ext_len=0,
    )


def owner_of(subkey_bytes: bytes) -> Optional[tuple[bytes, str, str]]:
    """(owner public key, group id, owner peer id) of a serialized pointer subkey, else None."""
    if len(subkey_bytes) > _MAX_SUBKEY_BYTES or subkey_bytes in DHTProtocol.RESERVED_SUBKEYS:
        return None
    try:
        parsed = parse_subkey(_unpack(subkey_bytes, max_bytes=_MAX_SUBKEY_BYTES))
        if parsed is None:
            return None
        public_key, group_id = parsed
        return public_key, group_id, peer_id_from_public_key(public_key)
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        logger.debug("subkey is not a pointer subkey: %s", exc)
        return None


class EnvelopeValidator(RecordValidatorBase):
    """Shape of the subkey, size of the signed value and the farthest expiry allowed."""

    def __init__(self, *, max_record_bytes: int, ttl: float, max_clock_skew: float):
        self.max_record_bytes = max_record_bytes
        self.max_lifetime = ttl + max_clock_skew

    def validate(self, record: DHTRecord) -> bool:
        if len(record.value) > self.max_record_bytes:
            logger.debug("refused a record of %d bytes (limit %d)", len(record.value), self.max_record_bytes)
            return False
        if record.expiration_time > get_dht_time() + self.max_lifetime:
            logger.debug("refused a record expiring %.0f s ahead", record.expiration_time - get_dht_time())
            return False
        if owner_of(record.subkey) is None:
            logger.debug("refused a record whose subkey is not [owner:<rsa key>]/<group id>")
            return False
        return True

    @property
    def priority(self) -> int:
        return 20


class PointerValidator(RecordValidatorBase):
    """The stripped value is a `GroupPointer` bound to its subkey and to its owner's peer id."""

    def __init__(self, *, max_record_bytes: int):
        self.max_record_bytes = max_record_bytes

    def validate(self, record: DHTRecord) -> bool:
        owner = owner_of(record.subkey)
        if owner is None:
            return False
        _, group_id, owner_peer_id = owner
        try:
            pointer = GroupPointer.parse_strict(_unpack(record.value, max_bytes=self.max_record_bytes))
        except (ValueError, TypeError, msgpack.UnpackException) as exc:
            logger.debug("refused a record that is not a group pointer: %s", exc)
            return False
        if pointer.group_id != group_id or not pointer.sha256.startswith(group_id):
            logger.debug("refused a pointer whose group id differs from its subkey or hash")
            return False
        if pointer.publisher != owner_peer_id:
            logger.debug("refused a pointer naming %s but owned by %s", pointer.publisher, owner_peer_id)
            return False
        return True

    @property
    def priority(self) -> int:
        return 0


class RememberingValidator(CompositeValidator):
    """A validator chain that remembers the records it accepted (the last `capacity` of them).

    Every poll reads the same pointers again, from every peer that holds them; without a
    memory each read would verify each RSA signature again. Remembering only acceptances
    is safe: a record that passes once passes later too (the one time-dependent check, an
    expiry too far ahead, only gets easier as time passes).
    """

    def __init__(self, validators: list[RecordValidatorBase], *, capacity: int = 1 << 16):
        super().__init__(validators)
        self._accepted: OrderedDict[bytes, None] = OrderedDict()
        self._capacity = capacity

    def validate(self, record: DHTRecord) -> bool:
        hasher = hashlib.sha256()
        for part in (record.key, record.subkey, record.value, repr(record.expiration_time).encode()):
            hasher.update(len(part).to_bytes(8, "big") + part)  # length-prefixed: no two records collide
        digest = hasher.digest()
        if digest in self._accepted:
            self._accepted.move_to_end(digest)
            return True
        if not super().validate(record):
            return False
        self._accepted[digest] = None
        if len(self._accepted) > self._capacity:
            self._accepted.popitem(last=False)
        return True


def make_record_validator(private_key: RSAPrivateKey, *, max_record_bytes: int, ttl: float,
                          max_clock_skew: float) -> RememberingValidator:
    """The validator chain of one peer; `private_key` signs this peer's own records."""
    return RememberingValidator([
        EnvelopeValidator(max_record_bytes=max_record_bytes, ttl=ttl, max_clock_skew=max_clock_skew),
        RSASignatureValidator(private_key),
        PointerValidator(max_record_bytes=max_record_bytes),
    ])
