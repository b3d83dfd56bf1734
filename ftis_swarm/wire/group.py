"""The rollout group as it travels: one prompt, G completions from one policy version, and
its one encoding.

Token ids are uint32 and log-probs float32 numpy arrays (no torch here: the wire layer is
imported by peers that may not train). A group is immutable once built. Encoding is
canonical (fixed key order, fixed types; proto/group_v2.md), so one group has exactly one
encoding, and its id, the hash of those bytes, is a hash of the content. Reading bytes
back is `ftis_swarm.wire.codec.decode_group`, which imports this module (never the reverse).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Sequence

import msgpack
import numpy as np

WIRE_VERSION = 2
MAX_TOKEN_BYTES = 255
"""The longest token, in bytes, a group with alignment data may carry (`tb` is uint8)."""
_U32 = np.dtype("<u4")
_F32 = np.dtype("<f4")


@dataclass(frozen=True, eq=False)
class Group:
    """A vertical group (docs/method.md, Wire). Field meanings: proto/group_v2.md."""

    run_id: str
    sender: str
    model_id: str
    policy_version: int
    created_at: float
    tokenizer_fp: str
    task_id: str
    item_id: str
    prompt_ids: np.ndarray
    temperature: float
    completion_ids: tuple[np.ndarray, ...]
    logp_gen: tuple[np.ndarray, ...]
    task_digest: str = ""
    """The sender's task digest (`Task.digest`, docs/tasks.md): a receiver whose task differs refuses the group."""
    tokenizer_family: str = ""
    """The sender's tokenizer family (e.g. its model family's name), with the alignment data below; "" without."""
    texts: tuple[bytes, ...] = ()
    """Each completion's UTF-8 text (a stop token contributes nothing), for learners with another tokenizer; ()
    without alignment data (docs/method.md, "Peers with another tokenizer")."""
    token_bytes: tuple[np.ndarray, ...] = ()
    """Each completion token's byte length in its text (uint8; 0 only for a final stop token); () without."""
    version: int = WIRE_VERSION
    _id: list = field(default_factory=list, init=False, repr=False, compare=False)

    @classmethod
    def build(
        cls,
        *,
        run_id: str,
        sender: str,
        model_id: str,
        policy_version: int,
        created_at: float,
        tokenizer_fp: str,
        task_id: str,
        item_id: str,
        prompt_ids: Sequence[int] | np.ndarray,
        temperature: float,
        completion_ids: Sequence[Sequence[int] | np.ndarray],
        logp_gen: Sequence[Sequence[float] | np.ndarray],
        task_digest: str = "",
        tokenizer_family: str = "",
        texts: Sequence[bytes] = (),
        token_bytes: Sequence[Sequence[int] | np.ndarray] = (),
    ) -> "Group":
        """Builds a group from lists or arrays, converting to the wire dtypes."""
        return cls(
            run_id=run_id,
            sender=sender,
            model_id=model_id,
            policy_version=int(policy_version),
            created_at=float(created_at),
            tokenizer_fp=tokenizer_fp,
            task_id=task_id,
            item_id=item_id,
            prompt_ids=np.asarray(prompt_ids, dtype=np.uint32),
            temperature=float(temperature),
            completion_ids=tuple(np.asarray(c, dtype=np.uint32) for c in completion_ids),
            logp_gen=tuple(np.asarray(lp, dtype=np.float32) for lp in logp_gen),
            task_digest=task_digest,
            tokenizer_family=tokenizer_family,
            texts=tuple(bytes(t) for t in texts),
            token_bytes=tuple(_token_byte_array(b) for b in token_bytes),
        )

    @property
    def aligned(self) -> bool:
        """Whether the group carries alignment data (a tokenizer family, each completion's text and token bytes)."""
        return bool(self.tokenizer_family)

    @property
    def G(self) -> int:
        return len(self.completion_ids)

    @property
    def completion_lengths(self) -> list[int]:
        return [int(c.shape[0]) for c in self.completion_ids]

    @property
    def num_completion_tokens(self) -> int:
        return sum(self.completion_lengths)

    @property
    def group_id(self) -> str:
        """Hex sha256 of the canonical encoding (first 32 hex digits); cached after the first call."""
        if not self._id:
            self._id.append(content_id(encode_group(self)))
        return self._id[0]


class WireError(ValueError):
    """A buffer that is not a valid group; the message says why in one sentence."""


class WireVersionError(WireError):
    """A group of another wire version (an older or newer release): another protocol, not a fault."""


def _token_byte_array(lengths: Sequence[int] | np.ndarray) -> np.ndarray:
    arr = np.asarray(lengths, dtype=np.int64)
    if arr.size and (arr.min() < 0 or arr.max() > MAX_TOKEN_BYTES):
        raise WireError(f"a token's byte length must be 0 to {MAX_TOKEN_BYTES}")
    return arr.astype(np.uint8)


def _alignment_bytes(group: Group) -> np.ndarray:
    """The `tb` field: every completion token's byte length, uint8; empty without alignment data."""
    if not group.tokenizer_family:
        if group.texts or group.token_bytes:
            raise WireError("texts and token byte lengths travel only with a tokenizer family")
        return np.zeros(0, np.uint8)
    if len(group.texts) != group.G or len(group.token_bytes) != group.G:
        raise WireError(f"{group.G} completions but {len(group.texts)} texts and {len(group.token_bytes)} byte-length arrays")
    for c, tb, text in zip(group.completion_ids, group.token_bytes, group.texts):
        if tb.shape != c.shape or int(tb.astype(np.int64).sum()) != len(text):
            raise WireError("each completion needs one byte length per token, summing to its text's bytes")
    return np.concatenate(group.token_bytes).astype(np.uint8)


def content_id(data: bytes) -> str:
    """The group id: first 32 hex digits of sha256 over the canonical encoding."""
    return hashlib.sha256(data).hexdigest()[:32]


def encode_group(group: Group) -> bytes:
    """Canonical msgpack bytes of `group` (little-endian uint32 ids, float32 log-probs)."""
    if len(group.completion_ids) != len(group.logp_gen):
        raise WireError(f"{len(group.completion_ids)} completions but {len(group.logp_gen)} log-prob arrays")
    lengths = np.fromiter((c.shape[0] for c in group.completion_ids), dtype=_U32, count=group.G)
    for c, lp in zip(group.completion_ids, group.logp_gen):
        if c.shape != lp.shape:
            raise WireError(f"a completion has {c.shape[0]} tokens but {lp.shape[0]} log-probs")
    tok = np.concatenate([np.asarray(c, dtype=_U32) for c in group.completion_ids]) if group.G else np.zeros(0, _U32)
    lp = np.concatenate([np.asarray(x, dtype=_F32) for x in group.logp_gen]) if group.G else np.zeros(0, _F32)
    record = {
        "v": group.version,
        "run": group.run_id,
        "snd": group.sender,
        "mdl": group.model_id,
        "pv": group.policy_version,
        "ts": float(group.created_at),
        "tfp": group.tokenizer_fp,
        "task": group.task_id,
        "tdg": group.task_digest,
        "item": group.item_id,
        "T": float(group.temperature),
        "p": memoryview(np.ascontiguousarray(group.prompt_ids, dtype=_U32)).cast("B"),
        "n": memoryview(lengths).cast("B"),
        "tok": memoryview(tok).cast("B"),
        "lp": memoryview(lp).cast("B"),
        "fam": group.tokenizer_family,
        "txt": b"".join(group.texts),
        "tb": memoryview(_alignment_bytes(group)).cast("B"),
    }
    return msgpack.packb(record, use_bin_type=True, use_single_float=False, strict_types=False)
