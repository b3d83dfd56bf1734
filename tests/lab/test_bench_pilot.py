"""The pilot gate (`ftis-node bench pilot`): its checks and its choice on given numbers, and the
held-out evaluation it rests on (greedy and sampled correctness per item) on a tiny model."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from ftis_swarm.lab.experiment.heldout import evaluate_heldout, sampled_rewards
from ftis_swarm.lab.experiment.pilot import Gate, choose, pilot_table
from ftis_swarm.models import load_model
from ftis_swarm.models.tiny import build_tiny_qwen2, qwen_tokenizer_dir
from ftis_swarm.tasks import get_task
from ftis_swarm.wire import Group


@pytest.mark.parametrize("flags, message", [
    (["--candidates", "a,b,c,d"], "--candidates needs 1 to 3 models, got 4"),
    (["--candidates", "smollm2-slim27", "--task", "arith"], "task arith has no fixed held-out set"),
    (["--candidates", "no-such-model"], "unknown model 'no-such-model'"),
    (["--samples", "1"], "--samples must be at least 2"),
    (["--sigmas", "1,x"], "--sigmas needs comma-separated numbers"),
    (["--sigmas", "0"], "must be in (0, 10]"),
])
def test_bench_pilot_refuses_bad_flags_in_one_sentence(flags, message):
    proc = subprocess.run([sys.executable, "-m", "ftis_swarm.cli", "bench", "pilot", *flags], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_gate_checks_each_condition_on_given_numbers():
    gate = Gate()
    assert all(gate.checks(0.45, 0.2, 0.5, 0.08).values())
    assert gate.checks(0.45, 0.31, 0.5, 0.08) == {"a_in_range": True, "b_below_a": False, "b_at_least_min": True,
                                                  "ess_low": True, "over_c": True}
    assert not gate.checks(0.2, 0.1, 0.5, 0.08)["a_in_range"]  # A below 0.25
    assert not gate.checks(0.75, 0.3, 0.5, 0.08)["a_in_range"]  # A above 0.7
    assert not gate.checks(0.45, 0.05, 0.5, 0.08)["b_at_least_min"]
    assert not gate.checks(0.45, 0.2, 0.65, 0.08)["ess_low"]
    assert not gate.checks(0.45, 0.2, 0.5, 0.04)["over_c"]
    edge = gate.checks(0.25, 0.10, 0.6, 0.05)  # every bound is inclusive
    assert edge["a_in_range"] and edge["b_at_least_min"] and edge["ess_low"] and edge["over_c"]
    assert gate.checks(0.40, 0.25, 0.6, 0.05)["b_below_a"] and not gate.checks(0.40, 0.26, 0.6, 0.05)["b_below_a"]


def _row(name: str, b: float, ess: float, checks: dict[str, bool]) -> dict:
    return {"model": name, "layers": 27, "b": {"greedy_accuracy": b, "sampled_accuracy": b / 2},
            "b_under_a": {"ess": ess, "frac_over_C": 0.1, "forgery_flagged": False},
            "a_under_b": {"ess": 0.7, "frac_over_C": 0.02}, "checks": checks, "passes": all(checks.values())}


def test_choice_prefers_a_passing_candidate_then_the_most_checks_then_lower_ess():
    ok = dict.fromkeys(("a_in_range", "b_below_a", "b_at_least_min", "ess_low", "over_c"), True)
    one_off = {**ok, "over_c": False}
    two_off = {**ok, "ess_low": False, "over_c": False}
    rows = [_row("x", 0.3, 0.2, two_off), _row("y", 0.15, 0.5, ok), _row("z", 0.18, 0.55, ok)]
    assert choose(rows) == 2  # both pass: the higher accuracy
    assert choose([_row("x", 0.3, 0.2, two_off), _row("y", 0.15, 0.5, one_off)]) == 1  # more checks pass
    assert choose([_row("x", 0.3, 0.7, one_off), _row("y", 0.15, 0.5, one_off)]) == 1  # then the lower ESS
    solves_nothing = {**ok, "b_at_least_min": False, "over_c": False}
    learns = {**ok, "b_below_a": False, "over_c": False}
    assert choose([_row("x", 0.0, 0.1, solves_nothing), _row("y", 0.23, 0.56, learns)]) == 1  # B must learn
    with pytest.raises(ValueError):
        choose([])
    result = {"a": {"model": "A", "layers": 30, "greedy_accuracy": 0.4, "sampled_accuracy": 0.3},
              "candidates": rows[:2], "chosen": "y", "chosen_passes": True}
    table = pilot_table(result)
    assert "| B x | 27 | 0.300 | 0.150 | 0.200 | 0.100 | 0.700 | 0.020 | no | fail: ess_low, over_c |" in table
    assert "Chosen B: y (passes)" in table


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory):
    path = build_tiny_qwen2(tmp_path_factory.mktemp("tiny-pilot"), seed=3, init_std=0.3)
    return load_model(str(path))


def test_sampled_rewards_count_each_items_right_completions_in_order():
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(qwen_tokenizer_dir()))
    task = get_task("arith_mix")
    items = task.sample(2, seed=0, split="test")
    right = [str(it.answer) for it in items]

    def group(it, texts):
        comps = [tok.encode(t, add_special_tokens=False) for t in texts]
        return Group.build(run_id="t", sender="s", model_id="m", policy_version=0, created_at=1.0,
                           tokenizer_fp="f" * 32, task_id=task.name, item_id=it.item_id, prompt_ids=[1, 2],
                           temperature=1.0, completion_ids=comps, logp_gen=[[-0.1] * len(c) for c in comps])

    groups = [group(items[0], [f"It is {right[0]}.", "no idea", f"{right[1]}1", right[0]]),
              group(items[1], ["0 and 99", f"= {right[1]}", "x", "y"])]
    assert sampled_rewards(tok, task, items, groups) == [[1.0, 0.0, 0.0, 1.0], [0.0, 1.0, 0.0, 0.0]]


def test_heldout_evaluation_per_item_on_a_tiny_model(tiny):
    model, tok = tiny
    task = get_task("arith_mix")
    items = task.sample(5, seed=0, split="test")
    res = evaluate_heldout(model, tok, task, items, samples=3, temperature=1.0, max_new_tokens=4, seed=7)
    assert res.item_ids == [it.item_id for it in items]
    assert len(res.greedy) == 5 and set(res.greedy) <= {0, 1}
    assert [g.G for g in res.groups] == [3] * 5 and [g.item_id for g in res.groups] == res.item_ids
    assert all(g.temperature == 1.0 for g in res.groups)
    for g in res.groups:  # fp32 log-probs of the sampled tokens under softmax(z / T): finite, <= 0
        for lp in g.logp_gen:
            assert len(lp) >= 1 and all(math.isfinite(x) and x <= 0 for x in lp)
    assert res.sampled == [int(sum(r)) for r in res.rewards] and all(0 <= s <= 3 for s in res.sampled)
    assert res.sampled_accuracy == sum(res.sampled) / 15
    again = evaluate_heldout(model, tok, task, items, samples=3, temperature=1.0, max_new_tokens=4, seed=7)
    assert _ids(again) == _ids(res)  # seeded
    other = evaluate_heldout(model, tok, task, items, samples=3, temperature=1.0, max_new_tokens=4, seed=8)
    assert _ids(other) != _ids(res)


def _ids(res) -> list[list[list[int]]]:
    return [[list(map(int, c)) for c in g.completion_ids] for g in res.groups]


def _sigma_row(sigma: float, ess: float, reward: float, over_c: float = 0.06, mixed: float = 0.5) -> dict:
    return {"sigma": sigma, "ess": ess, "reward": reward, "frac_over_C": over_c, "mixed": mixed}


def test_sigma_choice_rule_target_reached_fallback_and_none():
    from ftis_swarm.lab.experiment.sigma_pilot import SigmaGate, choose_sigma

    rows = [_sigma_row(1, 0.78, 0.31), _sigma_row(2, 0.51, 0.125), _sigma_row(2.5, 0.39, 0.11),
            _sigma_row(3, 0.30, 0.10), _sigma_row(4, 0.2, 0.03)]
    assert choose_sigma(rows) == (2, True)  # the mildest reaching ESS 0.4 with reward >= 0.1 (not 3: lower ESS)
    assert choose_sigma(rows[:2] + rows[4:]) == (1, False)  # none reaches 0.4: the lowest ESS with reward >= 0.1
    assert choose_sigma([rows[4]]) == (None, False)  # no sigma keeps the reward
    checks = SigmaGate().checks(_sigma_row(2, 0.51, 0.125, over_c=0.049, mixed=0.3))
    assert checks == {"ess_low": True, "over_c": False, "reward": True, "mixed": True}
    assert not any(SigmaGate().checks(_sigma_row(1, 0.78, 0.05, over_c=0.0, mixed=0.1)).values())

