"""Wire format v2, read: `decode_group` (proto/group_v2.md is the specification).

The decoder is the only gate between a peer's bytes and this node: every way a buffer can
be wrong raises `WireError`, and nothing else. msgpack runs with limits on every length, no
ext types and no pickle; arrays are bin fields read as numpy views without a copy. A buffer
is accepted only when it is the canonical encoding (`ftis_swarm.wire.group.encode_group`)
of what it holds.
"""

from __future__ import annotations

import math

import msgpack
import numpy as np

from ftis_swarm.config import T_MIN, WireConfig
from ftis_swarm.wire.group import WIRE_VERSION, Group, WireError, WireVersionError, content_id

_U32 = np.dtype("<u4")
_F32 = np.dtype("<f4")

# key -> (attribute, max length). The order of `_KEYS` is the canonical order (`encode_group`).
_STR_FIELDS = {
    "run": ("run_id", 64),
    "snd": ("sender", 128),
    "mdl": ("model_id", 256),
    "tfp": ("tokenizer_fp", 64),
    "task": ("task_id", 64),
    "item": ("item_id", 256),
}
_KEYS = ("v", "run", "snd", "mdl", "pv", "ts", "tfp", "task", "tdg", "item", "T", "p", "n", "tok", "lp",
         "fam", "txt", "tb")
FAMILY_CHARS = 64
"""Most characters of `fam`, the tokenizer family (empty: the group carries no alignment data)."""
TASK_DIGEST_CHARS = 64
"""Most characters of `tdg`, the task digest (empty: the builder named none; it is then not checked)."""
_MAX_POLICY_VERSION = 2**63 - 1
T_MAX = 10.0
"""Highest temperature a group may carry; the lowest is `ftis_swarm.config.T_MIN` (0.05)."""


def decode_group(data: bytes | bytearray | memoryview, *, vocab_size: int | None = None,
                 limits: WireConfig | None = None, tokenizer_fp: str | None = None) -> Group:
    """Parses and validates one encoded group; raises `WireError` for any fault.

    `vocab_size`, when given, bounds every token id (the receiver's vocabulary), except, when the receiver's
    `tokenizer_fp` is given, in a group of another tokenizer (with alignment data the receiver re-encodes its text,
    without it the group is refused as another tokenizer's, no one's fault: either way its ids are never
    embedded here).
    """
    limits = limits or WireConfig()
    data = bytes(data)
    if len(data) > limits.max_bytes:
        raise WireError(f"group is {len(data)} bytes, over the limit of {limits.max_bytes}")
    rec = _unpack(data, limits)
    version = rec.get("v")
    if type(version) is int and version != WIRE_VERSION and 0 < version < 2**16:
        raise WireVersionError(f"wire version {version} (another release); this node reads version {WIRE_VERSION}")
    if version != WIRE_VERSION or type(version) is not int:
        raise WireError(f"unknown wire version {version!r}; this node reads version {WIRE_VERSION}")
    if tuple(rec) != _KEYS:
        raise WireError(f"fields {sorted(rec)} are not the v{WIRE_VERSION} fields in canonical order {list(_KEYS)}")
    strings = {attr: _string(rec, key, cap) for key, (attr, cap) in _STR_FIELDS.items()}
    task_digest = rec["tdg"]
    if type(task_digest) is not str or len(task_digest) > TASK_DIGEST_CHARS:
        raise WireError(f"field 'tdg' must be a string of at most {TASK_DIGEST_CHARS} characters")
    pv = rec["pv"]
    if type(pv) is not int or not 0 <= pv <= _MAX_POLICY_VERSION:
        raise WireError(f"policy version {pv!r} is not a non-negative integer")
    ts, temperature = rec["ts"], rec["T"]
    if type(ts) is not float or not math.isfinite(ts) or ts < 0:
        raise WireError(f"creation time {ts!r} is not a finite non-negative float")
    if type(temperature) is not float or not (T_MIN <= temperature <= T_MAX):
        raise WireError(f"temperature {temperature!r} is not a float in [{T_MIN}, {T_MAX}]")

    prompt = _array(rec, "p", _U32)
    lengths = _array(rec, "n", _U32)
    tok = _array(rec, "tok", _U32)
    lp = _array(rec, "lp", _F32)
    _check_sizes(prompt, lengths, tok, lp, limits)
    texts, token_bytes = _alignment(rec, lengths)
    foreign = tokenizer_fp is not None and strings["tokenizer_fp"] != tokenizer_fp  # re-encoded or refused, never embedded
    if vocab_size is not None and not foreign:
        for name, ids in (("prompt", prompt), ("completion", tok)):
            if ids.size and int(ids.max()) >= vocab_size:
                raise WireError(f"a {name} token id {int(ids.max())} is outside the vocabulary of {vocab_size}")
    if lp.size and not (np.isfinite(lp).all() and (lp <= 0).all()):
        raise WireError("log-probs must be finite and <= 0")

    # Canonical: packing what was read with the encoder's settings must give the same bytes
    # (the decoded record has the encoder's key order and bin fields, so no arrays are joined).
    if msgpack.packb(rec, use_bin_type=True, use_single_float=False) != data:
        raise WireError("buffer is not the canonical encoding of its content")
    ends = np.cumsum(lengths, dtype=np.int64).tolist()
    starts = [0] + ends[:-1]
    group = Group(
        **strings,
        policy_version=pv,
        created_at=ts,
        prompt_ids=prompt,
        temperature=temperature,
        completion_ids=tuple(tok[a:b] for a, b in zip(starts, ends)),
        logp_gen=tuple(lp[a:b] for a, b in zip(starts, ends)),
        task_digest=task_digest,
        tokenizer_family=rec["fam"],
        texts=texts,
        token_bytes=token_bytes,
        version=version,
    )
    group._id.append(content_id(data))
    return group


def _alignment(rec: dict, lengths: np.ndarray) -> tuple[tuple[bytes, ...], tuple[np.ndarray, ...]]:
    """The `fam`, `txt` and `tb` fields checked (docs/method.md, "Peers with another tokenizer"): each
    completion's text and token byte lengths, or `((), ())` when the group carries no alignment data."""
    family, txt, tb = rec["fam"], rec["txt"], rec["tb"]
    if type(family) is not str or len(family) > FAMILY_CHARS:
        raise WireError(f"field 'fam' must be a string of at most {FAMILY_CHARS} characters")
    if type(txt) is not bytes or type(tb) is not bytes:
        raise WireError("fields 'txt' and 'tb' must be binary fields")
    if not family:
        if txt or tb:
            raise WireError("a group without a tokenizer family carries no text or token byte lengths")
        return (), ()
    sizes = np.frombuffer(tb, dtype=np.uint8)
    total = int(lengths.astype(np.int64).sum())
    if sizes.size != total:
        raise WireError(f"{sizes.size} token byte lengths for {total} completion tokens")
    if int(sizes.astype(np.int64).sum()) != len(txt):
        raise WireError(f"token byte lengths sum to {int(sizes.astype(np.int64).sum())} but the text has {len(txt)} bytes")
    ends = np.cumsum(lengths, dtype=np.int64)
    if np.count_nonzero(sizes == 0) and np.any(np.delete(sizes, ends - 1) == 0):
        raise WireError("a token other than a completion's last (its stop) has no bytes")
    per = tuple(sizes[a:b] for a, b in zip([0, *ends[:-1].tolist()], ends.tolist()))
    cuts = np.cumsum([int(p.astype(np.int64).sum()) for p in per]).tolist()
    texts = tuple(txt[a:b] for a, b in zip([0, *cuts[:-1]], cuts))
    for i, text in enumerate(texts):
        try:
            text.decode("utf-8", errors="strict")
        except UnicodeDecodeError:
            raise WireError(f"completion {i}'s text is not valid UTF-8") from None
    return texts, per


def _unpack(data: bytes, limits: WireConfig) -> dict:
    try:
        rec = msgpack.unpackb(
            data,
            raw=False,
            use_list=False,
            strict_map_key=True,
            max_str_len=1024,
            max_bin_len=limits.max_bytes,
            max_array_len=0,
            max_map_len=32,
            max_ext_len=0,
        )
    except (ValueError, TypeError, msgpack.UnpackException, RecursionError, OverflowError) as exc:
        raise WireError(f"not a msgpack group: {type(exc).__name__}: {exc}") from None
    if not isinstance(rec, dict):
        raise WireError(f"a group is a msgpack map, got {type(rec).__name__}")
    return rec


def _string(rec: dict, key: str, cap: int) -> str:
    value = rec[key]
    if type(value) is not str or not 0 < len(value) <= cap:
        raise WireError(f"field {key!r} must be a string of 1 to {cap} characters")
    return value


def _array(rec: dict, key: str, dtype: np.dtype) -> np.ndarray:
    raw = rec[key]
    if type(raw) is not bytes:
        raise WireError(f"field {key!r} must be a binary field")
    if len(raw) % dtype.itemsize:
        raise WireError(f"field {key!r} has {len(raw)} bytes, not a multiple of {dtype.itemsize}")
    return np.frombuffer(raw, dtype=dtype)


def _check_sizes(prompt: np.ndarray, lengths: np.ndarray, tok: np.ndarray, lp: np.ndarray,
                 limits: WireConfig) -> None:
    if not 1 <= prompt.size <= limits.max_prompt_tokens:
        raise WireError(f"prompt has {prompt.size} tokens; allowed 1 to {limits.max_prompt_tokens}")
    if not 2 <= lengths.size <= limits.max_group_size:
        raise WireError(f"group has {lengths.size} completions; allowed 2 to {limits.max_group_size}")
    if lengths.min() < 1 or lengths.max() > limits.max_completion_tokens:
        raise WireError(f"completion lengths must be 1 to {limits.max_completion_tokens} tokens")
    total = int(lengths.astype(np.int64).sum())
    if tok.size != total or lp.size != total:
        raise WireError(f"lengths add up to {total} tokens but {tok.size} ids and {lp.size} log-probs arrived")
