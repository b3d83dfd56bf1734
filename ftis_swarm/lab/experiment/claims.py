"""The pre-registered claims (issue 29), their verdict rules, the collapse rule and the a-priori size.

Written before the full run, and changed only with a note in docs/experiment.md saying so.
Each claim is on learner A's held-out greedy pass@1 at the end point (`config.end_round`,
round 4), paired by seed (`stats.paired`: t-test, exact sign-flip test, bootstrap over seeds
and jointly over items), one-sided at ALPHA = 0.025 (Bonferroni: 0.05 over two claims):

- C1 `vertical-nois < solo` for A: the uncorrected peer hurts A. Refuted at this scale
  when NoIS does no harm: `d + 0.05 > 0` (d = nois - solo) at ALPHA by both tests, so the
  data exclude a degradation of 0.05 (the 95% interval's lower end is then above -0.05).
- C2 `vertical-ftis >= solo - 0.05` for A (non-inferior within NONINFERIORITY_MARGIN) and
  `vertical-ftis > vertical-nois` for A. Refuted when either part's opposite holds:
  `ftis - solo < -0.05`, or `ftis < nois`.

A part is "supported" when its t-test p and its sign-flip p are both below ALPHA; a claim
is supported when every part is (an intersection-union test: no correction within a claim).
A claim is refuted when any part's refutation test has both p below ALPHA / parts, so the
chance of refuting a true claim stays at most ALPHA however many parts it has; supported
wins when a part is both (a harm shown, and shown to be under 0.05). Else "not shown".
A claim counts as tested only when the pilot's gate passed and the run's ESS of B's samples
under A in `vertical-ftis` (mean over seeds of the mean over rounds of `ess@1`) is at most
ESS_MAX; its verdict is computed and shown either way.

Secondary, uncorrected, not claims: `vertical-fvis` against `vertical-ftis` for both
learners (accuracy, and collapses: a count cannot reach significance at 12 seeds, so it is
reported, not tested), `vertical-tis` against `vertical-nois` (the weights alone) and
`vertical-ftis` against `vertical-tis` (the filter alone).

A collapse (COLLAPSE_*, fixed before the run): a learner's run collapses when any round
skipped an update for a non-finite loss or gradient, or logged a non-finite loss, or when
its held-out greedy accuracy at any evaluated round is below COLLAPSE_FRACTION of its start
accuracy. Size, a priori: `a_priori_mde(sd, n)`; 12 seeds while the pilot's per-seed sd of
the differences is at most SD_FOR_12 (0.04 gives 0.036), else 16 (`seeds_needed`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
from scipy import stats as sps

from ftis_swarm.lab.experiment.paired_tests import POWER, Alternative, sign_flip_p, t_test_p
from ftis_swarm.lab.experiment.stats import (
    ALPHA,
    ESS_MAX,
    LEARNERS,
    NONINFERIORITY_MARGIN,
    arms_with_runs,
    end_point,
    paired,
    records,
    verdict,
)

COLLAPSE_FRACTION = 0.5
"""A learner collapsed when its held-out greedy accuracy falls below this share of its start accuracy."""
SD_FOR_12 = 0.05
"""Per-seed sd of the differences up to which 12 seeds suffice; above it, 16."""
_OPPOSITE = {"greater": "less", "less": "greater"}


@dataclass(frozen=True)
class Part:
    """One one-sided paired comparison of a claim: `arm - base (+ margin)` against 0 in `alternative`'s direction.

    Its refutation tests `arm - base + refute_margin` in the opposite direction (the margin's
    by default; C1 sets 0.05: "no harm of 0.05" refutes "harm")."""

    arm: str
    base: str
    learner: str
    alternative: Alternative = "greater"
    margin: float = 0.0
    refute_margin: Optional[float] = None


CLAIMS: tuple[tuple[str, str, tuple[Part, ...]], ...] = (
    ("C1", "vertical-nois < solo for A (the uncorrected peer hurts A)",
     (Part("vertical-nois", "solo", "A", "less", refute_margin=NONINFERIORITY_MARGIN),)),
    ("C2", "vertical-ftis >= solo - 0.05 for A, and vertical-ftis > vertical-nois for A",
     (Part("vertical-ftis", "solo", "A", margin=NONINFERIORITY_MARGIN), Part("vertical-ftis", "vertical-nois", "A"))),
)
SECONDARY: tuple[Part, ...] = tuple(
    Part(arm, base, learner) for arm, base in (("vertical-fvis", "vertical-ftis"), ("vertical-tis", "vertical-nois"),
                                               ("vertical-ftis", "vertical-tis")) for learner in LEARNERS)


def part_test(result: dict[str, Any], part: Part, parts: int) -> dict[str, Any]:
    """`stats.paired` of the part, with its refutation test at ALPHA / `parts` and its verdict."""
    t = paired(result, part.arm, part.base, part.learner, alternative=part.alternative, margin=part.margin)
    m = part.margin if part.refute_margin is None else part.refute_margin
    shifted = np.asarray(t["diffs"], dtype=float) + m  # (n,)
    opposite = _OPPOSITE[part.alternative]
    t.update(refute_margin=m, refute_alpha=ALPHA / parts, refute_t_p=t_test_p(shifted, opposite),
             refute_sign_p=sign_flip_p(shifted, opposite) if len(shifted) else math.nan)
    supported = t["t_p"] < ALPHA and t["sign_p"] < ALPHA
    refuted = t["refute_t_p"] < t["refute_alpha"] and t["refute_sign_p"] < t["refute_alpha"]
    t["verdict"] = "supported" if supported else ("refuted" if refuted else "not shown")
    return t


def combine(verdicts: list[str]) -> str:
    """A claim's verdict from its parts': supported if all are, refuted if any is, else not shown."""
    if verdicts and all(v == "supported" for v in verdicts):
        return "supported"
    return "refuted" if "refuted" in verdicts else "not shown"


def offpolicy_ess(result: dict[str, Any], arm: str = "vertical-ftis", learner: str = "A") -> float:
    """Mean over seeds of the mean over rounds of `ess@1` (the peer's samples under the learner); NaN if none."""
    per_seed = []
    for recs in records(result, arm, learner).values():
        values = [float(x["ess@1"]) for x in recs if x.get("ess@1") is not None and math.isfinite(x["ess@1"])]
        if values:
            per_seed.append(float(np.mean(values)))
    return float(np.mean(per_seed)) if per_seed else math.nan


def claims(result: dict[str, Any], gate_passed: bool) -> list[dict[str, Any]]:
    """Every claim of CLAIMS with its parts' tests and verdicts, its verdict, `tested` and its label."""
    ess = offpolicy_ess(result)
    tested = bool(gate_passed) and ess <= ESS_MAX
    out = []
    for name, statement, parts in CLAIMS:
        tests = [part_test(result, p, len(parts)) for p in parts]
        v = combine([t["verdict"] for t in tests])
        out.append({"claim": name, "statement": statement, "parts": tests, "verdict": v, "tested": tested,
                    "label": v if tested else f"not tested ({v})", "ess": ess, "gate_passed": bool(gate_passed)})
    return out


def secondary(result: dict[str, Any]) -> list[dict[str, Any]]:
    """SECONDARY's comparisons whose arms both have runs, each with `stats.verdict` (uncorrected)."""
    have = set(arms_with_runs(result))
    out = []
    for p in SECONDARY:
        if {p.arm, p.base} <= have:
            t = paired(result, p.arm, p.base, p.learner, alternative=p.alternative)
            t["verdict"] = verdict(t)
            out.append(t)
    return out


def a_priori_mde(sd: float, n: int, *, alpha: float = ALPHA, power: float = POWER) -> float:
    """`(t_{1-alpha,n-1} + t_{power,n-1}) sd / sqrt(n)`: the effect n seeds detect at per-seed sd `sd`."""
    if n < 2 or not sd >= 0:
        return math.nan
    return float((sps.t.ppf(1 - alpha, n - 1) + sps.t.ppf(power, n - 1)) * sd / math.sqrt(n))


def seeds_needed(sd: float) -> int:
    """12 seeds at a pilot per-seed sd up to SD_FOR_12, else 16 (issue 29's sizing rule)."""
    return 12 if sd <= SD_FOR_12 else 16


def _nonfinite(record: dict[str, Any]) -> bool:
    loss = record.get("loss")
    return bool(record.get("updates_skipped_nonfinite")) or (loss is not None and not math.isfinite(float(loss)))


def collapses(result: dict[str, Any], arm: str, learner: str) -> dict[str, Any]:
    """Per seed whether the learner's run collapsed (the module doc's rule) and why; the count."""
    start = (result.get("start") or {}).get(learner) or {}
    floor = COLLAPSE_FRACTION * float(start["accuracy"]) if start.get("accuracy") is not None else math.nan
    why: dict[int, list[str]] = {}
    for run in result.get("runs", []):
        if run.get("arm") != arm:
            continue
        seed, reasons = int(run["seed"]), []
        if any(_nonfinite(x) for x in run.get("rounds", []) if x.get("learner") == learner):
            reasons.append("non-finite loss or gradient")
        for ev in run.get("evals") or []:
            acc = (ev.get(learner) or {}).get("accuracy")
            if acc is not None and acc < floor:
                reasons.append(f"accuracy {acc:.3f} after round {ev.get('round')} under {floor:.3f}")
                break
        why[seed] = reasons
    return {"arm": arm, "learner": learner, "seeds": len(why), "collapsed": sum(bool(r) for r in why.values()),
            "floor": floor, "reasons": {str(s): r for s, r in sorted(why.items()) if r}}


def standing(result: dict[str, Any], arm: str, learner: str = "A") -> dict[str, Any]:
    """How the standing rule treated the peer: mean `frac_capped_unproven@1` (B's tokens capped while B is
    unproven to the learner) over rounds and seeds, and per seed the first round with none capped."""
    means, earned = [], []
    for recs in records(result, arm, learner).values():
        capped = [(int(x.get("round", 0)), float(x["frac_capped_unproven@1"])) for x in recs
                  if x.get("frac_capped_unproven@1") is not None]
        if capped:
            means.append(float(np.mean([c for _, c in capped])))
            earned.append(next((r for r, c in capped if c == 0.0), math.nan))
    return {"arm": arm, "learner": learner, "frac_capped_unproven": float(np.mean(means)) if means else math.nan,
            "standing_round_per_seed": earned}


def end_point_of(result: dict[str, Any]) -> Optional[int]:
    """The end point the claims test: the config's `end_round` (the last evaluation when absent)."""
    end = result.get("config", {}).get("end_round")
    if end is None:
        rounds = [ev.get("round") for run in result.get("runs", []) for ev in [end_point(run, None)] if ev]
        end = max(rounds) if rounds else None
    return end
