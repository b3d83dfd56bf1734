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
