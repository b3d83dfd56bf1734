"""The experiment (`ftis-node experiment`): settings, the horizontal merge, the table, and the
quick setting end to end through the real CLI with the real SmolLM2 models and wire codec."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest
from pydantic import ValidationError

from ftis_swarm.config import FTISConfig
from ftis_swarm.lab.experiment.arms import pilot_gate, run_key, same_settings
from ftis_swarm.lab.experiment.config import QUICK_ARMS, ArmSpec, ExperimentConfig, arm_config, arm_spec, quick_config
from ftis_swarm.lab.experiment.report import format_table, summary_rows
from ftis_swarm.lab.experiment.run import merge_halves
from ftis_swarm.wire import Group, decode_group, encode_group

CLI = [sys.executable, "-c", "from ftis_swarm.cli.main import main; main()", "experiment"]


def _half(sender: str, item: str, prompt: list[int], comps: list[list[int]], version: int = 3) -> Group:
    return Group.build(run_id="experiment", sender=sender, model_id=f"m-{sender}", policy_version=version,
                       created_at=1.0, tokenizer_fp="f" * 32, task_id="arith", item_id=item, prompt_ids=prompt,
                       temperature=0.7, completion_ids=comps, logp_gen=[[-0.5] * len(c) for c in comps])


def test_arm_names_parse_and_bad_ones_are_refused():
    assert arm_spec("solo") == ArmSpec("solo", "ftis", prompts_factor=1, staleness=None)
    assert arm_spec("vertical-nois") == ArmSpec("vertical", "nois", prompts_factor=1, staleness=None)
    assert arm_spec("horizontal-fvis") == ArmSpec("horizontal", "fvis", prompts_factor=1, staleness=None)
    assert arm_spec("solo-2x") == ArmSpec("solo", "ftis", prompts_factor=2, staleness=None)
    assert arm_spec("vertical-ftis-stale1") == ArmSpec("vertical", "ftis", prompts_factor=1, staleness=1)
    assert arm_spec("vertical-ftis").staleness is None  # the config's max_staleness
    for bad in ("vertical", "vertical-bogus", "diagonal-ftis", "", "solo-3x", "horizontal-ftis-stale1",
                "vertical-ftis-stale", "vertical-ftis-stale9", "vertical-ftis-old1"):
        with pytest.raises(ValueError):
            arm_spec(bad)
    with pytest.raises(ValidationError, match="solo-3x"):
        ExperimentConfig(arms=["solo", "solo-3x"])
    spec = arm_spec("vertical-ftis@C=4,g=20,filter_rule=and")
    assert (spec.kind, spec.mode, spec.ftis) == ("vertical", "ftis", (("C", 4.0), ("g", 20.0), ("filter_rule", "and")))
    for bad, says in (("vertical-ftis@C=0", "C: Input should be greater than 0"), ("solo@C=2", "takes no F-TIS"),
                      ("vertical-tis@eps=0.1", "key=value pairs, each of C, g, filter_rule"),
                      ("vertical-ftis@filter_rule=xor", "filter_rule: Input should be 'or' or 'and'")):
        with pytest.raises(ValueError, match=says):
            arm_spec(bad)


def test_pilot_gate_counts_only_a_passing_row_of_learner_b():
    row = {"model": "b", "passes": False, "checks": {"ess_low": True, "over_c": False}}
    failed = pilot_gate({"candidates": [row]}, "b")
    assert failed["passed"] is False and "over_c" in failed["reason"] and "ess_low" not in failed["reason"]
    ok = pilot_gate({"candidates": [{**row, "passes": True, "checks": {"ess_low": True}}]}, "b")
    assert ok["passed"] is True
    assert pilot_gate({"candidates": [{**row, "passes": True, "checks": {}}]}, "other")["passed"] is False
    assert "no pilot" in pilot_gate(None, "b")["reason"]


def test_config_refuses_odd_groups_and_eval_rounds_outside_the_run():
    with pytest.raises(ValidationError, match="even"):
        ExperimentConfig(node={"sampling": {"group_size": 7}})
    with pytest.raises(ValidationError, match="eval_rounds"):
        ExperimentConfig(node={"rounds": 4}, eval_rounds=[5])
    full = ExperimentConfig()
    assert (full.node.rounds, full.eval_rounds, full.end_round, len(full.seeds)) == (4, [2, 4], 4, 12)
    assert ExperimentConfig(node={"rounds": 6}).eval_rounds == [2, 4]  # the end point stays round 4
    assert ExperimentConfig(node={"rounds": 3}).end_round == 2
    with pytest.raises(ValidationError, match="end_round 3 must be one of eval_rounds"):
        ExperimentConfig(end_round=3)
    quick = quick_config()
    assert quick.arms == list(QUICK_ARMS) and quick.node.rounds == 1 and quick.eval_rounds == [1]
    assert quick.end_round == 1


def test_the_experiment_is_its_nodes_configs_validated_by_nodeconfig():
    cfg = ExperimentConfig(node={"rounds": 3, "sampling": {"group_size": 8}})
    assert cfg.node.sampling.temperature == 0.7 and cfg.node.prompts_per_round == 2  # the experiment's base
    b = arm_config(cfg, 1, 5, "vertical-nois-stale2")
    assert (b.model, b.learner.lr, b.learner.lora) == ("smollm2-bias2", 2e-5, None)
    assert (b.seed, b.rounds, b.sampling.group_size, b.learner.ftis.mode, b.max_staleness) == (1_000_005, 3, 8, "nois", 2)
    c = arm_config(cfg, 0, 5, "vertical-ftis@C=3,filter_rule=and").learner.ftis
    assert (c.mode, c.C, c.g, c.filter_rule) == ("ftis", 3.0, 50.0, "and")  # g stays the learner's
    a = arm_config(cfg, 0, 5, "solo-2x")
    assert (a.seed, a.prompts_per_round, a.learner.lora, a.max_staleness) == (5, 4, None, 0)
    with pytest.raises(ValidationError, match="node.rounds"):  # NodeConfig's bound, not a second one
        ExperimentConfig(node={"rounds": 0})
    with pytest.raises(ValidationError, match="learner B.*learner.lr"):
        ExperimentConfig(learners=({"model": "a"}, {"model": "b", "learner": {"lr": 5.0}}))
    with pytest.raises(ValidationError, match="rounds"):  # a learner's overrides touch its model and learner only
        ExperimentConfig(learners=({"model": "a"}, {"model": "b", "rounds": 2}))


def test_merge_keeps_own_half_first_and_survives_the_codec():
    prompt = [5, 6, 7]
    own = _half("A", "arith/v1/s0/1", prompt, [[1, 2], [3]])
    peer = decode_group(encode_group(_half("B", "arith/v1/s0/1", prompt, [[9, 9, 9], [8]], version=5)))
    merged = merge_halves(own, peer, sender="A+B")
    assert merged.G == 4
    assert [c.tolist() for c in merged.completion_ids] == [[1, 2], [3], [9, 9, 9], [8]]
    assert merged.policy_version == 3 and merged.sender == "A+B"
    assert encode_group(decode_group(encode_group(merged))) == encode_group(merged)
    with pytest.raises(ValueError, match="different prompts"):
        merge_halves(own, _half("B", "arith/v1/s0/2", prompt, [[1], [2]]), sender="A+B")
    with pytest.raises(ValueError, match="different prompts"):
        merge_halves(own, _half("B", "arith/v1/s0/1", [5, 6], [[1], [2]]), sender="A+B")


def _fake_run(arm: str, seed: int, rewards_a: list[float], acc_a: float) -> dict:
    rounds = []
    for r, rew in enumerate(rewards_a, start=1):
        for learner, value in (("A", rew), ("B", 0.0)):
            rounds.append({"round": r, "learner": learner, "reward": value, "bytes_sent": 100.0,
                           "frac_filtered@1": 0.5, "mean_weight@1": 0.8})
    evals = [{"round": len(rewards_a), "A": {"accuracy": acc_a}, "B": {"accuracy": 0.0}}]
    return {"arm": arm, "seed": seed, "rounds": rounds, "evals": evals}


def test_table_reports_mean_and_sample_std_over_seeds():
    cfg = ExperimentConfig(arms=["solo"], seeds=[0, 1], node={"rounds": 4}).model_dump(mode="json")
    result = {
        "config": cfg,
        "start": {"A": {"accuracy": 0.5, "items": 40}, "B": {"accuracy": 0.0, "items": 40}},
        "runs": [_fake_run("solo", 0, [0.0, 0.0, 0.0, 1.0], 0.6), _fake_run("solo", 1, [1.0, 1.0, 1.0, 1.0], 0.8)],
    }
    row = next(r for r in summary_rows(result) if r["learner"] == "A")
    assert row["seeds"] == 2
    assert row["reward_early"] == pytest.approx((0.5, math.sqrt(0.5)))  # per seed 0 and 1 over rounds 1-3
    late = np.array([1 / 3, 1.0])  # rounds 2-4
    assert row["reward_late"] == pytest.approx((late.mean(), late.std(ddof=1)))
    assert row["heldout_end"] == pytest.approx((0.7, np.std([0.6, 0.8], ddof=1)))
    assert row["heldout_start"] == pytest.approx((0.5, 0.0))
    table = format_table(result)
    assert "| solo | A | 2 | 0.50 ± 0.71 |" in table


def test_resume_takes_a_run_saved_before_a_setting_was_added_only_at_that_settings_default():
    default = run_key(ExperimentConfig())
    now = json.loads(json.dumps(default))
    now["node"]["learner"]["lr"] = 2e-5
    older = json.loads(json.dumps(now))
    del older["node"]["swarm"]["transport"]["reach_switch_after"], older["node"]["learner"]["lr"]  # not in the code yet
    now_transport, default_transport = now["node"]["swarm"]["transport"], default["node"]["swarm"]["transport"]
    assert now_transport["reach_switch_after"] == default_transport["reach_switch_after"]
    assert now["node"]["learner"]["lr"] != default["node"]["learner"]["lr"]
    assert not same_settings(older, now, default)  # lr is not at its default: another run
    del now["node"]["learner"]["lr"], default["node"]["learner"]["lr"]
    assert same_settings(older, now, default)  # reach_switch_after is: the same run
    changed = json.loads(json.dumps(now))
    changed["node"]["swarm"]["transport"]["reach_switch_after"] = 3
    assert not same_settings(older, changed, default)  # the added setting moved off its default
    removed = json.loads(json.dumps(older))
    removed["node"]["gone"] = 1  # a setting the code no longer has
    assert not same_settings(removed, now, default)
    assert not same_settings(now | {"seed_offset": 1}, now, default) and same_settings(now, now, default)


def test_a_run_saved_with_the_flat_swarm_keys_is_reused(tmp_path):
    """A run key saved before `SwarmConfig` had sections holds its keys flat: the same run all the same."""
    from ftis_swarm.lab.experiment.arms import _reuse

    key, defaults = run_key(ExperimentConfig()), run_key(ExperimentConfig())
    swarm = key["node"]["swarm"]
    flat = {k: v for k, v in swarm.items() if k in ("run_id", "identity", "puzzle", "wire")}
    for section in ("transport", "records", "fetch", "holders"):
        flat.update(swarm[section])
    flat.update(gossip=swarm["gossip"]["enabled"], gossip_rate=swarm["gossip"]["rate"],
                gossip_burst=swarm["gossip"]["burst"])
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"config": {**key, "node": {**key["node"], "swarm": flat}}, "result": {"ok": 1}}))
    assert _reuse(path, key, defaults) == {"ok": 1}
    flat["ttl"] = 1.0
    path.write_text(json.dumps({"config": {**key, "node": {**key["node"], "swarm": flat}}, "result": {"ok": 1}}))
    assert _reuse(path, key, defaults) is None


def test_bad_flags_end_in_one_sentence_and_exit_2(tmp_path):
    for flags, words in ((["--arms", "solo,sideways-ftis"], "sideways-ftis"), (["--group-size", "5"], "even"),
                         (["--seeds", "x"], "--seeds"), (["--workers", "0"], "--workers"),
                         (["--pilot", str(tmp_path / "none.json")], "--pilot"),
                         (["--set", "eval_samples=-1"], "eval_samples"), (["--rounds", "0"], "node.rounds"),
                         (["--set", "sampling.temperature=0"], "node.sampling.temperature"),
                         (["--set", "bogus=1"], "bogus"), (["--lr-b", "3"], "learner B"),
                         (["--seeds", "5..2"], "first <= last"), (["--arms", "solo,vertical-ftis@C=0"], "C: Input")):
        proc = subprocess.run(CLI + flags + ["--run-dir", str(tmp_path / "o")], capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], proc.stderr
        assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_quick_experiment_end_to_end(tmp_path):
    out, figures = tmp_path / "exp", tmp_path / "fig"
    proc = subprocess.run(CLI + ["--quick", "--workers", "2", "--run-dir", str(out), "--figures", str(figures)],
                          capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "| vertical-ftis | A |" in proc.stdout
    summary = json.loads((out / "summary.json").read_text())
    cfg = quick_config()
    P, G, C = cfg.node.prompts_per_round, cfg.node.sampling.group_size, FTISConfig().C
    runs = {r["arm"]: r for r in summary["runs"]}
    assert sorted(runs) == sorted(QUICK_ARMS) and len(summary["runs"]) == len(QUICK_ARMS)

    def recs(arm: str) -> list[dict]:
        rs = runs[arm]["rounds"]
        assert len(rs) == 2 * cfg.node.rounds
        return rs

    for arm in runs:
        by_learner = {(x["round"], x["learner"]): x for x in recs(arm)}
        for x in recs(arm):
            assert x["groups"] == (P if arm == "solo" else 2 * P) and x["sequences"] == x["groups"] * G
            # a step is taken exactly when some sample kept a non-zero advantage
            assert x["optimizer_step"] == x["policy_version"] == int(x["sequences_with_gradient"] > 0)
            assert x["frac_filtered@0"] == 0.0  # own samples are never filtered
            assert 0.0 <= x["reward"] <= 1.0
            other = by_learner[(x["round"], "B" if x["learner"] == "A" else "A")]
            if arm.startswith("solo"):
                assert x["bytes_sent"] == x["bytes_received"] == 0 and x["offpolicy_sequences"] == 0
                assert x["generators_max"] == 1 and x["peer_reward"] is None
                continue
            # the real codec carried every group: what one sent is what the other received,
            # and it is at least 8 bytes per completion token plus 4 per prompt token
            assert x["bytes_received"] == other["bytes_sent"] > 0
            assert x["bytes_sent"] + other["bytes_sent"] >= 8 * x["completion_tokens"] + 4 * 40 * 2 * P
            assert x["offpolicy_sequences"] == P * G
        # round 1 is generated before any update from the same weights, prompts and seeds,
        # so every arm's own reward there is the same as alone (a paired design)
        if arm.startswith("vertical"):
            for learner in ("A", "B"):
                assert by_learner[(1, learner)]["reward"] == next(
                    y["reward"] for y in recs("solo") if y["round"] == 1 and y["learner"] == learner)

    for x in recs("vertical-nois"):
        assert x["frac_filtered"] == 0.0 and x["frac_filtered@1"] == 0.0
        assert x["mean_weight"] == 1.0 and x["ess"] == pytest.approx(1.0) and x["frac_truncated"] == 0.0
        assert x["generators_max"] == 1
    for x in recs("vertical-tis"):  # weighted, not filtered
        assert x["frac_filtered@1"] == 0.0 and 0.0 < x["mean_weight@1"] <= C and x["mean_weight@1"] != 1.0
    for x in recs("vertical-ftis") + recs("vertical-fvis"):
        # rule "or": every off-policy sample with a non-positive advantage is dropped (those with
        # A = 0 count in frac_zero_adv, not frac_filtered)
        assert x["frac_filtered@1"] + x["frac_zero_adv@1"] >= x["frac_nonpositive_adv@1"] > 0.0
        assert 0.0 < x["ess@1"] <= 1.0 and x["kl_mean@1"] > 0.0
        assert x["mean_weight@1"] != 1.0  # the peer's samples really are weighted
        assert x["generators_min"] == x["generators_max"] == 1
    for x in recs("vertical-ftis"):
        assert 0.0 < x["mean_weight@1"] <= C and 0.0 <= x["frac_truncated@1"] <= 1.0
    for x in recs("vertical-fvis"):
        assert x["frac_truncated@1"] == 0.0  # untruncated: exp(x) as it is

    start = summary["start"]
    digests = {start["A"]["digest"], start["B"]["digest"]}
    for run in summary["runs"]:
        assert [e["round"] for e in run["evals"]] == cfg.eval_rounds
        for e in run["evals"]:
            for learner in ("A", "B"):
                ev = e[learner]
                assert 0.0 <= ev["accuracy"] <= 1.0 and ev["items"] == cfg.node.eval_items
                assert ev["greedy"] == [int(v) for v in ev["verdicts"]] and sum(ev["greedy"]) == ev["correct"]
                assert len(ev["sampled"]) == cfg.node.eval_items and ev["samples"] == cfg.eval_samples
                assert all(0 <= k <= cfg.eval_samples for k in ev["sampled"])
                assert ev["sampled_accuracy"] == sum(ev["sampled"]) / (cfg.eval_samples * cfg.node.eval_items)
                digests.add(ev["digest"])
    assert len(digests) == 1  # every arm was measured on the same held-out items
    import torch
    assert all(run["host"]["torch"] == torch.__version__ and run["host"]["cpu"] for run in summary["runs"])

    for name in ("experiment_reward.png", "experiment_heldout.png", "experiment_weights.png"):
        data = (figures / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and 5_000 < len(data) < 400_000
    assert (out / "table.md").read_text().count("\n") == 2 + 2 * len(QUICK_ARMS)
    # no --pilot: the claims' verdicts are computed but none counts as tested
    stats = json.loads((out / "stats.json").read_text())
    assert stats["gate_passed"] is False and stats["tested"] is False
    assert [c["claim"] for c in stats["claims"]] == ["C1", "C2"]
    assert {(c["arm"], c["learner"]) for c in stats["collapses"]} == {(a, n) for a in QUICK_ARMS for n in "AB"}
    assert all(c["label"].startswith("not tested (") for c in stats["claims"])
    assert summary["gate"]["reason"] == "no pilot given (--pilot)" and "no pilot given" in proc.stdout
