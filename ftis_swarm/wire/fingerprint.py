"""Tokenizer fingerprint: peers exchange token ids, so a learner must know they mean the same.

The fingerprint hashes the id-to-token map, added tokens included, and nothing else: not
the chat template, not which token plays eos or pad. Two tokenizers with the same map
(the same vocabulary saved twice, or loaded as fast and from GGUF) get the same value.
"""

from __future__ import annotations

import hashlib
from typing import Any


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """32 hex digits of sha256 over `id<TAB>token<LF>` lines in id order (`get_vocab()`)."""
    vocab: dict[str, int] = tokenizer.get_vocab()
    h = hashlib.sha256()
    for token, idx in sorted(vocab.items(), key=lambda kv: kv[1]):
        h.update(f"{idx}\t{token}\n".encode("utf-8", "surrogatepass"))
    return h.hexdigest()[:32]


def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet reversed: each printable stand-in character -> the byte it stands for."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = list(keep), 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(keep, chars)}


_BYTE_DECODER = _byte_decoder()


def token_bytes(tokenizer: Any, ids: Any, *, stop_ids: Any = ()) -> list[bytes]:
    """The UTF-8 bytes each token of `ids` stands for, under a byte-level BPE tokenizer (GPT-2's alphabet:
    Qwen, SmolLM2, Llama 3); a special token stands for its text, and a token of `stop_ids` for nothing
    (b""). Raises `ValueError` for a token outside the byte-level alphabet (another tokenizer kind) or past the
    tokenizer's vocabulary."""
    stops = {int(i) for i in stop_ids}
    special = set(getattr(tokenizer, "all_special_ids", ()) or ())
    added = {int(i) for i in (getattr(tokenizer, "added_tokens_decoder", {}) or {})}
    out: list[bytes] = []
    for idx, piece in zip((int(i) for i in ids), tokenizer.convert_ids_to_tokens([int(i) for i in ids])):
        if idx in stops:
            out.append(b"")
        elif piece is None:  # an id past the tokenizer (a padded embedding row): no text to stand for
            raise ValueError(f"token {idx} is not in the tokenizer's vocabulary")
        elif idx in special or idx in added:
            out.append(piece.encode("utf-8"))
        else:
            try:
                out.append(bytes(_BYTE_DECODER[ch] for ch in piece))
            except KeyError:
                raise ValueError(f"token {idx} ({piece!r}) is not a byte-level BPE token") from None
    return out
