"""The experiment's paired tests on synthetic results: each test, the bootstrap, old and partial results.

The pre-registered claims' verdicts are tests/lab/test_experiment_claims.py's."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from scipy import stats

from ftis_swarm.lab.experiment.claims_tables import statistics, statistics_markdown
from ftis_swarm.lab.experiment.paired_tests import bootstrap_interval, min_detectable_effect, sign_flip_p, t_test_p
from ftis_swarm.lab.experiment.stats import ALPHA, comparison_markdown, paired, step_counts

ITEMS = 20


def ev(correct: int, *, items: int = ITEMS, sampled: bool = True, old: bool = False, digest: str = "d0") -> dict:
    """An evaluation with `correct` greedy answers right (the first ones) and, per item, 2 of 4 samples right."""
    greedy = [1] * correct + [0] * (items - correct)
    out = {"accuracy": correct / items, "items": items, "digest": digest}
    if old:
        return out
    out["greedy"] = greedy
    if sampled:
        counts = [(2 + g + i % 2) % 5 for i, g in enumerate(greedy)]
        out.update(sampled=counts, samples=4, sampled_accuracy=sum(counts) / (4 * items))
    return out


def run(arm: str, seed: int, a: int, b: int, *, ess: float = 0.5, rounds: int = 3, **kw) -> dict:
    recs = []
    for r in range(1, rounds + 1):
        for learner in ("A", "B"):
            recs.append({"round": r, "learner": learner, "reward": 0.1 * r, "ess@1": ess, "optimizer_step": r % 2,
                         "withheld_forgery": 0.0})
    return {"arm": arm, "seed": seed, "rounds": recs,
            "evals": [{"round": rounds, "A": ev(a, **kw), "B": ev(b, **kw)}]}


def result(runs: list[dict], arms: list[str]) -> dict:
    cfg = {"arms": arms, "seeds": sorted({r["seed"] for r in runs}), "node": {"rounds": 3}, "eval_rounds": [3],
           "learners": [{"model": "a", "learner": {"lr": 1e-5}},
                        {"model": "b", "learner": {"lr": 1e-4, "lora": {"rank": 8}}}]}
    return {"config": cfg, "start": {"round": 0, "A": ev(8), "B": ev(4)}, "runs": runs}


SOLO_A, SOLO_B = [8, 9, 7, 8, 10, 9], [4, 5, 3, 4, 6, 5]
UP = [2, 3, 1, 2, 4, 2]
"""Items gained per seed: +0.05 to +0.2, every seed positive."""
ABOUT_EVEN = [0, 0, 1, 0, 0, 0]
"""A gains nothing but one item: non-inferior within 0.05 on every seed."""


def experiment(gain_a: list[int], gain_b: list[int], *, nois_a: list[int] = (0,) * 6, horizontal: list[int] = (0,) * 6,
               ess: float = 0.5) -> dict:
    """Six seeds of solo, vertical-ftis (+gain per seed), vertical-nois (A +nois_a) and horizontal-ftis (-horizontal)."""
    runs = []
    for s in range(6):
        a, b = SOLO_A[s], SOLO_B[s]
        runs += [run("solo", s, a, b), run("vertical-ftis", s, a + gain_a[s], b + gain_b[s], ess=ess),
                 run("vertical-nois", s, a + nois_a[s], b),
                 run("horizontal-ftis", s, a + gain_a[s] - horizontal[s], b + gain_b[s] - horizontal[s])]
    return result(runs, ["solo", "vertical-nois", "vertical-ftis", "horizontal-ftis"])


def test_t_test_p_is_scipys_paired_test_and_the_margin_shifts_the_null():
    res = experiment([1, 2, 0, 3, 1, -1], [2, 2, 2, 2, 2, 2])
    arm = np.array([a + g for a, g in zip(SOLO_A, [1, 2, 0, 3, 1, -1])]) / ITEMS
    base = np.array(SOLO_A) / ITEMS
    t = paired(res, "vertical-ftis", "solo", "A")
    assert t["seeds"] == list(range(6)) and t["diffs"] == pytest.approx(arm - base)
    assert t["t_p"] == pytest.approx(stats.ttest_rel(arm, base, alternative="greater").pvalue, rel=1e-9)
    assert t["t_p_opposite"] == pytest.approx(stats.ttest_rel(arm, base, alternative="less").pvalue, rel=1e-9)
    ni = paired(res, "vertical-ftis", "solo", "A", margin=0.05)
    assert ni["t_p"] == pytest.approx(stats.ttest_rel(arm + 0.05, base, alternative="greater").pvalue, rel=1e-9)
    assert ni["t_p"] < t["t_p"] and ni["mean_diff"] == t["mean_diff"]
    assert math.isnan(t_test_p([0.1])) and math.isnan(t_test_p([0.0, 0.0, 0.0]))


def test_sign_flip_p_is_exact():
    assert sign_flip_p([0.1, 0.2, 0.05, 0.3, 0.1, 0.15]) == 1 / 64  # only the observed pattern reaches its mean
    assert sign_flip_p([0.1, 0.2, 0.05, 0.3, 0.1, 0.0]) == 2 / 64  # a zero difference ties under both signs
    assert sign_flip_p([1.0, 1.0, -1.0]) == 4 / 8  # sums 3 (1 pattern) and 1 (3 patterns) reach the observed 1
    assert sign_flip_p([1.0, 1.0, -1.0], "less") == 7 / 8
    d = np.array([0.3, -0.1, 0.25, 0.05, -0.2, 0.4, 0.1])
    brute = np.mean([np.dot(s, d) >= d.sum() - 1e-12 for s in itertools.product((1, -1), repeat=d.size)])
    assert sign_flip_p(d) == pytest.approx(brute)


def test_sign_flip_p_counts_the_ties_rounding_leaves_apart_as_recorded_and_is_scipys_on_integers():
    """Experiment 29's vertical-fvis - vertical-ftis for A (docs/experiment29/stats.json): differences of k/95 items
    rounded to 12 digits, so tied sign patterns differ by up to 2e-12. The recorded p counts them, as scipy does
    on the item counts; scipy on the rounded differences (tie tolerance 100 eps |observed|) misses 1,024 patterns."""
    counts = np.array([9, 2, 0, 0, 0, 2, -3, -1, 0, -1, 0, 0, 0, 4, 4, 6])
    diffs = np.round(counts / 95, 12)

    def scipy_p(x: np.ndarray, alternative: str = "greater") -> float:
        return stats.permutation_test((x,), np.sum, permutation_type="samples", alternative=alternative,
                                      n_resamples=np.inf, vectorized=True).pvalue

    assert sign_flip_p(diffs) == scipy_p(counts) == 0.052734375 == 3456 / 2**16  # as recorded
    assert sign_flip_p(diffs, "less") == scipy_p(counts, "less")
    assert scipy_p(diffs) == pytest.approx(0.052734375 - 1024 / 2**16)  # why the test is not scipy's


def test_bootstrap_interval_holds_the_mean_is_reproducible_and_resamples_items():
    res = experiment([1, 2, 0, 3, 1, -1], [2, 2, 2, 2, 2, 2])
    t = paired(res, "vertical-ftis", "solo", "A")
    lo, hi = t["interval"]
    assert t["item_bootstrap"] and lo < t["mean_diff"] < hi
    assert paired(res, "vertical-ftis", "solo", "A")["interval"] == (lo, hi)
    b = paired(res, "vertical-ftis", "solo", "B")  # every seed gains exactly 0.1: only items spread it
    assert b["diffs"] == pytest.approx([0.1] * 6)
    assert bootstrap_interval(b["diffs"]) == pytest.approx((0.1, 0.1))
    assert b["interval"][0] < 0.1 < b["interval"][1]


def test_minimum_detectable_effect_against_a_hand_value():
    d = [0.1, 0.2, 0.0, 0.1, 0.3, 0.1]  # sd 0.103280, n 6; t tables: t_(1 - 0.025, 5) 2.5706, t_(0.8, 5) 0.9195
    assert ALPHA == 0.025
    assert min_detectable_effect(d, alpha=ALPHA) == pytest.approx((2.5706 + 0.9195) * 0.103280 / math.sqrt(6), abs=2e-4)
    assert math.isnan(min_detectable_effect([0.1], alpha=ALPHA))


def test_five_seeds_never_reach_alpha_and_say_so():
    res = experiment([0] * 6, UP)
    res["runs"] = [r for r in res["runs"] if r["seed"] < 5]
    t = paired(res, "vertical-ftis", "solo", "B")
    assert t["t_p"] < ALPHA and t["sign_p"] == 1 / 32
    assert any("never below alpha" in n for n in t["notes"])


def test_missing_arms_and_old_evaluations_do_not_crash_and_are_said():
    runs = [run(arm, s, a + (arm != "solo"), b, old=True)
            for s, (a, b) in enumerate(zip(SOLO_A, SOLO_B)) for arm in ("solo", "vertical-ftis")]
    for r in runs:
        for x in r["rounds"]:
            del x["optimizer_step"], x["withheld_forgery"], x["ess@1"]
    res = result(runs, ["solo", "vertical-nois", "vertical-ftis"])
    out = statistics(res, True)
    json.dumps(out, allow_nan=False)
    assert out["ess"] is None and not out["tested"]
    assert {c["claim"]: c["verdict"] for c in out["claims"]}["C1"] == "not shown"
    notes = "\n".join(out["notes"])
    assert "vertical-nois: no finished runs" in notes
    assert "item bootstrap skipped, evaluations lack per-item results" in notes
    sampled = out["comparisons"]["solo"]["sampled"][0]
    assert sampled["seeds"] == [] and sampled["t_p"] is None
    greedy = out["comparisons"]["solo"]["greedy"][0]
    assert greedy["mean_diff"] == pytest.approx(1 / ITEMS) and not greedy["item_bootstrap"]
    steps = step_counts(res, "solo", "A")
    assert math.isnan(steps["optimizer_steps"]) and steps["forgery_withheld"] == 0.0
    table = comparison_markdown(res, base="solo-2x")
    assert "solo-2x: no finished runs, so no paired differences" in table
    assert "| vertical-ftis | A | 6 | 0.475 | - | - |" in table


def test_steps_and_forgery_flags_are_summed_per_seed_and_averaged():
    res = experiment([0] * 6, [0] * 6)
    res["runs"][1]["rounds"][0]["withheld_forgery"] = 12.0  # seed 0 of vertical-ftis, round 1, learner A
    del res["runs"][5]["rounds"][0]["optimizer_step"]  # seed 1 of vertical-ftis: update_steps instead
    res["runs"][5]["rounds"][0]["update_steps"] = 3
    steps = step_counts(res, "vertical-ftis", "A")
    assert steps["optimizer_steps_per_seed"] == [2.0] * 6  # rounds 1 and 3 of 3 stepped
    assert steps["forgery_withheld_per_seed"] == [12.0] + [0.0] * 5
    assert steps["forgery_withheld"] == pytest.approx(2.0) and steps["forgery_rounds"] == pytest.approx(1 / 6)
    table = comparison_markdown(res)
    assert "| vertical-ftis | A | 6 | 0.425 |" in table and "| 2.0 | 2.0 |" in table


def test_statistics_markdown_holds_the_claims_the_secondary_and_both_comparisons():
    res = experiment(ABOUT_EVEN, UP, nois_a=[-3, -2, -4, -3, -2, -3])
    text = statistics_markdown(res, True)
    heads = [line for line in text.splitlines() if line.startswith("### ")]
    assert heads == ["### Claims (pre-registered)", "### Secondary comparisons, collapses and standing",
                     "### Against solo, greedy (uncorrected)", "### Against solo, sampled (uncorrected)"]
    assert "| C1 | vertical-nois < solo | A | 6 | -0.142 |" in text and "| supported | supported |" in text
    assert "Claims tested" in text and "| vertical-ftis | B | 6 |" in text


def test_a_stale_arm_is_tested_for_non_inferiority_against_its_fresh_twin():
    res = experiment(ABOUT_EVEN, UP)
    fresh = {r["seed"]: r for r in res["runs"] if r["arm"] == "vertical-ftis"}
    # stale A: one item (0.05) worse on every seed, i.e. exactly on the margin; stale B: as fresh
    res["runs"] += [run("vertical-ftis-stale1", s, fresh[s]["evals"][0]["A"]["greedy"].count(1) - 1,
                        fresh[s]["evals"][0]["B"]["greedy"].count(1)) for s in range(6)]
    res["config"]["arms"].append("vertical-ftis-stale1")
    tests = {t["learner"]: t for t in statistics(res, True)["staleness"]}
    assert tests["A"]["base"] == "vertical-ftis" and tests["A"]["mean_diff"] == pytest.approx(-0.05)
    assert tests["A"]["verdict"] == "not shown"  # on the margin: not shown to be better than -0.05
    assert tests["B"]["mean_diff"] == 0.0 and tests["B"]["verdict"] == "supported"  # 0 > -0.05 on every seed
    text = statistics_markdown(res, True)
    assert "### Stale own samples (max_staleness)" in text
    assert "| vertical-ftis-stale1 | vertical-ftis | B | 6 | +0.000 |" in text
    # no fresh twin: no section
    res["runs"] = [r for r in res["runs"] if r["arm"] != "vertical-ftis"]
    assert statistics(res, True)["staleness"] == [] and "Stale own" not in statistics_markdown(res, True)


def test_the_item_bootstrap_resamples_items_jointly_across_seeds():
    # every seed gains on the same 4 of 20 items and loses on none: the items' spread is shared by the seeds,
    # so the interval is that of one seed's items (a per-seed item draw would shrink it by about sqrt(12))
    row = np.array([1.0] * 4 + [0.0] * 16)  # (items,)
    item_diffs = np.tile(row, (12, 1))  # (seeds, items)
    lo, hi = bootstrap_interval([0.2] * 12, item_diffs)
    one_lo, one_hi = bootstrap_interval([0.2], row[None, :])
    assert hi - lo == pytest.approx(one_hi - one_lo, rel=0.15)
    assert hi - lo > 0.25  # about 4 x sqrt(0.2 x 0.8 / 20)
