"""The experiment's statistics as one JSON-ready dict and as markdown: claims first, then the rest.

What is computed, and the rules, are `claims.py`'s (the pre-registered claims, collapses,
standing, the a-priori size) and `stats.py`'s (the paired tests of every arm against `solo`);
this file lays them out for `summary.json` / docs/experiment_stats.json and `table.md`.
"""

from __future__ import annotations

import math
from typing import Any, Optional

from ftis_swarm.lab.experiment.claims import (
    COLLAPSE_FRACTION,
    SD_FOR_12,
    a_priori_mde,
    claims,
    collapses,
    end_point_of,
    offpolicy_ess,
    secondary,
    seeds_needed,
    standing,
)
from ftis_swarm.lab.experiment.paired_tests import BOOTSTRAP_DRAWS, BOOTSTRAP_SEED, POWER
from ftis_swarm.lab.experiment.stats import (
    ALPHA,
    ESS_MAX,
    LEARNERS,
    MAIN_BASE,
    NONINFERIORITY_MARGIN,
    _interval,
    _json,
    _notes,
    _num,
    _row,
    arms_with_runs,
    comparison_markdown,
    comparisons,
    staleness,
    staleness_markdown,
    step_counts,
)


def design(result: dict[str, Any], pilot_sd: Optional[float]) -> dict[str, Any]:
    """The a-priori size: seeds run, seeds the pilot's sd asks for, and the MDE at that sd (None without one)."""
    n = len(result.get("config", {}).get("seeds", []))
    return {"seeds": n, "pilot_sd": pilot_sd, "seeds_needed": seeds_needed(pilot_sd) if pilot_sd is not None else None,
            "a_priori_mde": a_priori_mde(pilot_sd, n) if pilot_sd is not None else math.nan,
            "mde_at_sd_0.04_12_seeds": a_priori_mde(0.04, 12), "end_round": end_point_of(result)}


def statistics(result: dict[str, Any], gate_passed: bool, *, pilot_sd: Optional[float] = None) -> dict[str, Any]:
    """Everything as one JSON-ready dict (NaN as None), with the fixed settings and every note."""
    cl = claims(result, gate_passed)
    comps = {MAIN_BASE: {m: comparisons(result, MAIN_BASE, m) for m in ("greedy", "sampled")}}
    second = secondary(result)
    tests = [t for c in cl for t in c["parts"]] + [t for ts in comps[MAIN_BASE].values() for t in ts] + second
    notes = [f"{MAIN_BASE}: no finished runs"] if MAIN_BASE not in arms_with_runs(result) else []
    notes += [n for t in tests for n in t["notes"]]
    ess = offpolicy_ess(result)
    arms = arms_with_runs(result)
    return _json({
        "alpha": ALPHA, "power": POWER, "noninferiority_margin": NONINFERIORITY_MARGIN, "ess_max": ESS_MAX,
        "collapse_fraction": COLLAPSE_FRACTION, "sd_for_12_seeds": SD_FOR_12, "design": design(result, pilot_sd),
        "bootstrap": {"draws": BOOTSTRAP_DRAWS, "seed": BOOTSTRAP_SEED, "level": 0.95, "items": "joint across seeds"},
        "gate_passed": bool(gate_passed), "ess": ess, "ess_holds": ess <= ESS_MAX,
        "tested": bool(gate_passed) and ess <= ESS_MAX, "claims": cl, "secondary": second, "comparisons": comps,
        "collapses": [collapses(result, arm, learner) for arm in arms for learner in LEARNERS],
        "standing": [standing(result, arm) for arm in arms if arm != MAIN_BASE],
        "staleness": staleness(result),
        "steps": [step_counts(result, arm, learner) for arm in arms for learner in LEARNERS],
        "notes": list(dict.fromkeys(notes)),
    })


def _comparison(t: dict[str, Any]) -> str:
    sign = ">" if t["alternative"] == "greater" else "<"
    return f"{t['arm']} {sign} {t['base']}" + (f" - {t['margin']:g}" if t["margin"] else "")


def claims_markdown(result: dict[str, Any], gate_passed: bool, *, pilot_sd: Optional[float] = None) -> str:
    """The claims table (per part: test, refutation test, verdicts); the gate, ESS and a-priori size above it."""
    cl = claims(result, gate_passed)
    ess, size = cl[0]["ess"], design(result, pilot_sd)
    held = "holds" if ess <= ESS_MAX else ("not measured" if math.isnan(ess) else "does not hold")
    sd = ("no pilot sd given" if pilot_sd is None else
          f"pilot per-seed sd {pilot_sd:.3f}: {size['seeds_needed']} seeds needed, a-priori MDE "
          f"{_num(size['a_priori_mde'])} at {size['seeds']} seeds")
    lines = [f"Pilot gate {'passed' if gate_passed else 'not passed'}; ESS of B's samples under A in vertical-ftis "
             f"(mean over seeds and rounds) {_num(ess)}, at most {ESS_MAX}: {held}. "
             f"Claims {'tested' if cl[0]['tested'] else 'not tested'}; alpha {ALPHA:.4f} each, one-sided, greedy "
             f"pass@1 after round {size['end_round']}; {sd}.",
             "", _row(["claim", "comparison", "learner", "seeds", "mean diff", "95% interval", "t p", "sign-flip p",
                       "refuted if", "refute t p", "refute sign p", "MDE", "part", "claim verdict"]), "|" + "---|" * 14]
    for c in cl:
        for i, t in enumerate(c["parts"]):
            opposite = "<" if t["alternative"] == "greater" else ">"
            bound = f"{-t['refute_margin']:+g}" if t["refute_margin"] else "0"
            refute = f"diff {opposite} {bound} at {t['refute_alpha']:.4f}"
            lines.append(_row([c["claim"] if i == 0 else "", _comparison(t), t["learner"], str(len(t["seeds"])),
                               _num(t["mean_diff"], "+.3f"), _interval(t), _num(t["t_p"]), _num(t["sign_p"]), refute,
                               _num(t["refute_t_p"]), _num(t["refute_sign_p"]), _num(t["mde"]), t["verdict"],
                               c["label"] if i == 0 else ""]))
    return "\n".join(lines + _notes([t for c in cl for t in c["parts"]]))


def secondary_markdown(result: dict[str, Any]) -> str:
    """The secondary comparisons (uncorrected) and the collapse count per arm and learner."""
    lines = [f"Secondary, uncorrected (one-sided at {ALPHA:.4f}, not claims).", "",
             _row(["comparison", "learner", "seeds", "mean diff", "95% interval", "t p", "sign-flip p", "reading"]),
             "|" + "---|" * 8]
    second = secondary(result)
    if not second:
        lines.append(_row(["-"] * 8) + "  (no pair of these arms has runs)")
    for t in second:
        lines.append(_row([_comparison(t), t["learner"], str(len(t["seeds"])), _num(t["mean_diff"], "+.3f"),
                           _interval(t), _num(t["t_p"]), _num(t["sign_p"]), t["verdict"]]))
    lines += ["", f"Collapses (defined before the run: a non-finite loss or gradient, or held-out greedy accuracy "
                  f"under {COLLAPSE_FRACTION:g} x the start's at any evaluated round); a count, not tested.", "",
              _row(["arm", "learner", "seeds", "collapsed", "reasons"]), "|" + "---|" * 5]
    for arm in arms_with_runs(result):
        for learner in LEARNERS:
            c = collapses(result, arm, learner)
            reasons = "; ".join(f"seed {s}: {', '.join(r)}" for s, r in c["reasons"].items()) or "-"
            lines.append(_row([arm, learner, str(c["seeds"]), str(c["collapsed"]), reasons]))
    lines += ["", "Standing: B is a new identity to A; share of B's tokens capped while unproven "
                  "(`frac_capped_unproven@1`, mean over rounds and seeds) and the first round with none capped.", "",
              _row(["arm", "frac capped unproven", "standing from round (per seed)"]), "|---|---|---|"]
    for arm in arms_with_runs(result):
        if arm != MAIN_BASE:
            s = standing(result, arm)
            rounds = ", ".join("-" if math.isnan(r) else str(r) for r in s["standing_round_per_seed"]) or "-"
            lines.append(_row([arm, _num(s["frac_capped_unproven"]), rounds]))
    return "\n".join(lines)


def statistics_markdown(result: dict[str, Any], gate_passed: bool, *, pilot_sd: Optional[float] = None) -> str:
    """The claims, the secondary comparisons and collapses, then every arm against `solo`, greedy and sampled."""
    parts = ["### Claims (pre-registered)", claims_markdown(result, gate_passed, pilot_sd=pilot_sd),
             "### Secondary comparisons, collapses and standing", secondary_markdown(result)]
    for metric in ("greedy", "sampled"):
        parts += [f"### Against {MAIN_BASE}, {metric} (uncorrected)", comparison_markdown(result, base=MAIN_BASE,
                                                                                           metric=metric)]
    stale = staleness_markdown(result)
    if stale:
        parts += ["### Stale own samples (max_staleness)", stale]
    return "\n\n".join(parts)
