"""Character-aligned chunks: the importance ratio of a peer whose tokenizer is not the learner's.

docs/method.md, "Peers with another tokenizer". The peer sampled tokens `s` (each with a
byte length, the last possibly a 0-byte stop) and the learner re-encoded the same UTF-8 text
into its own tokens `t`. A chunk ends at every byte offset where both tokenizations end a
token and a character starts (or the text ends); a stop on both sides is one last chunk of
its own. For chunk k,

    x_k = sum_{t in k} logp(t) - sum_{s in k} logp_gen(s)

and the chunks partition both token sequences, so `sum_k x_k` is the sequence's log ratio
exactly. In the loss the chunk becomes per-learner-token data: `chunk_gen_logp` puts the
peer's chunk sum on the chunk's last learner token (0 on the others) and `Chunking.learner`
names each learner token's chunk; `core/ftis.py:sample_terms` (its `chunks` argument) sums
`logp_old - logp_gen` over each chunk, gives every learner token of chunk k `x_k`, and counts
each chunk once in the filter's KL.

Pure Python and torch: no tokenizer here. What a receiver checks without the peer's
tokenizer (`check_alignment`) raises `AlignmentError` with one of `ALIGN_REASONS`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

ALIGN_REASONS = ("align_bytes", "align_utf8", "align_too_long")
"""Why a cross-tokenizer completion is refused: its byte lengths do not sum to its text's bytes (or a
0-byte token is not its last), its text is not valid UTF-8, or the learner's re-encoding is longer than its
limit."""


class AlignmentError(ValueError):
    """A completion that cannot be aligned; `reason` is one of `ALIGN_REASONS`."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def check_alignment(text: bytes, token_bytes: Sequence[int]) -> str:
    """The completion's text, decoded, after the checks a receiver can make without the peer's tokenizer.

    `token_bytes`: each peer token's byte length; only the last may be 0 (a stop). Raises `AlignmentError`.
    """
    lengths = [int(b) for b in token_bytes]
    if any(b < 0 for b in lengths) or any(b == 0 for b in lengths[:-1]):
        raise AlignmentError("align_bytes", "a token other than the last has no bytes")
    if sum(lengths) != len(text):
        raise AlignmentError("align_bytes", f"token byte lengths sum to {sum(lengths)} but the text has "
                                            f"{len(text)} bytes")
    try:
        return bytes(text).decode("utf-8", errors="strict")
    except UnicodeDecodeError as exc:
        raise AlignmentError("align_utf8", f"the text is not valid UTF-8 ({exc.reason} at byte {exc.start})") from None


def check_reencoding(n_tokens: int, limit: int) -> None:
    """Refuses (`align_too_long`) a learner re-encoding of `n_tokens` tokens over the learner's `limit`."""
    if n_tokens > limit:
        raise AlignmentError("align_too_long", f"the text re-encodes to {n_tokens} tokens, over this learner's "
                                               f"limit of {limit}")


@dataclass(frozen=True)
class Chunking:
    """Chunk index of every peer token and of every learner token; `n` chunks, numbered in text order."""

    peer: tuple[int, ...]
    learner: tuple[int, ...]
    n: int


def _ends(lengths: Sequence[int]) -> list[int]:
    out, pos = [], 0
    for b in lengths:
        pos += int(b)
        out.append(pos)
    return out


def _split_stop(lengths: Sequence[int]) -> tuple[list[int], bool]:
    lengths = [int(b) for b in lengths]
    if lengths and lengths[-1] == 0:
        return lengths[:-1], True
    return lengths, False


def align_chunks(text: bytes, peer_bytes: Sequence[int], learner_bytes: Sequence[int]) -> Chunking:
    """Chunks of one completion: `text` its UTF-8 bytes, `peer_bytes` / `learner_bytes` each token's byte length.

    A trailing 0-byte token on a side is its stop; both sides stop or neither does (`ValueError` otherwise,
    like lengths that do not both sum to the text: the caller's checks come first).
    """
    peer, peer_stop = _split_stop(peer_bytes)
    mine, my_stop = _split_stop(learner_bytes)
    if peer_stop != my_stop:
        raise ValueError("the peer's completion and the learner's re-encoding must both end in a stop or neither")
    pe, le = _ends(peer), _ends(mine)
    total = len(text)
    if (pe[-1] if pe else 0) != total or (le[-1] if le else 0) != total or 0 in pe or 0 in le:
        raise ValueError(f"token byte lengths must be positive and sum to the text's {total} bytes on both sides")
    # A common end is a chunk boundary where a character starts there (not a UTF-8 continuation byte).
    common = sorted(b for b in set(pe) & set(le) if b == total or (text[b] & 0xC0) != 0x80)
    index = {b: k for k, b in enumerate(common)}

    def assign(ends: list[int]) -> list[int]:
        out, k = [], 0
        for e in ends:
            while common[k] < e:
                k += 1
            out.append(k)
        return out

    p, ln = assign(pe), assign(le)
    n = len(index)
    if peer_stop:
        p.append(n)
        ln.append(n)
        n += 1
    return Chunking(peer=tuple(p), learner=tuple(ln), n=n)


def chunk_sums(values: torch.Tensor, chunk: Sequence[int] | torch.Tensor, n: int) -> torch.Tensor:
    """`[n]` float64: the sum of `values` (`[L]`) over each chunk, `chunk` (`[L]`) naming each value's chunk."""
    idx = torch.as_tensor(chunk, dtype=torch.long)  # (L,)
    return torch.zeros(n, dtype=torch.float64).index_add_(0, idx, values.detach().to(torch.float64))  # (n,)


def chunk_log_ratios(logp: torch.Tensor, logp_gen: torch.Tensor, c: Chunking) -> torch.Tensor:
    """`[n]` float64 chunk log ratios `x_k`: the learner's log-probs of its tokens `logp` (`[L_learner]`) minus
    the peer's `logp_gen` (`[L_peer]`) over each chunk. They sum to `logp.sum() - logp_gen.sum()`."""
    return chunk_sums(logp, c.learner, c.n) - chunk_sums(logp_gen, c.peer, c.n)  # (n,)


def chunk_gen_logp(logp_gen: torch.Tensor, c: Chunking) -> torch.Tensor:
    """`[L_learner]` float32: the peer's log-probs mapped onto the learner's tokens, each chunk's sum on the
    chunk's last learner token and 0 on the others, so `sample_terms(chunks=...)` reads the chunk ratio."""
    sums = chunk_sums(logp_gen, c.peer, c.n)  # (n,)
    idx = torch.as_tensor(c.learner, dtype=torch.long)  # (L,)
    last = torch.ones_like(idx, dtype=torch.bool)  # (L,)
    last[:-1] = idx[1:] != idx[:-1]
    return torch.where(last, sums[idx], 0.0).to(torch.float32)  # (L,)


def chunk_sizes(c: Chunking) -> list[int]:
    """Learner tokens in each chunk (the chunk-size distribution of docs/method.md's measurement)."""
    sizes = [0] * c.n
    for k in c.learner:
        sizes[k] += 1
    return sizes


def chunked_token_log_ratios(logp_old: torch.Tensor, logp_gen: torch.Tensor, mask: torch.Tensor,
                             chunks: torch.Tensor, clamp: float = 20.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Each chunked token's chunk log ratio `x_k` (clamped at +-`clamp`) and which tokens are chunked.

    `logp_old, logp_gen, mask, chunks`: `[N, T]` (`chunks` -1 where a token is not chunked, as in
    `core/ftis.py:sample_terms`; `logp_gen` as `chunk_gen_logp` maps it). Returns `[N, T]` float (0 on the
    tokens not chunked) and `[N, T]` bool. Both the loss's weight and the forgery detector read these.
    """
    n, t = logp_old.shape
    tok = mask.bool() & (chunks >= 0)  # (N, T)
    flat = torch.arange(n)[:, None] * t + chunks.clamp(min=0)  # (N, T) one slot per (sample, chunk)
    d = (logp_old.detach() - logp_gen.detach()).to(torch.float64)  # (N, T)
    sums = torch.zeros(n * t, dtype=torch.float64).index_add_(0, flat[tok], d[tok])  # (N*T,)
    xk = torch.where(tok, sums[flat].clamp(-clamp, clamp), 0.0).to(logp_old.dtype)  # (N, T)
    return xk, tok


def chunk_char_counts(text: bytes, learner_bytes: Sequence[int], c: Chunking) -> list[int]:
    """Characters of the text in each chunk (a stop's chunk has none): with `chunk_sizes`, the share of a
    completion's characters in chunks of one learner token (docs/method.md's measurement)."""
    spans = [0] * c.n
    for k, b in zip(c.learner, learner_bytes):
        spans[k] += int(b)
    out, pos = [], 0
    for b in spans:
        out.append(len(bytes(text[pos:pos + b]).decode("utf-8")))
        pos += b
    return out
