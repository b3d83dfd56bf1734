"""The experiment's summary: a table over seeds, and PNG plots (matplotlib, Agg backend).

Per arm and learner: training reward (the learner's own samples, early rounds and last
rounds), held-out greedy pass@1 at the start, (middle) and end, sampled accuracy at the
start and end when the evaluations carry it, and the off-policy samples' filter and weight
metrics (docs/method.md's keys for source 1, the peer, averaged over rounds). Spread: mean +-
sample standard deviation over seeds (`n` seeds). The paired tests and claims are
`stats.py`'s.

Plots draw every seed as a thin line in its arm's colour and the arm's mean over seeds as a
thick line: no bands, no error bars (fixed before the run), so a single divergent seed stays visible.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any, Sequence

import numpy as np

PEER_METRICS = ("frac_filtered@1", "frac_truncated@1", "mean_weight@1", "ess@1", "kl_mean@1")
PEER_LABELS = ("filtered", "truncated", "mean w", "ESS", "KL")
WINDOW = 3
"""Rounds averaged for the 'early' and 'late' training reward."""


def _by(runs: Sequence[dict[str, Any]], arm: str) -> list[dict[str, Any]]:
    return sorted((r for r in runs if r["arm"] == arm), key=lambda r: r["seed"])


def reward_matrix(runs: Sequence[dict[str, Any]], learner: str, key: str = "reward") -> np.ndarray:
    """`[seeds, rounds]` of one learner's per-round `key` (NaN where absent)."""
    rows = []
    for run in runs:
        recs = sorted((x for x in run["rounds"] if x["learner"] == learner), key=lambda x: x["round"])
        rows.append([np.nan if x.get(key) is None else float(x[key]) for x in recs])
    width = max((len(r) for r in rows), default=0)
    return np.array([r + [np.nan] * (width - len(r)) for r in rows], dtype=float).reshape(len(rows), width)


def eval_matrix(runs: Sequence[dict[str, Any]], start: dict[str, Any], learner: str,
                key: str = "accuracy") -> tuple[list[int], np.ndarray]:
    """Evaluation rounds (0 first) and `[seeds, evals]` held-out `key` of one learner (greedy pass@1 by
    default, `sampled_accuracy` for the sampled one; NaN where an evaluation lacks it)."""
    rounds = [0] + [e["round"] for e in runs[0]["evals"]] if runs else [0]

    def get(ev: dict[str, Any]) -> float:
        return math.nan if ev.get(key) is None else float(ev[key])

    acc = [[get(start[learner])] + [get(e[learner]) for e in run["evals"]] for run in runs]
    width = max((len(r) for r in acc), default=len(rounds))
    return rounds, np.array([r + [math.nan] * (width - len(r)) for r in acc], dtype=float).reshape(len(acc), width)


def _ms(values: np.ndarray) -> tuple[float, float]:
    v = values[np.isfinite(values)]
    if v.size == 0:
        return math.nan, math.nan
    return float(v.mean()), float(v.std(ddof=1)) if v.size > 1 else 0.0


def _fmt(mean: float, std: float, digits: int = 2) -> str:
    if math.isnan(mean):
        return "-"
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


def summary_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (arm, learner) with the table's figures as numbers."""
    runs, start, cfg = result["runs"], result["start"], result["config"]
    rows = []
    for arm in cfg["arms"]:
        arm_runs = _by(runs, arm)
        if not arm_runs:
            continue
        for learner in ("A", "B"):
            rew = reward_matrix(arm_runs, learner)
            k = min(WINDOW, rew.shape[1])
            _, acc = eval_matrix(arm_runs, start, learner)
            row: dict[str, Any] = {
                "arm": arm, "learner": learner, "seeds": len(arm_runs),
                "reward_early": _ms(np.nanmean(rew[:, :k], axis=1)),
                "reward_late": _ms(np.nanmean(rew[:, -k:], axis=1)),
                "heldout_start": _ms(acc[:, 0]),
                "heldout_mid": _ms(acc[:, 1]) if acc.shape[1] > 2 else (math.nan, math.nan),
                "heldout_end": _ms(acc[:, -1]),
            }
            _, sampled = eval_matrix(arm_runs, start, learner, "sampled_accuracy")
            row["sampled_start"], row["sampled_end"] = _ms(sampled[:, 0]), _ms(sampled[:, -1])
            for key in PEER_METRICS:
                m = reward_matrix(arm_runs, learner, key)
                row[key] = _ms(np.nanmean(m, axis=1)) if m.size and np.isfinite(m).any() else (math.nan, math.nan)
            row["bytes_per_round"] = float(np.nanmean(reward_matrix(arm_runs, learner, "bytes_sent")))
            rows.append(row)
    return rows


def format_table(result: dict[str, Any]) -> str:
    """The markdown table of `summary_rows`."""
    cfg = result["config"]
    k = min(WINDOW, cfg["node"]["rounds"])
    mid = len(cfg["eval_rounds"]) > 1
    rows = summary_rows(result)
    sampled = any(not math.isnan(r["sampled_end"][0]) for r in rows)
    head = (["arm", "learner", "seeds", f"reward r1-{k}", f"reward last {k}", "held-out start"]
            + ["held-out mid"] * mid + ["held-out end"] + ["sampled start", "sampled end"] * sampled
            + [f"peer {x}" for x in PEER_LABELS] + ["bytes sent/round"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [row["arm"], row["learner"], str(row["seeds"]), _fmt(*row["reward_early"]), _fmt(*row["reward_late"]),
                 _fmt(*row["heldout_start"])] + [_fmt(*row["heldout_mid"])] * mid + [_fmt(*row["heldout_end"])]
        cells += [_fmt(*row["sampled_start"]), _fmt(*row["sampled_end"])] * sampled
        cells += [_fmt(*row[key], digits=1 if key == "kl_mean@1" else 2) for key in PEER_METRICS]
        cells.append(f"{row['bytes_per_round']:.0f}" if row["bytes_per_round"] else "0")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _smooth(y: np.ndarray, k: int) -> np.ndarray:
    if k <= 1 or y.shape[-1] < k:
        return y
    kernel = np.ones(k) / k
    return np.array([np.convolve(np.nan_to_num(row), kernel, mode="valid") for row in np.atleast_2d(y)])


def seed_lines(ax: Any, x: np.ndarray, ys: np.ndarray, color: Any, label: str, **mean_style: Any) -> None:
    """Each row of `ys` `(seeds, points)` as a thin line, and their mean over seeds as a thick one
    (with markers when there are under 3 points, so a lone point shows)."""
    if len(x) < 3:
        mean_style = {"marker": "o", "ms": 3, **mean_style}
    for y in ys:
        ax.plot(x, y, color=color, lw=0.7, alpha=0.35, marker=mean_style.get("marker"), ms=2)
    with warnings.catch_warnings():  # a point no seed has (NaN in every row) stays a gap in the mean
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = np.nanmean(ys, axis=0) if ys.size else np.full(x.shape, np.nan)  # (points,)
    ax.plot(x, mean, color=color, lw=2.2, label=label, **mean_style)


def plot_all(result: dict[str, Any], folder: Path, *, prefix: str = "experiment", smooth: int = 3) -> list[Path]:
    """Writes `<prefix>_reward.png`, `<prefix>_heldout.png` (greedy, and sampled when present) and
    `<prefix>_weights.png` (when an arm learns from a peer); returns the paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    runs, start, cfg = result["runs"], result["start"], result["config"]
    arms = [a for a in cfg["arms"] if _by(runs, a)]
    colors = {a: plt.get_cmap("tab10")(i % 10) for i, a in enumerate(arms)}
    models = {n: spec["model"] + (f" (LoRA r{_lora_rank(spec)})" if _lora_rank(spec) else " (full)")
              for n, spec in zip(("A", "B"), cfg["learners"])}
    paths = []

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
    for ax, learner in zip(axes, ("A", "B")):
        for arm in arms:
            raw = reward_matrix(_by(runs, arm), learner)  # (seeds, rounds)
            rew = _smooth(raw, smooth)  # (seeds, rounds - smooth + 1), each point ends at its round
            x = np.arange(1, rew.shape[1] + 1) + (raw.shape[1] - rew.shape[1])
            seed_lines(ax, x, rew, colors[arm], arm)
        ax.set_title(f"{learner}: {models[learner]}", fontsize=9)
        ax.set_xlabel("round")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(f"train reward (own samples, {smooth}-round mean)")
    axes[1].legend(fontsize=7)
    paths.append(_save(fig, folder / f"{prefix}_reward.png"))

    keys = [("accuracy", "greedy pass@1")]
    if any(np.isfinite(eval_matrix(_by(runs, a), start, n, "sampled_accuracy")[1]).any() for a in arms for n in "AB"):
        keys.append(("sampled_accuracy", "sampled accuracy"))
    fig, axes = plt.subplots(len(keys), 2, figsize=(10, 3.4 * len(keys)), sharey=True, squeeze=False)
    n = len(arms)
    for row, (key, what) in zip(axes, keys):
        for ax, learner in zip(row, ("A", "B")):
            for j, arm in enumerate(arms):
                rounds, acc = eval_matrix(_by(runs, arm), start, learner, key)  # (seeds, evals)
                x = np.array(rounds, dtype=float) + (j - (n - 1) / 2) * 0.12 * max(1, cfg["node"]["rounds"] / 8)
                seed_lines(ax, x[: acc.shape[1]], acc, colors[arm], arm, marker="o", ms=3)
            ax.set_title(f"{learner}: {models[learner]}", fontsize=9)
            ax.set_xlabel("round")
            ax.set_ylim(-0.02, 1.02)
            ax.grid(alpha=0.3)
        row[0].set_ylabel(f"held-out {what} ({start['A'].get('items', '?')} items)")
    axes[0, 1].legend(fontsize=7)
    paths.append(_save(fig, folder / f"{prefix}_heldout.png"))

    together = [a for a in arms if not a.startswith("solo")]
    if together:
        fig, axes = plt.subplots(2, len(PEER_METRICS), figsize=(13, 5), sharex=True)
        for i, learner in enumerate(("A", "B")):
            for j, (key, label) in enumerate(zip(PEER_METRICS, PEER_LABELS)):
                ax = axes[i, j]
                for arm in together:
                    m = reward_matrix(_by(runs, arm), learner, key)  # (seeds, rounds)
                    seed_lines(ax, np.arange(1, m.shape[1] + 1), m, colors[arm], arm)
                ax.set_title(f"{learner}: peer {label}", fontsize=8)
                ax.tick_params(labelsize=7)
                ax.grid(alpha=0.3)
        for ax in axes[-1]:
            ax.set_xlabel("round", fontsize=8)
        axes[0, -1].legend(fontsize=6)
        paths.append(_save(fig, folder / f"{prefix}_weights.png"))
    return paths


def _save(fig: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def _lora_rank(spec: dict) -> int | None:
    """The LoRA rank a learner's overrides set (config.py), None for a full fine-tune."""
    lora = (spec.get("learner") or {}).get("lora")
    return lora["rank"] if lora else None
