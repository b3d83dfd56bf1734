"""The F-TIS loss: PPO-clipped GRPO with a truncated importance weight and a sample filter.

Follows docs/method.md term for term. Shapes: N sequences, T completion positions (padded);
`mask[i, t]` is 1 on the completion's real tokens. `sample_terms` decides, once per batch,
each token's weight and which samples are filtered; `ftis_loss` and the learner both read
that one decision, so what the learner leaves out of its gradient pass and what the loss
filters cannot differ. Choices the contract leaves open, made here (docs/method.md, Choices
where the contract is silent):

- the weight and the filter see `logp_old` (detached), never the moving `logp`, so with
  several PPO epochs `w * R` is still `pi_theta / pi_gen`, truncated;
- a sample with a NaN or infinite `logp_old` or `logp_gen` on a masked token is filtered
  in every mode with weight 0; its values are replaced by `torch.where` before any
  arithmetic, so no NaN reaches the loss or `logp`'s gradient (`0 * NaN` would);
- the weight metrics (`frac_truncated`, `mean_weight`, `ess`) and the KL metrics are over
  the samples whose log-probs are finite; `frac_truncated` reads 0 in modes that do not
  truncate;
- samples of an identity without standing (docs/method.md, "Peers without standing";
  the learner passes them as `unproven`) have their weight capped at 1 in every mode,
  `w = min(weight(x), 1)`; `frac_capped_unproven` counts the masked tokens the cap lowered;
- the weight above 1 of identities whose standing is recent (the learner passes them as
  `recent`) is bounded in aggregate: over the samples that enter the gradient (`A~ != 0`),
  each weighing its mean token weight as in the loss, their excess `sum mean_t (w - 1)+`
  may make up at most `recent_share` of the update's weight `sum mean_t w`. When it would
  make up more, every such token's excess is scaled by one factor k,
  `w = 1 + k (w - 1)`, with k chosen so the share is exactly `recent_share`;
  `frac_recent_excess_scaled` counts the masked tokens it lowered.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ftis_swarm.config import FTISConfig

LOG_RATIO_CLAMP = 20.0
METRIC_KEYS = (
    "frac_filtered",
    "frac_kl_over_g",
    "frac_nonpositive_adv",
    "frac_truncated",
    "mean_weight",
    "ess",
    "kl_mean",
    "kl_p95",
    "frac_zero_adv",
    "frac_nonfinite",
    "frac_capped_unproven",
    "frac_recent_excess_scaled",
)
"""The keys of the metrics dict, in docs/method.md's order (per source: `key@source`)."""


def clamped_log_ratio(logp_a: torch.Tensor, logp_b: torch.Tensor) -> torch.Tensor:
    """`clamp(logp_a - logp_b, -20, 20)`, detached: the log importance ratio x."""
    return (logp_a.detach() - logp_b.detach()).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)  # (N, T)


def truncated_weights(x: torch.Tensor, cfg: FTISConfig) -> torch.Tensor:
    """Per-token importance weight of the mode: 1, exp(x), or min(exp(x), C)."""
    if not cfg.weighted:
        return torch.ones_like(x)  # (N, T)
    w = torch.exp(x)  # (N, T)
    return w.clamp(max=cfg.C) if cfg.truncates else w  # (N, T)


def sample_kl(
    logp: torch.Tensor, logp_gen: torch.Tensor, mask: torch.Tensor, estimator: str = "rlogr"
) -> torch.Tensor:
    """Per-sample KL, a sum over the completion's tokens (each token's term clamped at 0).

    `logp, logp_gen, mask`: `[N, T]`; returns `[N]`. `rlogr` is r*x - r + 1 (a proxy for
    KL(pi_theta || pi_gen)); `k3` is r - 1 - x (estimates KL(pi_gen || pi_theta)); r = exp(x).
    """
    x = clamped_log_ratio(logp, logp_gen)  # (N, T)
    r = torch.exp(x)  # (N, T)
    if estimator == "rlogr":
        term = r * x - r + 1.0  # (N, T)
    elif estimator == "k3":
        term = r - 1.0 - x  # (N, T)
    else:
        raise ValueError(f"unknown KL estimator {estimator!r}; expected 'rlogr' or 'k3'")
    return (term.clamp(min=0.0) * mask.to(term.dtype)).sum(dim=-1)  # (N,)


def nonfinite_samples(logp_old: torch.Tensor, logp_gen: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """`[N]` bool: samples with a NaN or an infinity in `logp_old` or `logp_gen` on a masked token."""
    bad = ~(torch.isfinite(logp_old.detach()) & torch.isfinite(logp_gen.detach()))  # (N, T)
    return (bad & mask.bool()).any(dim=-1)  # (N,)


def filtered_samples(
    advantages: torch.Tensor, kl: torch.Tensor, filterable: torch.Tensor, cfg: FTISConfig
) -> torch.Tensor:
    """Which samples the filter drops (`[N]` bool); all False in the modes without a filter.

    `filterable` (`[N]` bool) limits the filter to those samples under `filter_scope="offpolicy"`;
    `"all"` filters among every sample.
    """
    if not cfg.filters:
        return torch.zeros_like(filterable, dtype=torch.bool)  # (N,)
    if cfg.filter_rule == "or":
        harmful = (advantages <= 0) | (kl > cfg.g)  # (N,)
    else:
        harmful = (advantages < 0) & (kl > cfg.g)  # (N,)
    in_scope = filterable if cfg.filter_scope == "offpolicy" else torch.ones_like(filterable)  # (N,)
    return harmful & in_scope  # (N,)


@dataclass(frozen=True)
class SampleTerms:
    """Per sample and token, what the weight and the filter decided (all detached)."""

    x: torch.Tensor  # (N, T) clamped log ratio; 0 on padding and on non-finite samples
    w: torch.Tensor  # (N, T) importance weight; 0 on non-finite samples
    kl: torch.Tensor  # (N,) summed KL; 0 on non-finite samples
    nonfinite: torch.Tensor  # (N,) bool
    filtered: torch.Tensor  # (N,) bool: by the filter or the non-finite rule
    adv: torch.Tensor  # (N,) the advantage A_i
    adv_kept: torch.Tensor  # (N,) A~_i: A_i, or 0 when filtered
    capped: torch.Tensor  # (N, T) bool: tokens whose weight the cap of unproven samples lowered
    scaled: torch.Tensor  # (N, T) bool: tokens whose excess over 1 the aggregate cap of recent samples lowered

    def rows(self, idx: torch.Tensor) -> "SampleTerms":
        """The same terms for the samples `idx` (a micro-batch)."""
        return SampleTerms(**{k: getattr(self, k)[idx] for k in self.__dataclass_fields__})


def sample_terms(
    logp_old: torch.Tensor,
    logp_gen: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    filterable: torch.Tensor,
    cfg: FTISConfig,
    unproven: torch.Tensor | None = None,
    recent: torch.Tensor | None = None,
    recent_share: float = 1.0,
    chunks: torch.Tensor | None = None,
) -> SampleTerms:
    """The weights, the filter and the non-finite rule of docs/method.md, decided once for a batch.

    `logp_old, logp_gen, mask: [N, T]`; `advantages: [N]`; `filterable: [N]` bool (peers' samples);
    `unproven: [N]` bool (samples of identities without standing: weight capped at 1; None: none);
    `recent: [N]` bool (samples of identities whose standing is recent: their weight above 1 makes up at
    most `recent_share` of the update's gradient weight, module docstring; None: none);
    `chunks: [N, T]` long (samples of a peer with another tokenizer, docs/method.md "Peers with another
    tokenizer": each token's chunk, -1 on padding and on every token of the other samples; None: none).
    A chunked sample's tokens all get their chunk's `x_k = sum (logp_old - logp_gen)` over the chunk
    (`core/chunks.py:chunk_gen_logp` puts the peer's chunk sum on the chunk's last token), and its KL
    counts each chunk once; the other samples are computed exactly as without `chunks`.
    """
    m = mask.bool()  # (N, T)
    nonfinite = nonfinite_samples(logp_old, logp_gen, m)  # (N,)
    unused = nonfinite[:, None] | ~m  # (N, T)
    old = torch.where(unused, 0.0, logp_old.detach())  # (N, T)
    gen = torch.where(unused, 0.0, logp_gen.detach())  # (N, T)
    x = clamped_log_ratio(old, gen)  # (N, T)
    w = torch.where(nonfinite[:, None], 0.0, truncated_weights(x, cfg))  # (N, T)
    if chunks is not None:
        x, w, chunked_rows, chunked_kl = _chunked(old, gen, m, chunks, nonfinite, x, w, cfg)
    if unproven is None:
        capped = torch.zeros_like(m)  # (N, T)
    else:
        capped = unproven.to(torch.bool)[:, None] & m & (w > 1.0)  # (N, T)
        w = torch.where(capped, 1.0, w)  # (N, T)
    kl = sample_kl(old, gen, m, cfg.kl_estimator)  # (N,)
    if chunks is not None:
        kl = torch.where(chunked_rows, chunked_kl.to(kl.dtype), kl)  # (N,)
    adv = advantages.detach().to(old.dtype)  # (N,)
    filtered = filtered_samples(adv, kl, filterable.to(torch.bool), cfg) | nonfinite  # (N,)
    adv_kept = torch.where(filtered, 0.0, adv)  # (N,)
    scaled = torch.zeros_like(m)  # (N, T)
    if recent is not None and recent_share < 1.0:
        w, scaled = recent_excess_capped(w, m, adv_kept != 0, recent.to(torch.bool), recent_share)
    return SampleTerms(x=x, w=w, kl=kl, nonfinite=nonfinite, filtered=filtered, adv=adv, adv_kept=adv_kept,
                       capped=capped, scaled=scaled)


def _chunked(old: torch.Tensor, gen: torch.Tensor, m: torch.Tensor, chunks: torch.Tensor, nonfinite: torch.Tensor,
             x: torch.Tensor, w: torch.Tensor, cfg: FTISConfig) -> tuple[torch.Tensor, ...]:
    """`x` and `w` with the chunked samples' values replaced by their chunks' (`sample_terms`'s `chunks`); which
    samples are chunked (`[N]` bool) and their KL, each chunk's term counted once (`[N]`)."""
    n, t = old.shape
    tok = m & (chunks >= 0)  # (N, T)
    rows = tok.any(dim=-1)  # (N,)
    flat = torch.arange(n)[:, None] * t + chunks.clamp(min=0)  # (N, T) one slot per (sample, chunk)
    d = (old - gen).to(torch.float64)  # (N, T)
    sums = torch.zeros(n * t, dtype=torch.float64).index_add_(0, flat[tok], d[tok])  # (N*T,)
    xk = sums[flat].clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP).to(x.dtype)  # (N, T)
    x = torch.where(tok, xk, torch.where(rows[:, None], 0.0, x))  # (N, T)
    wk = torch.where(nonfinite[:, None], 0.0, truncated_weights(xk, cfg))  # (N, T)
    w = torch.where(tok, wk, torch.where(rows[:, None], 0.0, w))  # (N, T)
    last = tok.clone()  # (N, T) the last token of each chunk carries its KL term
    last[:, :-1] &= chunks[:, 1:] != chunks[:, :-1]
    r = torch.exp(xk)  # (N, T)
    term = r * xk - r + 1.0 if cfg.kl_estimator == "rlogr" else r - 1.0 - xk  # (N, T)
    kl_chunked = (term.clamp(min=0.0) * last.to(term.dtype)).sum(dim=-1)  # (N,)
    return x, w, rows, kl_chunked


def recent_excess_capped(w: torch.Tensor, m: torch.Tensor, live: torch.Tensor, recent: torch.Tensor,
                         share: float) -> tuple[torch.Tensor, torch.Tensor]:
    """`w` with the excess over 1 of the `recent` samples scaled by one factor k, so that it makes up at most
    `share` (< 1) of the gradient weight of the `live` samples (`A~ != 0`), each weighing its mean token
    weight as in the loss; and the tokens it lowered (none when the share already holds).

    `w: [N, T]`, `m: [N, T]` bool, `live, recent: [N]` bool. With E the recent live samples' excess and W
    the live samples' weight, k solves `k E = share (W - E + k E)`.
    """
    n_tok = m.sum(dim=-1).clamp(min=1)  # (N,)
    over = (live & recent)[:, None] & m & (w > 1.0)  # (N, T)
    excess = float((torch.where(over, w - 1.0, 0.0).double().sum(dim=-1) / n_tok).sum())
    total = float(((w * m).double().sum(dim=-1) / n_tok)[live].sum())
    rest = total - excess
    if excess <= 0.0 or excess * (1.0 - share) <= share * rest:
        return w, torch.zeros_like(over)  # (N, T)
    k = share * rest / ((1.0 - share) * excess)
    return torch.where(over, 1.0 + k * (w - 1.0), w), over  # (N, T), (N, T)


def policy_loss(
    logp: torch.Tensor, logp_old: torch.Tensor, mask: torch.Tensor, terms: SampleTerms, cfg: FTISConfig
) -> torch.Tensor:
    """`mean_i sum_t m w pg / sum_t m`, the PPO-clipped term weighted as `terms` decided.

    Positions of samples with `A~ = 0` and padding are replaced by 0 before the ratio is
    taken, so their values (NaN included) reach neither the loss nor `logp`'s gradient.
    """
    m = mask.to(logp.dtype)  # (N, T)
    live = (terms.adv_kept != 0)[:, None] & mask.bool()  # (N, T)
    lp = torch.where(live, logp, 0.0)  # (N, T)
    lp_old = torch.where(live, logp_old.detach(), 0.0)  # (N, T)
    adv = terms.adv_kept.to(logp.dtype)[:, None]  # (N, 1)
    ratio = torch.exp(lp - lp_old)  # (N, T)
    clipped = ratio.clamp(1.0 - cfg.eps, 1.0 + cfg.eps)  # (N, T)
    pg = -torch.minimum(ratio * adv, clipped * adv)  # (N, T)
    per_seq = (m * terms.w * pg).sum(dim=-1) / m.sum(dim=-1).clamp(min=1.0)  # (N,)
    return per_seq.mean()  # ()


def ftis_loss(
    logp: torch.Tensor,
    logp_old: torch.Tensor,
    logp_gen: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    offpolicy: torch.Tensor,
    cfg: FTISConfig,
    *,
    filterable: torch.Tensor | None = None,
    source: torch.Tensor | None = None,
    unproven: torch.Tensor | None = None,
    recent: torch.Tensor | None = None,
    recent_share: float = 1.0,
    chunks: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The loss of docs/method.md and its metrics.

    `logp` carries the gradient; `logp_old`, `logp_gen`, `advantages` are treated as constants.
    `logp, logp_old, logp_gen, mask: [N, T]`, `advantages: [N]`, `offpolicy: [N]` bool,
    `filterable: [N]` bool (default: `offpolicy`), `source: [N]` ints (optional) adds
    `key@source` metrics, `unproven: [N]` bool (optional) caps those samples' weights at 1, `recent: [N]`
    bool (optional) bounds those samples' weight above 1 to `recent_share` of the update's (`sample_terms`).
    `chunks: [N, T]` long (optional) weighs samples of a peer with another tokenizer by chunk (`sample_terms`).
    Returns a scalar loss and floats.
    """
    offpolicy = offpolicy.to(torch.bool)  # (N,)
    terms = sample_terms(logp_old, logp_gen, advantages, mask, offpolicy if filterable is None else filterable, cfg,
                         unproven=unproven, recent=recent, recent_share=recent_share, chunks=chunks)
    loss = policy_loss(logp, logp_old, mask, terms, cfg)
    return loss, ftis_metrics(terms, mask, offpolicy, cfg, source=source)


def ftis_metrics(terms: SampleTerms, mask: torch.Tensor, offpolicy: torch.Tensor, cfg: FTISConfig, *,
                 source: torch.Tensor | None = None) -> dict[str, float]:
    """docs/method.md's metrics of a batch, overall and, given `source` (`[N]` ints), as `key@source`."""
    with torch.no_grad():
        m = mask.to(terms.w.dtype)  # (N, T)
        metrics = _metrics(terms, m, offpolicy.to(torch.bool), torch.ones_like(terms.nonfinite), cfg)
        if source is not None:
            for s in torch.unique(source).tolist():
                sub = _metrics(terms, m, offpolicy.to(torch.bool), source == s, cfg)
                metrics.update({f"{k}@{s}": v for k, v in sub.items()})
    return metrics


def _metrics(t: SampleTerms, m: torch.Tensor, offpolicy: torch.Tensor, rows: torch.Tensor,
             cfg: FTISConfig) -> dict[str, float]:
    """The metrics over the samples selected by `rows` (`[N]` bool)."""
    n = int(rows.sum())
    finite = rows & ~t.nonfinite  # (N,)
    mf = m[finite]  # (n_f, T)
    w = t.w[finite]  # (n_f, T)
    kl_off = t.kl[finite & offpolicy].float()  # (n_off,)
    m_sum = mf.sum()
    mw = (mf * w).sum()
    adv = t.adv[rows]  # (n,)
    truncated = (mf * (torch.exp(t.x[finite]) > cfg.C)).sum()
    return {
        "frac_filtered": _ratio((t.filtered[rows] & (adv != 0)).sum(), n),
        "frac_kl_over_g": _ratio((kl_off > cfg.g).sum(), kl_off.numel()),
        "frac_nonpositive_adv": _ratio((adv <= 0).sum(), n),
        "frac_truncated": _ratio(truncated, m_sum) if cfg.truncates else 0.0,
        "mean_weight": _ratio(mw, m_sum),
        "ess": _ratio(mw * mw, m_sum * (mf * w * w).sum()),
        "kl_mean": float(kl_off.mean()) if kl_off.numel() else 0.0,
        "kl_p95": float(torch.quantile(kl_off, 0.95)) if kl_off.numel() else 0.0,
        "frac_zero_adv": _ratio((adv == 0).sum(), n),
        "frac_nonfinite": _ratio(t.nonfinite[rows].sum(), n),
        "frac_capped_unproven": _ratio(t.capped[finite].sum(), m_sum),
        "frac_recent_excess_scaled": _ratio(t.scaled[finite].sum(), m_sum),
    }


def _ratio(num: torch.Tensor | float, den: torch.Tensor | float) -> float:
    den = float(den)
    return float(num) / den if den > 0 else 0.0
