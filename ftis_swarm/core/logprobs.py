"""Per-token log-probs of given token ids, with the output head run chunk by chunk.

The naive way (`model(ids).logits.log_softmax(-1)`) holds `[B, L, V]` float32 logits twice:
at a 150k vocabulary, 8 x 512 tokens is 2.5 GB a copy. Here the decoder runs once, the
hidden states of the positions we need are gathered (`[M, H]`, prompt positions skipped
when the caller masks them out), and the head plus log-softmax run on `chunk_size` rows at a
time. Under autograd each chunk is checkpointed, so backward recomputes one chunk's logits
instead of keeping all of them: peak memory is one chunk of `[chunk_size, V]`, whatever B and L.

Assumes a plain linear output head (Llama, Qwen2, Mistral, SmolLM...); models with logit
soft-capping or scaling in `forward` are not covered.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


def _backbone_and_head(model: Any) -> tuple[torch.nn.Module, torch.nn.Module]:
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return base.get_decoder(), base.get_output_embeddings()


def _chunk_logp(head: torch.nn.Module, h: torch.Tensor, tgt: torch.Tensor, temperature: float) -> torch.Tensor:
    logits = head(h).float() / temperature  # (c, V)
    return torch.gather(F.log_softmax(logits, dim=-1), 1, tgt[:, None]).squeeze(1)  # (c,)


def token_logprobs(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    *,
    target_mask: torch.Tensor | None = None,
    temperature: float = 1.0,
    chunk_size: int = 512,
) -> torch.Tensor:
    """`out[b, t] = log softmax(z_t / T)[input_ids[b, t+1]]`, float32, shape `[B, L-1]`.

    `input_ids, attention_mask: [B, L]` (right-padded). `target_mask: [B, L-1]` bool picks the
    positions to compute (default: every real next token); the others read 0. Differentiable
    with respect to the model's parameters when grad is enabled.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    decoder, head = _backbone_and_head(model)
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)  # (B, L)
    if target_mask is None:
        target_mask = attention_mask[:, 1:].bool()  # (B, L-1)
    hidden = decoder(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state  # (B, L, H)
    rows, cols = target_mask.nonzero(as_tuple=True)  # (M,), (M,)
    h = hidden[:, :-1][rows, cols]  # (M, H)
    tgt = input_ids[:, 1:][rows, cols]  # (M,)

    use_ckpt = torch.is_grad_enabled() and h.requires_grad
    pieces = []
    for start in range(0, h.shape[0], chunk_size):
        h_c, t_c = h[start : start + chunk_size], tgt[start : start + chunk_size]  # (c, H), (c,)
        if use_ckpt:
            pieces.append(checkpoint(_chunk_logp, head, h_c, t_c, temperature, use_reentrant=False))
        else:
            pieces.append(_chunk_logp(head, h_c, t_c, temperature))  # (c,)
    flat = torch.cat(pieces) if pieces else h.new_zeros(0, dtype=torch.float32)  # (M,)
    out = torch.zeros(target_mask.shape, dtype=torch.float32, device=hidden.device)  # (B, L-1)
    return out.index_put((rows, cols), flat)  # (B, L-1)
