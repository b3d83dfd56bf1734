"""The pre-registered claims on synthetic results whose verdicts are known: supported, refuted, not shown;
the corrected refutation, the collapse rule, the a-priori size, the end point and the untested label."""

from __future__ import annotations

import math

import pytest

from ftis_swarm.lab.experiment.claims import (
    Part,
    a_priori_mde,
    claims,
    collapses,
    offpolicy_ess,
    part_test,
    seeds_needed,
    standing,
)
from ftis_swarm.lab.experiment.claims_tables import claims_markdown, statistics
from ftis_swarm.lab.experiment.stats import ALPHA

ITEMS = 20
SEEDS = 12
SOLO = [8, 9, 7, 8, 10, 9, 8, 7, 9, 8, 10, 8]
"""A's greedy items right (of 20) per seed in solo."""
HURTS = [-3, -2, -4, -3, -2, -3, -4, -2, -3, -3, -2, -4]
"""-0.1 to -0.2 on every seed."""
HELPS = [2, 3, 1, 2, 4, 2, 3, 2, 1, 3, 2, 2]
EVEN = [0, 0, 1, 0, 0, -1, 0, 0, 1, 0, 0, 0]
"""No harm: within one item (0.05) of the base on every seed."""
NOISY = [4, -4, 3, -3, 5, -5, 2, -2, 4, -4, 1, -1]
"""Mean 0, sd about 0.17: nothing can be shown either way at 12 seeds."""


def ev(correct: int) -> dict:
    return {"accuracy": correct / ITEMS, "greedy": [1] * correct + [0] * (ITEMS - correct), "digest": "d"}


def run(arm: str, seed: int, a: int, *, ess: float = 0.4, early: int | None = None,
        extra: dict[int, dict] | None = None) -> dict:
    """A run of 4 rounds evaluated after rounds 2 (`early` right, else `a`) and 4 (`a` right)."""
    recs = [{"round": r, "learner": "A", "ess@1": ess, **(extra or {}).get(r, {})} for r in range(1, 5)]
    return {"arm": arm, "seed": seed, "rounds": recs,
            "evals": [{"round": 2, "A": ev(a if early is None else early), "B": ev(5)},
                      {"round": 4, "A": ev(a), "B": ev(5)}]}


def result(nois: list[int], ftis: list[int], *, ess: float = 0.4, end_round: int = 4,
           early: int | None = None) -> dict:
    """12 seeds: solo, vertical-nois (solo + nois) and vertical-ftis (solo + ftis), for learner A."""
    runs = []
    for s in range(SEEDS):
        runs += [run("solo", s, SOLO[s], early=early), run("vertical-nois", s, SOLO[s] + nois[s], early=early),
                 run("vertical-ftis", s, SOLO[s] + ftis[s], ess=ess, early=early)]
    cfg = {"arms": ["solo", "vertical-nois", "vertical-ftis"], "seeds": list(range(SEEDS)), "end_round": end_round}
    return {"config": cfg, "start": {"round": 0, "A": ev(8), "B": ev(5)}, "runs": runs}


def verdicts(res: dict, gate: bool = True) -> dict[str, dict]:
    return {c["claim"]: c for c in claims(res, gate)}


def test_nois_hurts_and_ftis_holds_up_both_claims_supported():
    c = verdicts(result(HURTS, EVEN))
    assert c["C1"]["verdict"] == "supported" and c["C1"]["tested"]
    assert [p["verdict"] for p in c["C2"]["parts"]] == ["supported", "supported"]  # within 0.05 of solo; > nois
    assert c["C2"]["label"] == "supported"


def test_nois_does_no_harm_refutes_claim_1_at_this_scale():
    c = verdicts(result(EVEN, EVEN))
    part = c["C1"]["parts"][0]
    assert part["refute_margin"] == 0.05 and part["refute_t_p"] < ALPHA and part["refute_sign_p"] < ALPHA
    assert part["interval"][0] > -0.05  # the interval excludes a 0.05 degradation
    assert c["C1"]["verdict"] == "refuted"
    assert c["C2"]["parts"][0]["verdict"] == "supported" and c["C2"]["parts"][1]["verdict"] == "not shown"
    assert c["C2"]["verdict"] == "not shown"


def test_nois_helping_more_than_ftis_refutes_claim_2():
    c = verdicts(result(HELPS, EVEN))
    assert c["C1"]["verdict"] == "refuted"
    assert [p["verdict"] for p in c["C2"]["parts"]] == ["supported", "refuted"]  # ftis < nois, shown
    assert c["C2"]["verdict"] == "refuted"


def test_noise_shows_nothing():
    c = verdicts(result(NOISY, NOISY))
    assert c["C1"]["verdict"] == "not shown" and c["C2"]["verdict"] == "not shown"


def test_a_refutation_of_a_two_part_claim_needs_alpha_over_two():
    # ftis below nois with both refutation p between ALPHA / 2 and ALPHA: refuted alone, not as one of two parts
    gap = [1, -2, -2, -2, 0, -2, 1, -2, 1, -2, -2, -1]
    res = result([0] * SEEDS, gap)
    t = part_test(res, Part("vertical-ftis", "vertical-nois", "A"), 2)
    assert ALPHA / 2 < t["refute_t_p"] < ALPHA and ALPHA / 2 < t["refute_sign_p"] < ALPHA
    assert t["refute_alpha"] == ALPHA / 2 and t["verdict"] == "not shown"
    assert part_test(res, Part("vertical-ftis", "vertical-nois", "A"), 1)["verdict"] == "refuted"


def test_the_end_point_is_the_pre_registered_round():
    res = result(HURTS, EVEN, early=0)
    for r in res["runs"]:  # the round-2 evaluation has nothing right; the end point is round 4
        assert r["evals"][0]["round"] == 2 and r["evals"][0]["A"]["accuracy"] == 0.0
    assert verdicts(res)["C1"]["parts"][0]["mean_diff"] == pytest.approx(sum(HURTS) / SEEDS / ITEMS)
    res["config"]["end_round"] = 2  # every arm 0 at round 2: no difference at all
    assert verdicts(res)["C1"]["parts"][0]["mean_diff"] == 0.0


@pytest.mark.parametrize("gate, ess", [(True, 0.7), (False, 0.4)])
def test_claims_are_not_tested_without_the_gate_or_the_runs_ess(gate, ess):
    res = result(HURTS, EVEN, ess=ess)
    assert offpolicy_ess(res) == pytest.approx(ess)
    c1 = verdicts(res, gate)["C1"]
    assert c1["verdict"] == "supported" and not c1["tested"] and c1["label"] == "not tested (supported)"
    text = claims_markdown(res, gate, pilot_sd=0.04)
    assert "Claims not tested" in text and "not tested (supported)" in text
    assert "12 seeds needed, a-priori MDE 0.036 at 12 seeds" in text


def test_a_priori_size():
    assert a_priori_mde(0.04, 12) == pytest.approx(0.0356, abs=5e-4)  # (2.201 + 0.876) 0.04 / sqrt(12)
    assert a_priori_mde(0.06, 16) < a_priori_mde(0.06, 12)
    assert seeds_needed(0.04) == 12 and seeds_needed(0.05) == 12 and seeds_needed(0.051) == 16
    assert math.isnan(a_priori_mde(0.04, 1))


def test_collapses_are_counted_by_the_fixed_rule():
    res = result(EVEN, EVEN)
    res["config"]["arms"].append("vertical-fvis")
    res["runs"] += [run("vertical-fvis", 0, 9, extra={2: {"loss": float("nan")}}),  # a non-finite loss
                    run("vertical-fvis", 1, 9, early=3),  # 0.15 after round 2 < half the start's 0.4
                    run("vertical-fvis", 2, 2, extra={3: {"updates_skipped_nonfinite": 1.0}}),  # both
                    run("vertical-fvis", 3, 8, extra={1: {"loss": 0.3}})]
    c = collapses(res, "vertical-fvis", "A")
    assert c["seeds"] == 4 and c["collapsed"] == 3 and c["floor"] == pytest.approx(0.2)
    assert c["reasons"]["0"] == ["non-finite loss or gradient"]
    assert c["reasons"]["1"] == ["accuracy 0.150 after round 2 under 0.200"]  # recovered by round 4: still counted
    assert len(c["reasons"]["2"]) == 2 and "3" not in c["reasons"]
    out = statistics(res, True, pilot_sd=0.06)
    assert out["design"]["seeds_needed"] == 16 and out["design"]["end_round"] == 4
    assert {(x["arm"], x["learner"]): x["collapsed"] for x in out["collapses"]}[("vertical-fvis", "A")] == 3


def test_standing_reports_capped_share_and_the_round_it_was_earned():
    res = result(EVEN, EVEN)
    for r in res["runs"]:
        if r["arm"] == "vertical-ftis":
            for x in r["rounds"]:
                x["frac_capped_unproven@1"] = 0.5 if x["round"] <= 2 else 0.0
    s = standing(res, "vertical-ftis")
    assert s["frac_capped_unproven"] == pytest.approx(0.25) and s["standing_round_per_seed"] == [3] * SEEDS
