"""`ftis-node bench pipeline` through the real CLI: bad flags refused; a tiny run's figures hold together."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ftis_swarm.lab.bench.pipeline import LearnRates, matched_overlap

CLI = [sys.executable, "-m", "ftis_swarm.cli", "bench", "pipeline"]


@pytest.mark.parametrize("flags", [["--threads", "1"], ["--rounds", "2"], ["--threads", "4", "--generate-threads", "4"],
                                   ["--task", "nope"], ["--task", "math500"]])
def test_bad_flags_are_one_sentence_and_exit_2(flags):
    proc = subprocess.run(CLI + flags, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "Traceback" not in proc.stderr


def test_learning_alone_is_priced_by_each_rounds_own_work():
    alone = [  # the first round is left out: its update allocates the optimiser state
        {"sequences": 8, "sequences_with_gradient": 8, "time_logp_old": 9.0, "time_update": 99.0, "time_learn": 108.0,
         "time_generate": 3.0, "time_round": 111.0},
        {"sequences": 8, "sequences_with_gradient": 4, "time_logp_old": 2.0, "time_update": 4.0, "time_learn": 6.0,
         "time_generate": 3.0, "time_round": 9.5},
        {"sequences": 8, "sequences_with_gradient": 0, "time_logp_old": 2.0, "time_update": 0.0, "time_learn": 2.0,
         "time_generate": 3.0, "time_round": 5.5},
    ]
    rates = LearnRates.of(alone)
    assert (rates.logp_per_sequence, rates.update_per_gradient_sequence, rates.rest) == (0.25, 1.0, 0.5)
    # a pipelined round whose 8 sequences all carry a gradient: 2 + 8 + 0.5 alone; one that took no step: 2.5
    stepped = {"sequences": 8, "sequences_with_gradient": 8, "time_update": 7.0, "time_generate": 0.0,
               "time_generate_wait": 0.5, "time_sync": 0.5, "time_round": 12.5}
    idle = {"sequences": 8, "sequences_with_gradient": 0, "time_update": 0.0, "time_generate": 0.0,
            "time_generate_wait": 3.0, "time_sync": 0.5, "time_round": 6.5}
    assert rates.learn_time(stepped) == 10.5 and rates.learn_time(idle) == 2.5
    overlap, slowdown = matched_overlap([stepped, idle], rates, generate_alone=6.0)
    assert overlap == pytest.approx((12.5 + 6.5) / (10.5 + 6.0))  # max(generate 6, learn) each round
    assert slowdown == pytest.approx((11.5 + 3.0) / (10.5 + 2.5))


@pytest.mark.slow
@pytest.mark.net
def test_tiny_pipeline_bench_figures_hold_together_with_stale_groups(tmp_path):
    out = tmp_path / "pipeline.json"
    proc = subprocess.run(CLI + ["--model", "tiny", "--rounds", "4", "--prompts-per-round", "3", "-G", "4",
                                 "--max-new-tokens", "3", "--lr", "1e-2", "--run-dir", str(tmp_path / "runs"),
                                 "--json", str(out)], capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    fig = json.loads(out.read_text())
    assert fig["threads"] == 2 and fig["generate_threads"] == 1 and fig["learn_threads"] == 1
    assert fig["task"] == "arith"  # the tiny model's default: what it was taught
    assert fig["overlap_ratio_medians"] == pytest.approx(
        fig["pipelined_round_s"] / max(fig["generate_alone_s"], fig["learn_alone_s"]), rel=1e-9)
    assert 0.3 < fig["overlap_ratio"] < 5 and fig["learn_slowdown"] > 0 and fig["generate_slowdown"] > 0
    assert fig["speedup"] == pytest.approx(fig["samples_per_s_pipelined"] / fig["samples_per_s_sync"], rel=1e-9)
    assert fig["pipelined_generate_s"] > 0 and fig["sync_s"] > 0
    assert fig["stale_share"] > 0  # the taught model's rounds take steps: groups generated ahead lag one version
    assert fig["sync_over_learn"] == pytest.approx(fig["sync_s"] / fig["pipelined_learn_s"], rel=1e-9)
    runs = tmp_path / "runs"
    piped = [json.loads(line) for line in (runs / "pipelined" / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in piped] == [1, 2, 3, 4] and all("time_sync" in r for r in piped)
    assert fig["steps_pipelined"] == piped[-1]["policy_version"] >= 1
    assert "samples learned per second" in proc.stdout
