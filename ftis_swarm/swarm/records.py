"""What the DHT holds: small signed records, of two kinds, each bound to its owner and key.

- `RoundPointer`, under the publisher's own pointer key (`keys.pointer_key`), subkey
  `[owner:<ssh-rsa public key>]/r<round>`: one record for all the groups of one round of
  the publisher: its peer id (the peer id of the owner key), run id, tokenizer
  fingerprint, the window it was published in and its round number, then for each group
  the body's sha256 and size, the signed creation time, its completion tokens and the hint
  `[correct, samples]`: the publisher's own count of correct answers of its G (these let a
  receiver choose or drop a group without downloading it, and spend its budget on groups
  that can carry gradient; a hint the receiver's own verifier contradicts is a signed
  fault, `hint_contradicted`). The same signed record
  is stored in the DHT and gossiped on the run's topic (`gossip`). `RoundPointer.views`
  gives one `GroupPointer` per group: the per-group view the fetch wing works with,
  never itself stored or sent. It carries the publisher's puzzle nonce (what its identity
  cost, `puzzle`).
- `MemberRecord`, under a membership key (`keys.member_key`), subkey
  `[owner:<key>]/member`: "this peer published `groups` pointers in window w". One per
  peer and window, with its puzzle nonce; each publish re-signs it with a later expiry,
  which replaces it.

- `HaveRecord`, subkey `[owner:<key>]/have`, bound to the holder's own pointer key of a
  window like a round pointer, but gossiped only: "this peer holds these bodies" (at most
  `MAX_HELD_ANNOUNCED` group ids), with its puzzle nonce. A fetcher takes the holder as a
  second source of those bodies (`fetch.scheduler`); the body's hash in its publisher's
  signed pointer says whether the holder's bytes are right.

The owner marker makes hivemind's `RSASignatureValidator` accept a change to a subkey
only when signed by that key. Bodies never enter the DHT: a `get` returns all subkeys of
a key in one message under p2pd's 4 MiB cap.
"""

from __future__ import annotations

import hashlib
import re
from typing import Annotated, Optional

import pydantic
from pydantic import BeforeValidator, Field, StrictBool, StrictBytes, StrictFloat, StrictInt, StrictStr, field_validator

from ftis_swarm.config import WireConfig
from ftis_swarm.peers import faults
from ftis_swarm.swarm.puzzle import NONCE_PATTERN
from ftis_swarm.wire import Group, WireError, WireVersionError, decode_group

RECORD_VERSION = 7
"""Version of both record schemas (1 was the shared window key of the first layout; 2 had no round;
3 had no puzzle; 4 had one pointer per group, under subkeys of another form; 5 had no samples and no
hint per group; 6 did not say whether a round's bodies carry alignment data). A record of an older version is refused as `old_version`."""
MAX_BODY_BYTES = 4 << 20
"""p2pd's message cap; no wire group may be larger (WireConfig.max_bytes is at most this)."""
MAX_GROUPS_PER_WINDOW = 1 << 16
MAX_ROUND = 1 << 40
"""Rounds a pointer may name are below this (13 digits in the subkey): 35,000 years of a round a second,
and no 2^63 in a reader's arithmetic."""
MAX_GROUPS_PER_ROUND = 32
"""Groups one round pointer names: 32 sign into a value of 3.8 KB with hints and 100 kB bodies of 6,400 tokens
each, under `max_record_bytes` (4 KiB)."""
MAX_TOKENS_PER_GROUP = 1 << 24
MAX_SAMPLES_PER_GROUP = 4096
"""Completions one pointed group may have: `WireConfig.max_group_size`'s bound."""

_SUBKEY_RE = re.compile(rb"^\[owner:(ssh-rsa [A-Za-z0-9+/=]{64,1024})\]/(r[0-9]{1,13}|member|have)$")
HAVE_SUBKEY_NAME = "have"
MAX_HELD_ANNOUNCED = 64
"""Group ids one have record names: 64 sign into about 1.9 KB."""
_PEER_ID = r"^[1-9A-HJ-NP-Za-km-z]{32,128}$"
_RUN_ID = r"^[A-Za-z0-9._-]{1,64}$"


def _int(**bounds) -> type:
    return Annotated[StrictInt, Field(**bounds)]


def _str(**bounds) -> type:
    return Annotated[StrictStr, Field(**bounds)]


def _a_float(value: object) -> object:
    if type(value) is not float:  # strict mode still takes an int for a float; the schema does not
        raise ValueError(f"a float is required, got {type(value).__name__}")
    return value


def _float(**bounds) -> type:
    return Annotated[StrictFloat, BeforeValidator(_a_float), Field(allow_inf_nan=False, **bounds)]


def _bytes(**bounds) -> type:
    return Annotated[StrictBytes, Field(**bounds)]


class _StrictRecord(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True, strict=True)

    @classmethod
    def parse_strict(cls, obj: object):
        """Parses a deserialized value; raises ValueError unless it matches the schema exactly."""
        if not isinstance(obj, dict):
            raise ValueError(f"a record is a map, got {type(obj).__name__}")
        record = cls.model_validate(obj)  # pydantic.ValidationError is a ValueError
        if record.model_dump(exclude_unset=True) != obj:  # a field with a default may be left out, never converted
            raise ValueError("record needed a type conversion to match the schema")
        return record


class GroupPointer(_StrictRecord):
    """One group of a signed `RoundPointer` (`RoundPointer.views`): what the fetch wing schedules,
    fetches and checks a body against. Not itself a record: it is never stored or gossiped."""

    v: _int(ge=RECORD_VERSION, le=RECORD_VERSION)
    """Pointer schema version."""
    group_id: _str(pattern=r"^[0-9a-f]{32}$")
    """The group's content id (first 32 hex digits of the body's sha256); also in the subkey."""
    size: _int(ge=1, le=MAX_BODY_BYTES)
    """Bytes of the encoded body."""
    sha256: _str(pattern=r"^[0-9a-f]{64}$")
    """Hex sha256 of the body; a fetched body with another hash is dropped."""
    publisher: _str(pattern=_PEER_ID)
    """Base58 peer id that serves the body: the peer id of the subkey's owner key."""
    created_at: _float(ge=0)
    """The group's creation time (unix seconds); equal to the body's."""
    run_id: _str(pattern=_RUN_ID)
    """The body's run id."""
    tokenizer_fp: _str(min_length=1, max_length=64)
    """The body's tokenizer fingerprint."""
    window: _int(ge=0)
    """The window the pointer was published in: its key is `pointer_key(run_id, publisher, window)`."""
    round: _int(ge=0, lt=MAX_ROUND)
    """The publisher's round number in the run (0 when the publisher has no rounds); below `MAX_ROUND`."""
    round_groups: _int(ge=1, le=MAX_GROUPS_PER_ROUND)
    """How many groups the publisher publishes for that round: a reader knows when it has them all."""
    tokens: Optional[_int(ge=0, le=MAX_TOKENS_PER_GROUP)] = None
    """Completion tokens the publisher signed for the body (None: not said); a body with others is refused."""
    puzzle: _str(pattern=NONCE_PATTERN)
    """The publisher's puzzle nonce for the run (`puzzle`): what its identity cost."""
    samples: Optional[_int(ge=1, le=MAX_SAMPLES_PER_GROUP)] = None
    """Completions the publisher signed for the body (None: not said); a body with others is refused."""
    correct: Optional[_int(ge=0, le=MAX_SAMPLES_PER_GROUP)] = None
    """The hint: the publisher's own count of correct answers among them (None: no hint)."""
    aligned: StrictBool = False
    """The publisher signed that the body carries alignment data (`Group.aligned`, `RoundPointer.aligned`); a
    body without it is refused as `pointer_mismatch`."""

    @property
    def carries_signal(self) -> Optional[bool]:
        """Whether the hint says the group's rewards differ (some answers right, some wrong): only such a
        group has a non-zero advantage, in every loss mode; None without a hint."""
        if self.correct is None or self.samples is None:
            return None
        return 0 < self.correct < self.samples


# -- the round pointer: one signed record for all the groups of one round -------------------------

class PointedGroup(_StrictRecord):
    """One group of a `RoundPointer`: enough to choose it, fetch it and check its body."""

    sha256: _bytes(min_length=32, max_length=32)
    """sha256 of the body; its first 16 bytes, in hex, are the group id."""
    size: _int(ge=1, le=MAX_BODY_BYTES)
    """Bytes of the encoded body."""
    created_at: _float(ge=0)
    """The group's creation time (unix seconds); equal to the body's."""
    tokens: _int(ge=0, le=MAX_TOKENS_PER_GROUP)
    """The body's completion tokens, all completions together: what the group costs a reader's budget."""
    hint: Optional[Annotated[list[_int(ge=0, le=MAX_SAMPLES_PER_GROUP)], Field(min_length=2, max_length=2)]] = None
    """`[correct, samples]`: how many of the body's completions the publisher's own verifier scored correct,
    of how many (its G: a body with another count is refused as `pointer_mismatch`); None or absent: no hint.
    Signed with the pointer; a reader's verifier that contradicts it beyond `node.hints`' tolerance charges
    the publisher `hint_contradicted`. One short pair: 32 hinted groups still sign into one 4 KiB record."""

    @field_validator("hint")
    @classmethod
    def _correct_within(cls, hint: Optional[list[int]]) -> Optional[list[int]]:
        if hint is not None and not (hint[1] >= 1 and hint[0] <= hint[1]):
            raise ValueError("a hint counts at most its samples' correct answers, of at least one sample")
        return hint



class RoundPointer(_StrictRecord):
    """The signed DHT value that announces one round of a publisher's groups (one record, one store per replica)."""

    v: _int(ge=RECORD_VERSION, le=RECORD_VERSION)
    """Pointer schema version."""
    publisher: _str(pattern=_PEER_ID)
    """Base58 peer id that serves the bodies: the peer id of the subkey's owner key."""
    run_id: _str(pattern=_RUN_ID)
    """The bodies' run id."""
    tokenizer_fp: _str(min_length=1, max_length=64)
    """The bodies' tokenizer fingerprint."""
    window: _int(ge=0)
    """The window the pointer was published in: its key is `pointer_key(run_id, publisher, window)`."""
    round: _int(ge=0, lt=MAX_ROUND)
    """The publisher's round number in the run; also in the subkey (`round_name`)."""
    puzzle: _str(pattern=NONCE_PATTERN)
    """The publisher's puzzle nonce for the run (`puzzle`): what its identity cost."""
    groups: Annotated[list[PointedGroup], Field(min_length=1, max_length=MAX_GROUPS_PER_ROUND)]
    """The round's groups, each once."""
    aligned: StrictBool = False
    """Every body of the round carries alignment data (a tokenizer family, each completion's text and token
    bytes: docs/method.md, "Peers with another tokenizer"), so a node of another tokenizer may fetch them;
    a body without it is `pointer_mismatch`. False or absent: not every one does (an aligner leaves out a
    group it cannot describe, e.g. a completion cut inside a character), and a node of another tokenizer
    refuses the round's groups unfetched (`tokenizer`)."""

    @field_validator("groups")
    @classmethod
    def _distinct(cls, groups: list[PointedGroup]) -> list[PointedGroup]:
        if len({g.sha256 for g in groups}) != len(groups):
            raise ValueError("a round pointer names a group twice")
        return groups

    def views(self) -> list[GroupPointer]:
        """One `GroupPointer` per group, carrying the round's fields."""
        return [GroupPointer(v=self.v, group_id=g.sha256.hex()[:32], size=g.size, sha256=g.sha256.hex(),
                             publisher=self.publisher, created_at=g.created_at, run_id=self.run_id,
                             tokenizer_fp=self.tokenizer_fp, window=self.window, round=self.round,
                             round_groups=len(self.groups), tokens=g.tokens, puzzle=self.puzzle,
                             samples=g.hint[1] if g.hint else None, correct=g.hint[0] if g.hint else None,
                             aligned=self.aligned)
                for g in self.groups]


def round_name(round: int) -> str:
    """The subkey name of a round pointer: `r<round>`."""
    return "r" + str(round)  # a name, not a reason (the fault scan reads f-strings returned here as reasons)


def make_round_pointer(groups: list[tuple[Group, bytes]], *, publisher: str, run_id: str, tokenizer_fp: str,
                       window: int, round: int, puzzle: str,
                       correct: Optional[list[Optional[int]]] = None) -> RoundPointer:
    """The pointer this node stores for its round `round`: (group, encoded body) each; `puzzle` is this
    identity's nonce; `correct`, one hint per group (its own count of correct answers, None: no hint). The
    pointer says `aligned` when every group carries alignment data."""
    hints = list(correct) if correct is not None else [None] * len(groups)
    if len(hints) != len(groups):
        raise ValueError(f"{len(hints)} hints for {len(groups)} groups")
    return RoundPointer(
        v=RECORD_VERSION, publisher=publisher, run_id=run_id, tokenizer_fp=tokenizer_fp, window=window,
        round=round, puzzle=puzzle, aligned=all(group.aligned for group, _ in groups),
        groups=[PointedGroup(sha256=hashlib.sha256(body).digest(), size=len(body),
                             created_at=float(group.created_at), tokens=group.num_completion_tokens,
                             **({"hint": [hint, group.G]} if hint is not None else {}))
                for (group, body), hint in zip(groups, hints)],
    )

# -- end of the round pointer ---------------------------------------------------------------------


class MemberRecord(_StrictRecord):
    """The signed DHT value saying that a peer published pointers in a window (its membership)."""

    v: _int(ge=RECORD_VERSION, le=RECORD_VERSION)
    publisher: _str(pattern=_PEER_ID)
    """The peer id of the subkey's owner key."""
    run_id: _str(pattern=_RUN_ID)
    window: _int(ge=0)
    """The window: its pointers are under `pointer_key(run_id, publisher, window)`."""
    shards: _int(ge=1, le=16)
    """The run's membership shard count; the key is `member_key(run_id, window, member_shard(publisher, shards))`."""
    groups: _int(ge=1, le=MAX_GROUPS_PER_WINDOW)
    """Round pointers the publisher stored in the window so far: a reader reads its key again when this grows."""
    updated_at: _float(ge=0)
    """When it was signed; its expiry is `updated_at + ttl`, so each update replaces the last."""
    puzzle: _str(pattern=NONCE_PATTERN)
    """The publisher's puzzle nonce for the run (`puzzle`)."""



class HaveRecord(_StrictRecord):
    """The signed gossip message saying that a peer holds other peers' bodies and serves them (a holder)."""

    v: _int(ge=RECORD_VERSION, le=RECORD_VERSION)
    holder: _str(pattern=_PEER_ID)
    """The peer id of the subkey's owner key: the peer that serves the bodies."""
    run_id: _str(pattern=_RUN_ID)
    window: _int(ge=0)
    """The window it was signed in: its key is `pointer_key(run_id, holder, window)`."""
    created_at: _float(ge=0)
    """When it was signed (each announcement differs from the last)."""
    puzzle: _str(pattern=NONCE_PATTERN)
    """The holder's puzzle nonce for the run (`puzzle`)."""
    groups: Annotated[list[_bytes(min_length=16, max_length=16)],
                      Field(min_length=1, max_length=MAX_HELD_ANNOUNCED)]
    """The held groups' ids (the first 16 bytes of each body's sha256), each once."""


    @field_validator("groups")
    @classmethod
    def _distinct(cls, groups: list[bytes]) -> list[bytes]:
        if len(set(groups)) != len(groups):
            raise ValueError("a have record names a group twice")
        return groups

    def group_ids(self) -> list[str]:
        return [g.hex() for g in self.groups]


def make_subkey(public_key: bytes, name: str) -> bytes:
    """`[owner:<key>]/<name>` (a round's `r<n>`, or "member"): the owner marker protects the record."""
    return b"[owner:" + public_key + b"]/" + name.encode()


def parse_subkey(subkey: object) -> Optional[tuple[bytes, str]]:
    """(owner public key, `r<round>`, "member" or "have"), or None when `subkey` is of none of these forms."""
    if not isinstance(subkey, bytes):
        return None
    match = _SUBKEY_RE.match(subkey)
    if match is None:
        return None
    return match.group(1), match.group(2).decode()


def screen_pointer(pointer: GroupPointer, *, now: float, run_id: str, tokenizer_fp: str,
                   ttl: float, max_clock_skew: float, max_bytes: int, other_tokenizers: bool = False) -> str:
    """Why a pointer is not worth fetching ("" when it is); needs no download. `other_tokenizers`: a pointer of
    another tokenizer passes when it signs that its body carries alignment data (`check_body` holds it to that)."""
    if pointer.run_id != run_id:
        return faults.RUN_ID
    if pointer.tokenizer_fp != tokenizer_fp and not (other_tokenizers and pointer.aligned):
        return faults.POINTER_TOKENIZER
    if pointer.created_at > now + max_clock_skew:
        return faults.FUTURE
    if now - pointer.created_at > ttl:
        return faults.STALE
    if pointer.size > max_bytes:
        return faults.OVERSIZE
    return ""


def check_body(body: bytes, pointer: GroupPointer, *, vocab_size: Optional[int],
               limits: WireConfig, tokenizer_fp: Optional[str] = None) -> tuple[Optional[Group], str, str]:
    """(group, "", "") for a body that matches its signed pointer, else (None, reason, detail).

    The hash ties the body to the pointer, the pointer's signature ties it to the owner key,
    and the key's peer id must be the group's sender: a body is trusted no further than that.
    `tokenizer_fp` (the receiver's): a group of another tokenizer passes only with alignment data, and its ids
    are then not bounded by `vocab_size` (the receiver re-encodes its text).
    """
    if len(body) != pointer.size:
        return None, faults.SIZE_MISMATCH, f"{len(body)} bytes, pointer says {pointer.size}"
    if hashlib.sha256(body).hexdigest() != pointer.sha256:
        return None, faults.HASH_MISMATCH, "body sha256 differs from the signed pointer"
    try:
        group = decode_group(body, vocab_size=vocab_size, limits=limits, tokenizer_fp=tokenizer_fp)
    except WireVersionError as exc:  # an older (or newer) release: another protocol, not a fault
        return None, faults.OLD_VERSION, str(exc)
    except WireError as exc:
        return None, faults.BODY_MALFORMED, str(exc)
    if group.sender != pointer.publisher:
        return None, faults.SENDER_MISMATCH, f"sender {group.sender} but signed by {pointer.publisher}"
    if (group.run_id, group.tokenizer_fp, group.created_at) != (
        pointer.run_id, pointer.tokenizer_fp, pointer.created_at
    ):
        return None, faults.POINTER_MISMATCH, "run id, tokenizer or creation time differ from the pointer"
    if pointer.aligned and not group.aligned:  # a body with it under a pointer without: its round is mixed, no lie
        return None, faults.POINTER_MISMATCH, "no alignment data, pointer says every body of its round has it"
    if tokenizer_fp is not None and group.tokenizer_fp != tokenizer_fp and not group.aligned:
        return None, faults.POINTER_TOKENIZER, "another tokenizer's group without alignment data"
    if pointer.tokens is not None and group.num_completion_tokens != pointer.tokens:
        return None, faults.POINTER_MISMATCH, f"{group.num_completion_tokens} completion tokens, pointer says {pointer.tokens}"
    if pointer.samples is not None and group.G != pointer.samples:
        return None, faults.POINTER_MISMATCH, f"{group.G} completions, pointer says {pointer.samples}"
    return group, "", ""
