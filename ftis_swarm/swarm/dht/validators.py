"""The checks every peer runs on each record it is asked to store and each it reads.

`RecordChecker.examine` runs them cheapest first and names the first that fails:

1. envelope: the signed value is at most `max_record_bytes` (`oversize_record`); its
   expiry lies no further ahead than `ttl + max_clock_skew` (`far_expiry`: nobody can
   squat a key or keep a record alive for good); the subkey is `[owner:<rsa key>]/r<round>`,
   `[owner:<rsa key>]/member` or `[owner:<rsa key>]/have` (`not_pointer_form`).
2. key binding: the value decodes (strict msgpack, no extension types; else `bad_schema`),
   is of this version (`old_version` for an integer `v` below `RECORD_VERSION`), and names
   the run, window (and shard count) whose key, for this owner, is the one the record is
   stored under (`unbound_key`, see `keys`). A flood under random keys is refused here,
   before any RSA work.
3. hivemind's `RSASignatureValidator`: exactly one valid signature by the owner key over
   (key, subkey, value, expiry) (`bad_signature`). An overwrite of another peer's subkey,
   a forged signature and a replay with a changed expiry fail here.
4. content: the value is a `RoundPointer`, `MemberRecord` or `HaveRecord` (by the subkey's
   name; strict schema, no coercion, no extra fields, at most `MAX_HELD_ANNOUNCED` group
   ids; `bad_schema`) whose publisher (holder) is the owner's peer id and whose round is the
   subkey's (`owner_mismatch`). A have record is meant for gossip; one stored in the DHT lands
   under its holder's own pointer key, and costs that key's room alone.
5. the owner's identity puzzle for the record's run (`puzzle.PuzzleVerifier`): one scrypt
   per new (key, run, nonce), remembered; `bad_puzzle`, or `puzzle_busy` while new
   identities come faster than the verifier's rate (`NOT_A_FAULT`: nobody is blamed for it).

The checker remembers the records it accepted by their digest alone (a length-prefixed
sha256 of key, subkey, value and expiry: about 170 bytes an entry), so a record read again
at every poll costs one hash and a parse, never the RSA check or the puzzle again; the
parsed content is not kept (it would cost about 2.6 KB a record). Only acceptances are
remembered: a record that passes once passes later too (the one time-dependent check, an
expiry too far ahead, only gets easier as time passes). hivemind itself calls `validate`
(a bool) on the records of its own searches; the swarm's storage guard and reader call
`examine` for the reason.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections import OrderedDict
from typing import Optional, Union

import msgpack
from hivemind.dht.crypto import RSASignatureValidator
from hivemind.dht.protocol import DHTProtocol
from hivemind.dht.validation import DHTRecord, RecordValidatorBase
from hivemind.utils.crypto import RSAPrivateKey
from hivemind.utils.timed_storage import get_dht_time

from ftis_swarm.peers import faults
from ftis_swarm.swarm.identity import peer_id_from_public_key
from ftis_swarm.swarm.keys import MEMBER_SUBKEY_NAME, SHARD_COUNTS, key_id, member_key, member_shard, pointer_key
from ftis_swarm.swarm.puzzle import PuzzleVerifier
from ftis_swarm.swarm.records import (
    HAVE_SUBKEY_NAME,
    RECORD_VERSION,
    HaveRecord,
    MemberRecord,
    RoundPointer,
    parse_subkey,
    round_name,
)

logger = logging.getLogger(__name__)

MAX_SUBKEY_BYTES = 2048
Content = Union[RoundPointer, MemberRecord, HaveRecord]
_SCHEMAS = {MEMBER_SUBKEY_NAME: MemberRecord, HAVE_SUBKEY_NAME: HaveRecord}
"""The schema of a subkey's name; any other name is a round's (`r<n>`)."""
NOT_A_FAULT = frozenset({faults.PUZZLE_BUSY})
"""Refusals that say nothing about the sender: counted, never charged to a peer."""


def unpack_strict(data: bytes, *, max_bytes: int) -> object:
    """msgpack without ext types or pickle, and with every length bounded by `max_bytes`."""
    return msgpack.unpackb(
        data, raw=False, strict_map_key=True, max_bin_len=max_bytes, max_str_len=max_bytes,
        max_array_len=64, max_map_len=64, max_ext_len=0,
    )


@dataclasses.dataclass(frozen=True)
class Owner:
    """Who a record's subkey says owns it, and what it names (a round's `r<n>`, "member" or "have")."""

    public_key: bytes
    name: str
    peer_id: str


def owner_of(subkey_bytes: bytes) -> Optional[Owner]:
    """The owner of a serialized record subkey, or None when it is not of the swarm's two forms."""
    if len(subkey_bytes) > MAX_SUBKEY_BYTES or subkey_bytes in DHTProtocol.RESERVED_SUBKEYS:
        return None
    try:
        parsed = parse_subkey(unpack_strict(subkey_bytes, max_bytes=MAX_SUBKEY_BYTES))
        if parsed is None:
            return None
        return Owner(public_key=parsed[0], name=parsed[1], peer_id=peer_id_from_public_key(parsed[0]))
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        logger.debug("subkey is not a record subkey: %s", exc)
        return None


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The outcome of checking one record: `reason` is empty when it is accepted."""

    reason: str
    owner: Optional[Owner] = None
    content: Optional[Content] = None


class RecordChecker(RecordValidatorBase):
    """The swarm's whole record check (see the module docstring); `private_key` signs this peer's records."""

    def __init__(self, private_key: RSAPrivateKey, *, puzzles: PuzzleVerifier, max_record_bytes: int, ttl: float,
                 max_clock_skew: float, capacity: int = 1 << 14):
        self.puzzles = puzzles
        self.max_record_bytes = max_record_bytes
        self.max_lifetime = ttl + max_clock_skew
        self._rsa = RSASignatureValidator(private_key)
        self._accepted: OrderedDict[bytes, None] = OrderedDict()  # digests only: see the module docstring
        self._capacity = capacity

    def examine(self, record: DHTRecord) -> Verdict:
        """The verdict on `record`, with its owner and parsed content when it is accepted."""
        digest = record_digest(record)
        if digest in self._accepted:
            self._accepted.move_to_end(digest)
            verdict = self._check(record, proven=True)
            if not verdict.reason:
                return verdict
            del self._accepted[digest]  # cannot happen for one digest, one record; checked again in full
        verdict = self._check(record)
        if not verdict.reason:
            self._accepted[digest] = None
            if len(self._accepted) > self._capacity:
                self._accepted.popitem(last=False)
        return verdict

    def _check(self, record: DHTRecord, *, proven: bool = False) -> Verdict:
        """The checks in order; `proven`: this very record passed them all before (its digest is remembered),
        so its signature and its owner's puzzle are not checked again."""
        if len(record.value) > self.max_record_bytes:
            return Verdict(faults.OVERSIZE_RECORD)
        if record.expiration_time > get_dht_time() + self.max_lifetime:
            return Verdict(faults.FAR_EXPIRY)
        owner = owner_of(record.subkey)
        if owner is None:
            return Verdict(faults.NOT_POINTER_FORM)
        try:
            value = unpack_strict(self._rsa.strip_value(record), max_bytes=self.max_record_bytes)
        except (ValueError, TypeError, msgpack.UnpackException) as exc:
            logger.debug("refused a record that does not decode: %s", exc)
            return Verdict(faults.BAD_SCHEMA, owner)
        version = value.get("v") if isinstance(value, dict) else None
        if type(version) is int and version < RECORD_VERSION:
            return Verdict(faults.OLD_VERSION, owner)
        key = _bound_key(value, owner)  # before the signature: a record under a key not its own costs no RSA
        if key is None:
            return Verdict(faults.BAD_SCHEMA, owner)
        if key_id(key).to_bytes() != record.key:
            return Verdict(faults.UNBOUND_KEY, owner)
        if not proven and not self._rsa.validate(record):
            return Verdict(faults.BAD_SIGNATURE, owner)
        try:
            content = _SCHEMAS.get(owner.name, RoundPointer).parse_strict(value)
        except ValueError as exc:
            logger.debug("refused a record that is not a pointer, membership or have record: %s", exc)
            return Verdict(faults.BAD_SCHEMA, owner)
        signer = content.holder if isinstance(content, HaveRecord) else content.publisher
        if signer != owner.peer_id or (
                isinstance(content, RoundPointer) and round_name(content.round) != owner.name):
            return Verdict(faults.OWNER_MISMATCH, owner)
        reason = "" if proven else self.puzzles.check(owner.public_key, content.run_id, content.puzzle)  # the dearest
        if reason:
            return Verdict(reason, owner)
        return Verdict("", owner, content)

    def validate(self, record: DHTRecord) -> bool:
        verdict = self.examine(record)
        if verdict.reason:
            logger.debug("refused a record: %s", verdict.reason)
        return not verdict.reason

    def sign_value(self, record: DHTRecord) -> bytes:
        return self._rsa.sign_value(record)

    def strip_value(self, record: DHTRecord) -> bytes:
        return self._rsa.strip_value(record)

    @property
    def priority(self) -> int:
        return 10

    def merge_with(self, other: RecordValidatorBase) -> bool:
        return False


def _bound_key(value: object, owner: Owner) -> Optional[str]:
    """The only key a record with this (unchecked) value and owner may be stored under; None if it names none."""
    if not isinstance(value, dict):
        return None
    run_id, window = value.get("run_id"), value.get("window")
    if not isinstance(run_id, str) or type(window) is not int or window < 0:
        return None
    if owner.name != MEMBER_SUBKEY_NAME:
        return pointer_key(run_id, owner.peer_id, window)
    shards = value.get("shards")
    if type(shards) is not int or shards not in SHARD_COUNTS:
        return None
    return member_key(run_id, window, member_shard(owner.peer_id, shards))


def record_digest(record: DHTRecord) -> bytes:
    """A sha256 over (key, subkey, value, expiry), each length-prefixed: one record, one digest."""
    hasher = hashlib.sha256()
    for part in (record.key, record.subkey, record.value, repr(record.expiration_time).encode()):
        hasher.update(len(part).to_bytes(8, "big") + part)  # length-prefixed: no two records collide
    return hasher.digest()
