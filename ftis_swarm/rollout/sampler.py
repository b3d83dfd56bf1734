"""Batched ancestral sampling from a transformers causal LM, with the sampled tokens' fp32 log-probs.

Why a loop of our own rather than `model.generate`: we need the log-prob of each sampled
token under exactly the distribution it was drawn from, softmax(z / T) in fp32, and
`generate`'s logits processors (top-k 50 by default, repetition penalties from a model's
generation_config) would change that distribution silently. Here nothing but T touches the
logits. The greedy path (`greedy_rows`, the evaluation's decoding) runs the same loop with an
argmax in place of the draw.

Prompts are left-padded so that every row's next token sits in the last column; position
ids count real tokens only, so a padded row sees the same positions as it would alone.
The KV cache is static (preallocated for prompt + budget) or dynamic (grown each step);
`docs/rollout.md` has the CPU measurements behind the default.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class SampleResult:
    """Per row: sampled ids and their log-probs, cut after EOS or at the row's budget."""

    token_ids: list[list[int]]
    logprobs: list[list[float]]


def left_pad(rows: Sequence[Sequence[int]], pad_id: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded `[B, P]` ids and their 0/1 attention mask."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)  # (B, P)
    mask = torch.zeros((len(rows), width), dtype=torch.long)  # (B, P)
    for i, r in enumerate(rows):
        ids[i, width - len(r) :] = torch.tensor(list(r), dtype=torch.long)  # (len(r),)
        mask[i, width - len(r) :] = 1  # (len(r),)
    return ids.to(device), mask.to(device)


def _make_cache(model: Any, static: bool, max_len: int) -> Any:
    from transformers import DynamicCache, StaticCache

    config = model.config
    if static:
        return StaticCache(config=config, max_cache_len=max_len)
    return DynamicCache(config=config)


def _tempered_logprobs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    return F.log_softmax(logits.float() / temperature, dim=-1)  # (B, V)


def draw(logp: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One index per row from `exp(logp)`, by inverting the CDF (fp64 cumulative sum).

    Exact like `torch.multinomial`, which on CPU runs an exponential draw over the whole
    vocabulary and took most of a decode step here; a zero-probability id is never drawn,
    since `searchsorted(..., right=True)` returns the first id whose CDF exceeds the draw.
    """
    cdf = logp.double().exp().cumsum(dim=-1)  # (B, V)
    u = torch.rand((logp.shape[0], 1), generator=generator, dtype=torch.float64, device=logp.device)  # (B, 1)
    idx = torch.searchsorted(cdf, u * cdf[:, -1:], right=True)  # (B, 1)
    return idx.squeeze(1).clamp(max=logp.shape[1] - 1)  # (B,)


Picker = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
"""Next token of each row and its log-prob, from the last position's logits `(B, V)`."""


@torch.no_grad()
def sample_rows(
    model: Any,
    rows: Sequence[Sequence[int]],
    *,
    budgets: Sequence[int],
    temperature: float,
    eos_ids: Sequence[int],
    pad_id: int,
    generator: torch.Generator | None = None,
    static_cache: bool = True,
) -> SampleResult:
    """Samples one completion per row of prompt ids, row i at most `budgets[i]` tokens.

    A row stops after sampling an EOS id (kept in the completion) or at its budget; the loop
    stops when every row has stopped. The model runs in eval mode for the call and gets its
    previous mode back after.
    """

    def pick(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logp = _tempered_logprobs(logits, temperature)  # (B, V)
        nxt = draw(logp, generator)  # (B,)
        return nxt, logp.gather(1, nxt[:, None]).squeeze(1)  # (B,), (B,)

    return _decode(model, rows, budgets=budgets, eos_ids=eos_ids, pad_id=pad_id, static_cache=static_cache,
                   pick=pick)


@torch.no_grad()
def greedy_rows(
    model: Any,
    rows: Sequence[Sequence[int]],
    *,
    budgets: Sequence[int],
    eos_ids: Sequence[int],
    pad_id: int,
    static_cache: bool = True,
) -> list[list[int]]:
    """The greedy completion of each row (argmax at every step), cut as in `sample_rows`, EOS kept.

    The evaluation's decoding (`ftis-node eval` and the experiment's held-out accuracy both
    come here on transformers): nothing touches the logits, so a checkpoint's
    generation_config (repetition penalty, top-k) cannot change the answer, unlike
    `model.generate`.
    """

    def pick(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        nxt = logits.argmax(-1)  # (B,)
        return nxt, torch.zeros_like(nxt, dtype=torch.float32)  # (B,), (B,) log-probs unused

    return _decode(model, rows, budgets=budgets, eos_ids=eos_ids, pad_id=pad_id, static_cache=static_cache,
                   pick=pick).token_ids


def _decode(
    model: Any,
    rows: Sequence[Sequence[int]],
    *,
    budgets: Sequence[int],
    eos_ids: Sequence[int],
    pad_id: int,
    static_cache: bool,
    pick: Picker,
) -> SampleResult:
    """The decoding loop shared by sampling and greedy decoding; `pick` chooses each next token."""
    device = next(model.parameters()).device
    ids, mask = left_pad(rows, pad_id, device)  # (B, P), (B, P)
    B, P = ids.shape
    steps = max(budgets)
    budget = torch.tensor(list(budgets), device=device)  # (B,)
    eos = torch.tensor(sorted(set(eos_ids)), dtype=torch.long, device=device)  # (E,)
    cache = _make_cache(model, static_cache, P + steps)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)  # (B, P)
    out_ids = torch.full((B, steps), pad_id, dtype=torch.long, device=device)  # (B, S)
    out_lp = torch.zeros((B, steps), dtype=torch.float32, device=device)  # (B, S)
    done = torch.zeros(B, dtype=torch.bool, device=device)  # (B,)
    lengths = torch.zeros(B, dtype=torch.long, device=device)  # (B,)

    was_training = model.training
    model.eval()
    try:
        step_ids, step_pos = ids, positions  # (B, P), (B, P)
        for t in range(steps):
            logits = model(
                input_ids=step_ids, attention_mask=mask, position_ids=step_pos, past_key_values=cache,
                use_cache=True, logits_to_keep=1,
            ).logits[:, -1]  # (B, V)
            nxt, lp = pick(logits)  # (B,), (B,)
            live = ~done  # (B,)
            out_ids[:, t] = torch.where(live, nxt, torch.full_like(nxt, pad_id))  # (B,)
            out_lp[:, t] = torch.where(live, lp, 0.0)  # (B,)
            lengths += live.long()  # (B,)
            done |= live & (torch.isin(nxt, eos) | (lengths >= budget))  # (B,)
            if bool(done.all()):
                break
            step_ids = out_ids[:, t : t + 1]  # (B, 1)
            step_pos = step_pos[:, -1:] + 1  # (B, 1)
            mask = torch.cat([mask, torch.ones((B, 1), dtype=mask.dtype, device=device)], dim=1)  # (B, P+t+1)
    finally:
        model.train(was_training)

    n = lengths.tolist()
    ids_l, lp_l = out_ids.tolist(), out_lp.tolist()
    return SampleResult(
        token_ids=[ids_l[i][: n[i]] for i in range(B)],
        logprobs=[lp_l[i][: n[i]] for i in range(B)],
    )
