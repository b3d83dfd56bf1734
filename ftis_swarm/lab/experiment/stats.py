"""The experiment's paired tests, fixed before the run: every arm against a base, per learner.

The statistic is held-out greedy pass@1 at the pre-registered end point (the evaluation
after round `end_round` of the run's config, else its last; the node's own greedy decoder),
per learner; sampled accuracy (`correct / samples` per item) is reported beside it. Arms are
paired by seed (every arm of a seed shares the prompt schedule and the starting weights)
and, within a seed, by item (every evaluation scores the same items in the same order; the
item digests are checked).

For the seeds both arms have, with per-seed differences `d = arm - base` (plus the margin `m`
of a non-inferiority test: the null is `mean(d) = -m`), `paired_tests.py` gives a one-sided
paired t-test (scipy's), an exact sign-flip test (ties counted; its least p is `2^-n`, so
fewer than 6 seeds never reach ALPHA, and the notes say so), a 95% bootstrap percentile
interval of the mean difference (BOOTSTRAP_DRAWS draws, rng seed BOOTSTRAP_SEED, resampling
seeds and, jointly across seeds, items, the same items for both arms; seeds only, said in
the notes, when an evaluation lacks per-item results or the arms' items differ) and the
minimum detectable effect at ALPHA and power POWER, `(t_{1-alpha,n-1} + t_{power,n-1}) sd(d) / sqrt(n)`.

ALPHA = 0.025, one-sided: 0.05 shared by the two pre-registered claims (`claims.py`, which
holds them, their verdict rules, the collapse rule and the a-priori MDE). Every other
comparison here (each arm against `solo`, both learners, greedy and sampled, "greater";
a stale arm against its fresh twin) is secondary and uncorrected: its verdict
(`verdict`) is a description, not a claim. Optimiser steps (a record's `optimizer_step`, else
`update_steps > 0`; unknown when neither is there) and rows withheld by the forgery detector
(`withheld_forgery`, 0 when absent) are summed over a run's rounds and averaged over seeds.
"""

from __future__ import annotations

import math
from typing import Any, Literal, Optional, Sequence

import numpy as np

from ftis_swarm.lab.experiment.paired_tests import (
    BOOTSTRAP_DRAWS,
    BOOTSTRAP_SEED,
    POWER,
    Alternative,
    bootstrap_interval,
    min_detectable_effect,
    sign_flip_p,
    t_test_p,
)

Metric = Literal["greedy", "sampled"]

ALPHA = 0.05 / 2
"""One-sided level of every test: 0.05 shared (Bonferroni) by the two pre-registered claims."""
NONINFERIORITY_MARGIN = 0.05
ESS_MAX = 0.6
"""The pilot gate's ESS bound, required again of the run for a claim to count as tested."""
MAIN_BASE, SECONDARY_BASE = "solo", "solo-2x"
LEARNERS = ("A", "B")
_OPPOSITE = {"greater": "less", "less": "greater"}


def end_point(run: dict[str, Any], end_round: Optional[int]) -> Optional[dict[str, Any]]:
    """The run's evaluation after `end_round` (None: its last); None when the run has none there."""
    evals = run.get("evals") or []
    if end_round is None:
        return evals[-1] if evals else None
    return next((ev for ev in evals if ev.get("round") == end_round), None)


def end_evals(result: dict[str, Any], arm: str, learner: str) -> dict[int, dict[str, Any]]:
    """`{seed: the learner's evaluation at the end point}` of an arm's finished runs (the config's
    `end_round`, pre-registered; the last evaluation for a result without one)."""
    end_round = result.get("config", {}).get("end_round")
    out = {}
    for run in result.get("runs", []):
        ev = end_point(run, end_round) if run.get("arm") == arm else None
        if ev is not None and isinstance(ev.get(learner), dict):
            out[int(run["seed"])] = ev[learner]
    return out


def score(ev: dict[str, Any], metric: Metric) -> float:
    """The evaluation's greedy pass@1 or sampled accuracy; NaN when absent."""
    value = ev.get("accuracy" if metric == "greedy" else "sampled_accuracy")
    return math.nan if value is None else float(value)


def item_scores(ev: dict[str, Any], metric: Metric) -> Optional[np.ndarray]:
    """Per item: greedy right (0/1) or the share of sampled completions right; None for an older result."""
    if metric == "greedy":
        values = ev.get("greedy")
        return None if values is None else np.asarray(values, dtype=float)  # (items,)
    values, k = ev.get("sampled"), ev.get("samples")
    return None if values is None or not k else np.asarray(values, dtype=float) / float(k)  # (items,)


def _item_matrix(a: list[dict[str, Any]], b: list[dict[str, Any]], metric: Metric) -> tuple[Optional[np.ndarray], str]:
    """`(seeds, items)` per-item differences, or None and the reason the item bootstrap is skipped."""
    rows = []
    for ea, eb in zip(a, b):
        ia, ib = item_scores(ea, metric), item_scores(eb, metric)
        if ia is None or ib is None:
            return None, "evaluations lack per-item results"
        if ia.shape != ib.shape or ea.get("digest") != eb.get("digest") or (rows and ia.shape != rows[0].shape):
            return None, "the two arms' held-out items differ"
        rows.append(ia - ib)  # (items,)
    return (np.stack(rows), "") if rows else (None, "no paired seeds")


def paired(result: dict[str, Any], arm: str, base: str, learner: str, metric: Metric = "greedy", *,
           alternative: Alternative = "greater", margin: float = 0.0) -> dict[str, Any]:
    """The seed-paired comparison of `arm` against `base` for one learner (see the module doc for each figure)."""
    ea, eb = end_evals(result, arm, learner), end_evals(result, base, learner)
    notes = [f"{a}: no finished runs" for a in (arm, base) if not (ea if a == arm else eb)]
    seeds = sorted(s for s in set(ea) & set(eb) if math.isfinite(score(ea[s], metric) + score(eb[s], metric)))
    if ea and eb and not seeds:
        notes.append(f"{arm} vs {base}: no seed with {metric} accuracy in both")
    a_end = [score(ea[s], metric) for s in seeds]
    b_end = [score(eb[s], metric) for s in seeds]
    diffs = np.round(np.subtract(a_end, b_end), 12)  # (n,) rounding keeps equal gaps equal
    shifted = diffs + margin  # (n,)
    items, why = _item_matrix([ea[s] for s in seeds], [eb[s] for s in seeds], metric)
    if seeds and items is None:
        notes.append(f"{arm} vs {base} ({learner}, {metric}): item bootstrap skipped, {why}; seeds only")
    if seeds and 2.0 ** -len(seeds) >= ALPHA:
        notes.append(f"{arm} vs {base}: with {len(seeds)} seeds the sign-flip p is at least {2.0 ** -len(seeds):.3f}"
                     f", never below alpha {ALPHA:.4f}")
    return {
        "arm": arm, "base": base, "learner": learner, "metric": metric, "alternative": alternative,
        "margin": margin, "seeds": seeds, "arm_end": a_end, "base_end": b_end, "diffs": diffs.tolist(),
        "mean_diff": float(diffs.mean()) if seeds else math.nan,
        "interval": bootstrap_interval(diffs, items), "item_bootstrap": items is not None,
        "t_p": t_test_p(shifted, alternative), "t_p_opposite": t_test_p(shifted, _OPPOSITE[alternative]),
        "sign_p": sign_flip_p(shifted, alternative), "mde": min_detectable_effect(diffs, alpha=ALPHA),
        "notes": notes,
    }


def verdict(test: dict[str, Any]) -> str:
    """"supported" when both the t-test p and the sign-flip p are below ALPHA, "refuted" when the
    opposite one-sided t-test p is (a secondary comparison's rule), else "not shown" (NaN p: not shown)."""
    if test["t_p"] < ALPHA and test["sign_p"] < ALPHA:
        return "supported"
    return "refuted" if test["t_p_opposite"] < ALPHA else "not shown"


def records(result: dict[str, Any], arm: str, learner: str) -> dict[int, list[dict[str, Any]]]:
    """`{seed: the learner's per-round records}` of an arm's runs."""
    return {int(run["seed"]): [x for x in run.get("rounds", []) if x.get("learner") == learner]
            for run in result.get("runs", []) if run.get("arm") == arm}


def _step(record: dict[str, Any]) -> float:
    if record.get("optimizer_step") is not None:
        return float(record["optimizer_step"])
    if record.get("update_steps") is not None:
        return float(record["update_steps"] > 0)
    return math.nan


def step_counts(result: dict[str, Any], arm: str, learner: str) -> dict[str, Any]:
    """Per seed, optimiser steps and forgery-withheld rows summed over rounds (and rounds with any); their means."""
    steps, withheld, flagged = [], [], []
    for _, recs in sorted(records(result, arm, learner).items()):
        known = [s for s in map(_step, recs) if not math.isnan(s)]
        steps.append(float(sum(known)) if known else math.nan)
        rows = [float(x.get("withheld_forgery") or 0.0) for x in recs]
        withheld.append(sum(rows))
        flagged.append(float(sum(r > 0 for r in rows)))
    return {"arm": arm, "learner": learner, "seeds": len(steps), "optimizer_steps": _mean(steps),
            "optimizer_steps_per_seed": steps, "forgery_withheld": _mean(withheld),
            "forgery_withheld_per_seed": withheld, "forgery_rounds": _mean(flagged)}


def arms_with_runs(result: dict[str, Any]) -> list[str]:
    """The configured arms that have at least one run, in the config's order."""
    have = {run.get("arm") for run in result.get("runs", [])}
    return [a for a in result.get("config", {}).get("arms", []) if a in have]


def comparisons(result: dict[str, Any], base: str = MAIN_BASE, metric: Metric = "greedy") -> list[dict[str, Any]]:
    """Every other arm against `base`, both learners, one-sided "greater"; empty when `base` has no runs."""
    if base not in arms_with_runs(result):
        return []
    return [paired(result, arm, base, learner, metric) for arm in arms_with_runs(result) if arm != base
            for learner in LEARNERS]


def staleness(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Each `<arm>-stale<k>` with runs against `<arm>` (the claim: stale own samples do not hurt learning): per learner,
    a non-inferiority test of `stale - fresh > -NONINFERIORITY_MARGIN`, with its verdict."""
    have = arms_with_runs(result)
    out = []
    for arm in have:
        fresh, _, k = arm.rpartition("-stale")
        if not fresh or not k.isdigit() or fresh not in have:
            continue
        for learner in LEARNERS:
            t = paired(result, arm, fresh, learner, alternative="greater", margin=NONINFERIORITY_MARGIN)
            t["verdict"] = verdict(t)
            out.append(t)
    return out


def staleness_markdown(result: dict[str, Any]) -> str:
    """`staleness` as a table; empty when no stale arm has its fresh twin."""
    tests = staleness(result)
    if not tests:
        return ""
    lines = [f"Each stale arm against the same arm with `max_staleness` 0, paired by seed: non-inferiority "
             f"(stale - fresh > -{NONINFERIORITY_MARGIN}), one-sided at alpha {ALPHA:.4f}.", "",
             _row(["arm", "against", "learner", "seeds", "mean diff", "95% interval", "t p", "sign-flip p", "MDE",
                   "non-inferior"]), "|" + "---|" * 10]
    for t in tests:
        lines.append(_row([t["arm"], t["base"], t["learner"], str(len(t["seeds"])), _num(t["mean_diff"], "+.3f"),
                           _interval(t), _num(t["t_p"]), _num(t["sign_p"]), _num(t["mde"]), t["verdict"]]))
    return "\n".join(lines + _notes(tests))


def _num(x: Optional[float], fmt: str = ".3f") -> str:
    return "-" if x is None or not math.isfinite(x) else format(x, fmt)


def _interval(t: dict[str, Any]) -> str:
    lo, hi = t["interval"]
    return "-" if not math.isfinite(lo) else f"[{lo:+.3f}, {hi:+.3f}]" + ("" if t["item_bootstrap"] else " (seeds)")


def _notes(tests: Sequence[dict[str, Any]]) -> list[str]:
    notes = list(dict.fromkeys(n for t in tests for n in t["notes"]))
    return [""] + [f"- {n}" for n in notes] if notes else []


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def comparison_markdown(result: dict[str, Any], *, base: str = MAIN_BASE, metric: Metric = "greedy") -> str:
    """Every arm and learner: mean end accuracies, the paired difference against `base` and its tests, steps."""
    tests = {(t["arm"], t["learner"]): t for t in comparisons(result, base, metric)}
    lines = [f"Held-out {metric} accuracy at the end point, paired by seed against `{base}`: one-sided tests of "
             f"arm > {base} at alpha {ALPHA:.4f}; 95% bootstrap interval over seeds and items; MDE at power {POWER}. "
             "Optimiser steps and forgery-withheld rows: sums over rounds, mean per seed.",
             "", _row(["arm", "learner", "seeds", "end greedy", "end sampled", f"diff vs {base}", "95% interval", "t p",
                       "sign-flip p", "MDE", "optimiser steps", "forgery-withheld rows"]), "|" + "---|" * 12]
    for arm in arms_with_runs(result):
        for learner in LEARNERS:
            ends = list(end_evals(result, arm, learner).values())
            greedy, sampled = ([score(e, m) for e in ends] for m in ("greedy", "sampled"))
            steps = step_counts(result, arm, learner)
            t = tests.get((arm, learner))
            stats = ([_num(t["mean_diff"], "+.3f"), _interval(t), _num(t["t_p"]), _num(t["sign_p"]), _num(t["mde"])]
                     if t else ["-"] * 5)
            n = str(len(ends)) + (f" ({len(t['seeds'])} paired)" if t and len(t["seeds"]) != len(ends) else "")
            lines.append(_row([arm, learner, n, _num(_mean(greedy)), _num(_mean(sampled)), *stats,
                               _num(steps["optimizer_steps"], ".1f"), _num(steps["forgery_withheld"], ".1f")]))
    missing = [] if base in arms_with_runs(result) else ["", f"- {base}: no finished runs, so no paired differences"]
    return "\n".join(lines + missing + _notes(list(tests.values())))


def _mean(values: Sequence[float]) -> float:
    finite = [v for v in values if not math.isnan(v)]
    return float(np.mean(finite)) if finite else math.nan


def _json(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json(v) for v in value]
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    return value
