"""A peer group of another tokenizer, put onto this learner's tokens (docs/method.md, "Peers with another tokenizer").

The item is what is shared: the learner renders the item's prompt with its own chat template
(the caller passes those ids), re-encodes each completion's text with its own tokenizer, appends
its own EOS where the peer's completion stopped, and aligns the two tokenizations into
character-aligned chunks (`core/chunks.py`). The peer's log-probs become per-learner-token data
(`chunk_gen_logp`: each chunk's sum on its last learner token), and `chunks` names each learner
token's chunk, which the loss (`core/ftis.py:sample_terms`) and the forgery detector read.

`align_group` raises `AlignmentError` with a reason the node counts: `align_bytes` and `align_utf8`
(the sender's signed data is inconsistent), `align_too_long` (the re-encoding is over this
learner's limit: honest, a mismatch), and `tokenizer` when this learner cannot align at all (its
tokenizer is not byte-level BPE, or its re-encoding does not give the text back).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch

from ftis_swarm.core.chunks import (
    AlignmentError,
    align_chunks,
    check_alignment,
    check_reencoding,
    chunk_char_counts,
    chunk_gen_logp,
    chunk_sizes,
)
from ftis_swarm.wire import Group
from ftis_swarm.wire.fingerprint import token_bytes

LEARNER_TOKENIZER = "tokenizer"
"""`AlignmentError.reason` when this learner's tokenizer cannot align (not the sender's fault: the node's
`tokenizer` reason, free)."""


@dataclass(frozen=True)
class Aligned:
    """A peer group of another tokenizer on this learner's tokens: what `build_batch` reads instead of the
    group's own ids and log-probs."""

    prompt_ids: np.ndarray  # (P,) this learner's rendering of the item's prompt
    completion_ids: tuple[np.ndarray, ...]  # G x (L_i,) the texts re-encoded, this learner's EOS where they stopped
    logp_gen: tuple[np.ndarray, ...]  # G x (L_i,) float32: each chunk's peer log-prob sum on its last token
    chunks: tuple[np.ndarray, ...]  # G x (L_i,) int64: each learner token's chunk
    ended: np.ndarray  # (G,) bool: the completion stopped (the peer's 0-byte stop)
    texts: tuple[str, ...]  # G: what the verifier reads
    sizes: tuple[tuple[int, ...], ...]  # G: learner tokens per chunk (`core/chunks.py:chunk_sizes`)
    chars: tuple[tuple[int, ...], ...]  # G: characters per chunk (`core/chunks.py:chunk_char_counts`)

    def one_token_chars(self) -> tuple[int, int]:
        """Characters of the completions in chunks of one learner token, and all their characters."""
        one = sum(n for sizes, chars in zip(self.sizes, self.chars) for s, n in zip(sizes, chars) if s == 1)
        return one, sum(sum(chars) for chars in self.chars)


def learner_token_bytes(tokenizer: Any, text: str) -> tuple[list[int], list[int]]:
    """This learner's tokens of `text` (no special tokens added) and each one's byte length; `AlignmentError`
    (`tokenizer`) when its tokenizer is not byte-level BPE or the tokens do not give the text back."""
    ids = [int(i) for i in tokenizer.encode(text, add_special_tokens=False)]
    try:
        pieces = token_bytes(tokenizer, ids)
    except ValueError as exc:
        raise AlignmentError(LEARNER_TOKENIZER, f"this learner's tokenizer cannot align: {exc}") from None
    if b"".join(pieces) != text.encode("utf-8"):
        raise AlignmentError(LEARNER_TOKENIZER, "this learner's tokenizer does not re-encode the text exactly")
    return ids, [len(p) for p in pieces]


def align_group(group: Group, tokenizer: Any, prompt_ids: Sequence[int], *, eos_id: int, limit: int) -> Aligned:
    """`group` (with alignment data, `Group.aligned`) on this learner's tokens; raises `AlignmentError`.

    `prompt_ids`: the item's prompt rendered with this learner's template; `eos_id`: the learner's EOS, for
    the peer's stop; `limit`: the most learner tokens one completion may re-encode to.
    """
    if not group.aligned or len(group.texts) != group.G or len(group.token_bytes) != group.G:
        raise AlignmentError("align_bytes", "the group carries no alignment data for each completion")
    ids_out, lp_out, chunk_out, ended, texts, sizes, chars = [], [], [], [], [], [], []
    for text, tb, lp in zip(group.texts, group.token_bytes, group.logp_gen):
        if tb.shape != lp.shape:
            raise AlignmentError("align_bytes", "a completion has not one byte length per token")
        s = check_alignment(text, tb)
        stop = bool(tb.size) and int(tb[-1]) == 0
        ids, lengths = learner_token_bytes(tokenizer, s)
        if stop:
            ids, lengths = ids + [int(eos_id)], lengths + [0]
        check_reencoding(len(ids), limit)
        if not ids:
            raise AlignmentError("align_bytes", "a completion has neither text nor a stop")
        c = align_chunks(bytes(text), tb.tolist(), lengths)
        ids_out.append(np.asarray(ids, dtype=np.uint32))
        lp_out.append(chunk_gen_logp(torch.from_numpy(np.asarray(lp, dtype=np.float32)), c).numpy())
        chunk_out.append(np.asarray(c.learner, dtype=np.int64))
        ended.append(stop)
        texts.append(s)
        sizes.append(tuple(chunk_sizes(c)))
        chars.append(tuple(chunk_char_counts(bytes(text), lengths, c)))
    return Aligned(prompt_ids=np.asarray(list(prompt_ids), dtype=np.uint32), completion_ids=tuple(ids_out),
                   logp_gen=tuple(lp_out), chunks=tuple(chunk_out), ended=np.asarray(ended, dtype=bool),
                   texts=tuple(texts), sizes=tuple(sizes), chars=tuple(chars))
