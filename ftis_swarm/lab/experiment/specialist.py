"""Issue 42's design: a `*` specialist beside a `+ -` learner; its settings, its claims D1-D3 and the pilot's sizing rule.

Fixed before its pilot ran (docs/experiment.md, "Issue 42's design"). A trains on `arith_addsub`,
B on `arith_mul`, B warm-started as a specialist (`config.WarmStart`); each accepts the other's
task, so each learns from the other's groups in a swarm arm. Both are evaluated on both tasks
(greedy pass@1 on the whole test splits: 65 and 30 questions). A learner's end point is the mean
of its accuracy at the last `end_average` evaluated rounds (2: rounds 6 and 8).

- D1 (the peer gives): A on `arith_mul`, `vertical-ftis` - `solo` > 0.
- D2 (no one loses): A on `arith_addsub` and B on `arith_mul`, `vertical-ftis` - `solo` > -0.05 (both parts).
- D3 (the correction): A on `arith_mul`, `vertical-ftis` - `vertical-nois` > 0; tested only when the run's
  gate holds: A's ESS of B's samples in `vertical-ftis` (`ess@1`, the weights A's learner applies, after the
  standing cap) over rounds 2 on, mean over seeds, at most 0.6.

Each one-sided at ALPHA = 0.05 / 3, a part supported when its t-test and its exact sign-flip test are both
below it. The pilot (seeds 200-203, arms `solo` and `vertical-ftis`) sizes the run: the smallest of
SEED_COUNTS whose a-priori MDE at the pilot's per-seed sd of D1 is at most TARGET_MDE; none: the claim is
re-posed before the run. A collapse: a held-out accuracy below half the learner's best evaluated one so far.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Optional

import numpy as np

from ftis_swarm.lab.experiment.claims import a_priori_mde
from ftis_swarm.lab.experiment.config import ExperimentConfig
from ftis_swarm.lab.experiment.paired_tests import bootstrap_interval, sign_flip_p, t_test_p

OWN_TASK = {"A": "arith_addsub", "B": "arith_mul"}
"""Each learner's training task; `arith_mul` is out of distribution for A."""
ALPHA = 0.05 / 3
MARGIN = 0.05
ESS_MAX = 0.6
SEED_COUNTS = (8, 12, 16, 24)
TARGET_MDE = 0.05
PILOT_SEEDS = (200, 201, 202, 203)
PILOT_ARMS = ("solo", "vertical-ftis")
MAIN_ARMS = ("solo", "vertical-nois", "vertical-ftis")
COLLAPSE_FRACTION = 0.5
GATED_CLAIM = "D3"
CLAIMS: tuple[tuple[str, str, str, str, str, float], ...] = (
    # claim, learner, task, arm, base, shift (the test is on diff + shift > 0)
    ("D1", "A", "arith_mul", "vertical-ftis", "solo", 0.0),
    ("D2 (A)", "A", "arith_addsub", "vertical-ftis", "solo", MARGIN),
    ("D2 (B)", "B", "arith_mul", "vertical-ftis", "solo", MARGIN),
    ("D3", "A", "arith_mul", "vertical-ftis", "vertical-nois", 0.0),
)

DESIGN: dict[str, Any] = {
    "node": {"task": OWN_TASK["A"], "rounds": 8, "prompts_per_round": 2, "eval_items": None,
             "eval_tasks": [OWN_TASK["B"]], "sampling": {"group_size": 6, "max_new_tokens": 16},
             # one tokenizer on the in-process hub, so it changes nothing; pinned at the value the main run's first
             # 16 runs were made with (the default became True after them), so that a resume reuses them
             "swarm": {"fetch": {"other_tokenizers": False}}},
    "learners": (
        {"model": "smollm2-135m", "learner": {"lr": 2e-5}, "accept_tasks": [OWN_TASK["A"], OWN_TASK["B"]]},
        {"model": "smollm2-135m", "task": OWN_TASK["B"], "learner": {"lr": 2e-5},
         "accept_tasks": [OWN_TASK["B"], OWN_TASK["A"]]},
    ),
    "warm": {"learner": "B", "rounds": 8, "lr": 5e-5, "prompts_per_round": 4, "seed": 900},
    "arms": list(MAIN_ARMS), "seeds": list(PILOT_SEEDS), "eval_rounds": [4, 6, 8], "end_average": 2,
    "eval_samples": 0,
}
"""The design as an ExperimentConfig; the pilot runs it with `arms=PILOT_ARMS`, the main run with its seeds."""


def design_config(**overrides: Any) -> ExperimentConfig:
    return ExperimentConfig(**{**DESIGN, **overrides})


def _runs(result: dict[str, Any], arm: str) -> dict[int, dict[str, Any]]:
    return {r["seed"]: r for r in result["runs"] if r["arm"] == arm}


def task_accuracy(ev: dict[str, Any], learner: str, task: str) -> Optional[float]:
    got = ev.get(learner) or {}
    per_task = got.get("by_task", {}).get(task)
    return None if per_task is None else float(per_task["accuracy"])


def end_score(run: dict[str, Any], learner: str, task: str, end_average: int) -> Optional[float]:
    """The mean of `learner`'s accuracy on `task` at the run's last `end_average` evaluations."""
    scores = [task_accuracy(ev, learner, task) for ev in run["evals"][-end_average:]]
    return None if not scores or any(s is None for s in scores) else float(np.mean(scores))


def differences(result: dict[str, Any], arm: str, base: str, learner: str, task: str) -> dict[int, float]:
    """Per seed with both runs, `arm`'s end score minus `base`'s."""
    k = int(result["config"].get("end_average", 1))
    a, b = _runs(result, arm), _runs(result, base)
    out = {}
    for seed in sorted(set(a) & set(b)):
        x, y = end_score(a[seed], learner, task, k), end_score(b[seed], learner, task, k)
        if x is not None and y is not None:
            out[seed] = x - y
    return out


def gate(result: dict[str, Any], arm: str = "vertical-ftis", learner: str = "A") -> dict[str, Any]:
    """A's ESS of B's samples (`ess@1`) by round, mean over seeds, and its mean over rounds 2 on."""
    by_round: dict[int, list[float]] = {}
    for run in _runs(result, arm).values():
        for rec in run["rounds"]:
            v = rec.get("ess@1")
            if rec.get("learner") == learner and v is not None and math.isfinite(v):
                by_round.setdefault(int(rec["round"]), []).append(float(v))
    means = {r: float(np.mean(v)) for r, v in sorted(by_round.items())}
    later = [v for r, v in means.items() if r >= 2]
    ess = float(np.mean(later)) if later else math.nan
    return {"by_round": means, "ess": ess, "holds": bool(later) and ess <= ESS_MAX}


def sizing(sd: float) -> dict[str, Any]:
    """The pilot's rule: the a-priori MDE of each seed count at per-seed sd `sd`, and the smallest count
    whose MDE is at most TARGET_MDE (None: even the largest misses it; the claim is re-posed)."""
    mde = {n: a_priori_mde(sd, n, alpha=ALPHA) for n in SEED_COUNTS}
    chosen = next((n for n in SEED_COUNTS if mde[n] <= TARGET_MDE), None)
    return {"sd": sd, "mde": mde, "seeds": chosen}


def claim_test(diffs: dict[int, float], shift: float) -> dict[str, Any]:
    """One-sided tests of `diff + shift > 0` over seeds, supported when both p are below ALPHA; and the 95% bootstrap
    interval of the mean difference (seeds resampled; a description, not part of the verdict)."""
    d = [v + shift for v in diffs.values()]
    if len(d) < 2:
        return {"n": len(d), "verdict": "not enough seeds"}
    t_p, flip_p = t_test_p(d), sign_flip_p(d)
    return {"n": len(d), "t_p": t_p, "sign_flip_p": flip_p, "interval": bootstrap_interval(list(diffs.values())),
            "verdict": "supported" if t_p < ALPHA and flip_p < ALPHA else "not shown"}


def collapses(result: dict[str, Any], arm: str, learner: str, task: str) -> int:
    """Runs in which `learner`'s accuracy on `task` fell below COLLAPSE_FRACTION of its best evaluated so far
    (the start evaluation included)."""
    start = task_accuracy(result["start"], learner, task)
    count = 0
    for run in _runs(result, arm).values():
        best = start or 0.0
        for ev in run["evals"]:
            acc = task_accuracy(ev, learner, task)
            if acc is None:
                continue
            if acc < COLLAPSE_FRACTION * best:
                count += 1
                break
            best = max(best, acc)
    return count


def curves(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Per arm, learner and task: the start, the mean accuracy over seeds at each evaluated round, the end score."""
    k = int(result["config"].get("end_average", 1))
    arms = list(dict.fromkeys(r["arm"] for r in result["runs"]))
    out = []
    for arm in arms:
        runs = list(_runs(result, arm).values())
        for learner in ("A", "B"):
            for task in OWN_TASK.values():
                rounds: dict[int, list[float]] = {}
                for run in runs:
                    for ev in run["evals"]:
                        acc = task_accuracy(ev, learner, task)
                        if acc is not None:
                            rounds.setdefault(int(ev["round"]), []).append(acc)
                ends = [e for run in runs if (e := end_score(run, learner, task, k)) is not None]
                out.append({"arm": arm, "learner": learner, "task": task, "seeds": len(runs),
                            "start": task_accuracy(result["start"], learner, task),
                            "curve": {r: float(np.mean(v)) for r, v in sorted(rounds.items())},
                            "end": float(np.mean(ends)) if ends else None,
                            "end_sd": float(np.std(ends, ddof=1)) if len(ends) > 1 else None,
                            "collapses": collapses(result, arm, learner, task)})
    return out


def summary(result: dict[str, Any]) -> dict[str, Any]:
    """The figures of a pilot or a main run: curves, each claim's per-seed differences and tests, the gate, the sizing."""
    g = gate(result)
    claims = []
    for name, learner, task, arm, base, shift in CLAIMS:
        diffs = differences(result, arm, base, learner, task)
        sd = float(np.std(list(diffs.values()), ddof=1)) if len(diffs) > 1 else math.nan
        row = {"claim": name, "learner": learner, "task": task, "arm": arm, "base": base, "shift": shift,
               "diffs": diffs, "mean": float(np.mean(list(diffs.values()))) if diffs else math.nan, "sd": sd,
               "sizing": sizing(sd) if diffs else None, **claim_test(diffs, shift)}
        if name == GATED_CLAIM and not g["holds"] and "t_p" in row:  # tested only where the run's own gate holds;
            row["verdict"] = "not tested (the gate does not hold)"  # its p-values stay, as a description
        claims.append(row)
    d1 = claims[0]
    d2 = [row for row in claims if row["claim"].startswith("D2")]
    both = "supported" if all(row["verdict"] == "supported" for row in d2) else "not shown"
    return {"curves": curves(result), "claims": claims, "gate": g, "d2_both": both,
            "seeds_for_main_run": d1["sizing"]["seeds"] if d1["sizing"] else None,
            "warm": {k: result["warm"][k] for k in ("learner", "task", "seconds")} if "warm" in result else None}


def accuracy_matrix(result: dict[str, Any], arm: str, learner: str, task: str) -> tuple[list[int], np.ndarray]:
    """Evaluated rounds (0: the start) and `[seeds, rounds]` of `learner`'s accuracy on `task` in `arm` (NaN where
    an evaluation lacks it), seeds in order."""
    runs = [run for _, run in sorted(_runs(result, arm).items())]
    rounds = [0] + [int(ev["round"]) for ev in runs[0]["evals"]] if runs else [0]
    start = task_accuracy(result["start"], learner, task)
    rows = []
    for run in runs:
        by_round = {int(ev["round"]): task_accuracy(ev, learner, task) for ev in run["evals"]}
        by_round[0] = start
        rows.append([math.nan if by_round.get(r) is None else by_round[r] for r in rounds])
    return rounds, np.array(rows, dtype=float).reshape(len(rows), len(rounds))


def plot(result: dict[str, Any], folder: Path) -> list[Path]:
    """`specialist_heldout.png` (each learner on each task, a thin line per seed and a thick one per arm's mean)
    and `specialist_gate.png` (A's ESS of B's samples in `vertical-ftis` by round, per seed, against ESS_MAX); returns
    the paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ftis_swarm.lab.experiment.report import _save, reward_matrix, seed_lines

    folder.mkdir(parents=True, exist_ok=True)
    arms = list(dict.fromkeys(r["arm"] for r in result["runs"]))
    colors = {a: plt.get_cmap("tab10")(i % 10) for i, a in enumerate(arms)}
    fig, axes = plt.subplots(2, 2, figsize=(10, 7), sharey=True, squeeze=False)
    for i, learner in enumerate(("A", "B")):
        for j, task in enumerate(OWN_TASK.values()):
            ax = axes[i, j]
            for k, arm in enumerate(arms):
                rounds, acc = accuracy_matrix(result, arm, learner, task)
                x = np.array(rounds, dtype=float) + (k - (len(arms) - 1) / 2) * 0.12  # arms side by side
                seed_lines(ax, x, acc, colors[arm], arm, marker="o", ms=3)
            where = "in distribution" if task == OWN_TASK[learner] else "out of distribution"
            ax.set_title(f"{learner} on {task} ({where})", fontsize=9)
            ax.set_xlabel("round")
            ax.set_ylim(-0.02, 1.02)
            ax.grid(alpha=0.3)
        axes[i, 0].set_ylabel("held-out greedy pass@1")
    axes[0, 1].legend(fontsize=7)
    paths = [_save(fig, folder / "specialist_heldout.png")]

    fig, ax = plt.subplots(figsize=(5, 3.4))
    if "vertical-ftis" in arms:  # the gate's arm (NoIS applies no weight: 1 throughout)
        ess = reward_matrix([run for _, run in sorted(_runs(result, "vertical-ftis").items())], "A", "ess@1")
        seed_lines(ax, np.arange(1, ess.shape[1] + 1), ess, colors["vertical-ftis"], "vertical-ftis")
    ax.axhline(ESS_MAX, color="k", ls="--", lw=1, label=f"gate: at most {ESS_MAX}")
    ax.set_title("A's ESS of B's samples", fontsize=9)
    ax.set_xlabel("round")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    paths.append(_save(fig, folder / "specialist_gate.png"))
    return paths


def _f(x: Optional[float], fmt: str = ".3f") -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def _seeds_line(d1: dict[str, Any]) -> str:
    if d1["sizing"] is None or math.isnan(d1["sd"]):
        return "not computed (fewer than 2 seeds with both arms)"
    n = d1["sizing"]["seeds"]
    return str(n) if n else f"none of {', '.join(map(str, SEED_COUNTS))} reaches MDE {TARGET_MDE}: re-pose the claim"


def markdown(s: dict[str, Any]) -> str:
    lines = ["| arm | learner | task | start | curve (round: mean) | end (mean of last evals) | sd | collapses |",
             "|---|---|---|---|---|---|---|---|"]
    for c in s["curves"]:
        curve = ", ".join(f"{r}: {v:.3f}" for r, v in c["curve"].items())
        lines.append(f"| {c['arm']} | {c['learner']} | {c['task']} | {_f(c['start'])} | {curve} | {_f(c['end'])} | "
                     f"{_f(c['end_sd'])} | {c['collapses']} of {c['seeds']} |")
    lines += ["", "| claim | learner, task | arm - base | seeds | mean diff | 95% interval | per-seed sd "
              "| MDE at 8 / 12 / 16 / 24 | t p | sign-flip p | verdict |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in s["claims"]:
        mde = " / ".join(_f(v) for v in c["sizing"]["mde"].values()) if c["sizing"] else "-"
        low, high = c.get("interval") or (None, None)
        lines.append(f"| {c['claim']} | {c['learner']}, {c['task']} | {c['arm']} - {c['base']} | {len(c['diffs'])} | "
                     f"{_f(c['mean'])} | {_f(low)} to {_f(high)} | {_f(c['sd'])} | {mde} | {_f(c.get('t_p'), '.4f')} | "
                     f"{_f(c.get('sign_flip_p'), '.4f')} | {c['verdict']} |")
    g = s["gate"]
    by_round = ", ".join(f"{r}: {v:.3f}" for r, v in g["by_round"].items())
    lines += ["", f"Gate (A's ESS of B's samples in vertical-ftis, by round: {by_round or '-'}): rounds 2 on "
              f"{_f(g['ess'])}, {'holds' if g['holds'] else 'does not hold'} (at most {ESS_MAX}).",
              f"D2 (both parts, intersection-union): {s.get('d2_both', '-')}.",
              f"Seeds by the pilot's rule at this run's D1 sd ({_f(s['claims'][0]['sd'])}): "
              f"{_seeds_line(s['claims'][0])}."]
    return "\n".join(lines)
