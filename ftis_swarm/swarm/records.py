"""What the DHT holds: small signed pointers to group bodies, one subkey per group.

Key scheme (no coordinator needed): `ftis/<run_id>/groups/<w>`, where
`w = floor(publish_time / window)`. Every peer knows which keys to read from the clock
alone. Subkey: `[owner:<ssh-rsa public key>]/<group id>` as msgpack bytes; hivemind's
`RSASignatureValidator` then accepts a change to that subkey only when it is signed by
that key, so nobody can overwrite or forge another peer's pointer.

Value (`GroupPointer`, a msgpack map, strict pydantic.v1 schema): the group id, the body's
size and sha256, the publisher's peer id (which must be the peer id of the owner key), the
signed creation time, the run id and the tokenizer fingerprint. The last three let a
receiver drop a group without downloading it. The body itself never enters the DHT: a
`get` returns all subkeys of a key in one message under p2pd's 4 MiB cap, so whole groups
(about 50 KB each, 96 per round at the paper's batch) would not fit.
"""

from __future__ import annotations

import hashlib
import math
import re
from typing import Optional

import pydantic.v1 as pydantic

from ftis_swarm.config import WireConfig
from ftis_swarm.wire import Group, WireError, decode_group

POINTER_VERSION = 1
MAX_BODY_BYTES = 4 << 20
"""p2pd's message cap; no wire group may be larger (WireConfig.max_bytes is at most this)."""

_SUBKEY_RE = re.compile(rb"^\[owner:(ssh-rsa [A-Za-z0-9+/=]{64,1024})\]/([0-9a-f]{32})$")


class GroupPointer(pydantic.BaseModel):
    """The signed DHT value that announces one group; every field is checked without coercion."""

    v: pydantic.conint(strict=True, ge=POINTER_VERSION, le=POINTER_VERSION)
    """Pointer schema version."""
    group_id: pydantic.constr(strict=True, regex=r"^[0-9a-f]{32}$")
    """The group's content id (first 32 hex digits of the body's sha256); also in the subkey."""
    size: pydantic.conint(strict=True, ge=1, le=MAX_BODY_BYTES)
    """Bytes of the encoded body."""
    sha256: pydantic.constr(strict=True, regex=r"^[0-9a-f]{64}$")
    """Hex sha256 of the body; a fetched body with another hash is dropped."""
    publisher: pydantic.constr(strict=True, regex=r"^[1-9A-HJ-NP-Za-km-z]{32,128}$")
    """Base58 peer id that serves the body: the peer id of the subkey's owner key."""
    created_at: pydantic.confloat(strict=True, ge=0)
    """The group's creation time (unix seconds); equal to the body's."""
    run_id: pydantic.constr(strict=True, regex=r"^[A-Za-z0-9._-]{1,64}$")
    """The body's run id."""
    tokenizer_fp: pydantic.constr(strict=True, min_length=1, max_length=64)
    """The body's tokenizer fingerprint."""

    class Config:
        extra = pydantic.Extra.forbid
        allow_mutation = False

    @pydantic.validator("created_at")
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("created_at must be finite")
        return value

    @classmethod
    def parse_strict(cls, obj: object) -> "GroupPointer":
        """Parses a deserialized value; raises ValueError unless it matches the schema exactly."""
        if not isinstance(obj, dict):
            raise ValueError(f"a pointer is a map, got {type(obj).__name__}")
        pointer = cls.parse_obj(obj)  # pydantic.ValidationError is a ValueError
        if pointer.dict() != obj:
            raise ValueError("pointer needed a type conversion to match the schema")
        return pointer


def window_key(run_id: str, timestamp: float, window: float) -> str:
    """The DHT key of the time window that holds pointers published at `timestamp`."""
    return f"ftis/{run_id}/groups/{math.floor(timestamp / window)}"


def window_keys(run_id: str, start: float, end: float, window: float) -> list[str]:
    """Keys of every window that overlaps [start, end], oldest first."""
    first, last = math.floor(start / window), math.floor(end / window)
    return [f"ftis/{run_id}/groups/{w}" for w in range(first, last + 1)]


def make_subkey(public_key: bytes, group_id: str) -> bytes:
    """`[owner:<key>]/<group id>`: the owner marker makes the record protected by that key."""
    return b"[owner:" + public_key + b"]/" + group_id.encode()


def parse_subkey(subkey: object) -> Optional[tuple[bytes, str]]:
    """(owner public key, group id), or None when `subkey` is not of the pointer form."""
    if not isinstance(subkey, bytes):
        return None
    match = _SUBKEY_RE.match(subkey)
    if match is None:
        return None
    return match.group(1), match.group(2).decode()


def make_pointer(group: Group, body: bytes, group_id: str) -> GroupPointer:
    """The pointer this node stores for one of its own encoded groups."""
    return GroupPointer(
        v=POINTER_VERSION,
        group_id=group_id,
        size=len(body),
        sha256=hashlib.sha256(body).hexdigest(),
        publisher=group.sender,
        created_at=float(group.created_at),
        run_id=group.run_id,
        tokenizer_fp=group.tokenizer_fp,
    )


def screen_pointer(pointer: GroupPointer, *, now: float, run_id: str, tokenizer_fp: str,
                   ttl: float, max_clock_skew: float, max_bytes: int) -> str:
    """Why a pointer is not worth fetching ("" when it is); needs no download."""
    if pointer.run_id != run_id:
        return "run_id"
    if pointer.tokenizer_fp != tokenizer_fp:
        return "tokenizer"
    if pointer.created_at > now + max_clock_skew:
        return "future"
    if now - pointer.created_at > ttl:
        return "stale"
    if pointer.size > max_bytes:
        return "oversize"
    return ""


def check_body(body: bytes, pointer: GroupPointer, *, vocab_size: Optional[int],
               limits: WireConfig) -> tuple[Optional[Group], str, str]:
    """(group, "", "") for a body that matches its signed pointer, else (None, reason, detail).

    The hash ties the body to the pointer, the pointer's signature ties it to the owner key,
    and the key's peer id must be the group's sender: a body is trusted no further than that.
    """
    if len(body) != pointer.size:
        return None, "size_mismatch", f"{len(body)} bytes, pointer says {pointer.size}"
    if hashlib.sha256(body).hexdigest() != pointer.sha256:
        return None, "hash_mismatch", "body sha256 differs from the signed pointer"
    try:
        group = decode_group(body, vocab_size=vocab_size, limits=limits)
    except WireError as exc:
        return None, "malformed", str(exc)
    if group.sender != pointer.publisher:
        return None, "sender_mismatch", f"sender {group.sender} but signed by {pointer.publisher}"
    if (group.run_id, group.tokenizer_fp, group.created_at) != (
        pointer.run_id, pointer.tokenizer_fp, pointer.created_at
    ):
        return None, "pointer_mismatch", "run id, tokenizer or creation time differ from the pointer"
    return group, "", ""
