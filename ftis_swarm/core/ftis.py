"""The F-TIS loss: PPO-clipped GRPO with a truncated importance weight and a sample filter.

Follows METHOD.md term for term. Shapes: N sequences, T completion positions (padded);
`mask[i, t]` is 1 on the completion's real tokens. Two choices METHOD.md leaves open, made
here: the weight and the filter see `logp_old` (detached), never the moving `logp`, so with
several PPO epochs `w * R` is still `pi_theta / pi_gen`, truncated; and `frac_truncated`
reads 0 in modes that do not truncate.
"""

from __future__ import annotations

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
)
"""The keys of the metrics dict, in METHOD.md's order (per source: `key@source`)."""


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


def filtered_samples(
    advantages: torch.Tensor, kl: torch.Tensor, offpolicy: torch.Tensor, cfg: FTISConfig
) -> torch.Tensor:
    """Which samples the filter drops (`[N]` bool); all False in the modes without a filter."""
    if not cfg.filters:
        return torch.zeros_like(offpolicy, dtype=torch.bool)  # (N,)
    if cfg.filter_rule == "or":
        harmful = (advantages <= 0) | (kl > cfg.g)  # (N,)
    else:
        harmful = (advantages < 0) & (kl > cfg.g)  # (N,)
    in_scope = offpolicy if cfg.filter_scope == "offpolicy" else torch.ones_like(offpolicy)  # (N,)
    return harmful & in_scope  # (N,)


def ftis_loss(
    logp: torch.Tensor,
    logp_old: torch.Tensor,
    logp_gen: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    offpolicy: torch.Tensor,
    cfg: FTISConfig,
    *,
    source: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The loss of METHOD.md and its metrics.

    `logp` carries the gradient; `logp_old`, `logp_gen`, `advantages` are treated as constants.
    `logp, logp_old, logp_gen, mask: [N, T]`, `advantages: [N]`, `offpolicy: [N]` bool,
    `source: [N]` ints (optional) adds `key@source` metrics. Returns a scalar loss and floats.
    """
    m = mask.to(logp.dtype)  # (N, T)
    offpolicy = offpolicy.to(torch.bool)  # (N,)
    adv = advantages.detach().to(logp.dtype)  # (N,)
    x = clamped_log_ratio(logp_old, logp_gen)  # (N, T)
    w = truncated_weights(x, cfg)  # (N, T)
    kl = sample_kl(logp_old, logp_gen, m, cfg.kl_estimator)  # (N,)
    filtered = filtered_samples(adv, kl, offpolicy, cfg)  # (N,)
    adv_kept = torch.where(filtered, torch.zeros_like(adv), adv)[:, None]  # (N, 1)

    ratio = torch.exp(logp - logp_old.detach())  # (N, T)
    clipped = ratio.clamp(1.0 - cfg.eps, 1.0 + cfg.eps)  # (N, T)
    pg = -torch.minimum(ratio * adv_kept, clipped * adv_kept)  # (N, T)
    per_seq = (m * w * pg).sum(dim=-1) / m.sum(dim=-1).clamp(min=1.0)  # (N,)
    loss = per_seq.mean()  # ()

    with torch.no_grad():
        parts = dict(x=x, w=w, m=m, kl=kl, adv=adv, filtered=filtered, offpolicy=offpolicy)
        metrics = _metrics(parts, torch.ones_like(offpolicy), cfg)
        if source is not None:
            for s in torch.unique(source).tolist():
                sub = _metrics(parts, source == s, cfg)
                metrics.update({f"{k}@{s}": v for k, v in sub.items()})
    return loss, metrics


def _metrics(p: dict[str, torch.Tensor], rows: torch.Tensor, cfg: FTISConfig) -> dict[str, float]:
    """METHOD.md's metrics over the samples selected by `rows` (`[N]` bool)."""
    m = p["m"][rows]  # (n, T)
    w = p["w"][rows]  # (n, T)
    n = int(rows.sum())
    off = p["offpolicy"][rows]  # (n,)
    kl_off = p["kl"][rows][off].float()  # (n_off,)
    m_sum = m.sum()
    mw = (m * w).sum()
    out = {
        "frac_filtered": _ratio(p["filtered"][rows].sum(), n),
        "frac_kl_over_g": _ratio((kl_off > cfg.g).sum(), kl_off.numel()),
        "frac_nonpositive_adv": _ratio((p["adv"][rows] <= 0).sum(), n),
        "frac_truncated": _ratio((m * (torch.exp(p["x"][rows]) > cfg.C)).sum(), m_sum) if cfg.truncates else 0.0,
        "mean_weight": _ratio(mw, m_sum),
        "ess": _ratio(mw * mw, m_sum * (m * w * w).sum()),
        "kl_mean": float(kl_off.mean()) if kl_off.numel() else 0.0,
        "kl_p95": float(torch.quantile(kl_off, 0.95)) if kl_off.numel() else 0.0,
    }
    return out


def _ratio(num: torch.Tensor | float, den: torch.Tensor | float) -> float:
    den = float(den)
    return float(num) / den if den > 0 else 0.0
