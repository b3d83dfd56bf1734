"""Exact resume: a lone node SIGKILLed at random moments and restarted ends bit for bit where an
undisturbed run of the same command ends (`ftis-node bench resume`, through the real CLI)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.net]

KILLS = 4
ROUNDS = 6


def test_a_node_killed_four_times_ends_with_the_same_weights_and_log(tmp_path):
    out = tmp_path / "resume.json"
    cmd = [sys.executable, "-m", "ftis_swarm.cli", "bench", "resume", "--rounds", str(ROUNDS), "--kills", str(KILLS),
           "--seed", "1", "--prompts-per-round", "4", "--run-dir", str(tmp_path / "runs"), "--json", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    fig = json.loads(out.read_text())
    assert fig["kills"] == KILLS and sum(fig["kill_phases"].values()) == KILLS, fig
    assert fig["tensors"] > 0 and fig["tensors_differing"] == 0 and fig["max_abs_diff"] == 0.0
    assert fig["tensors_trained"] > 0  # the updates moved the weights: not a comparison of the initial ones
    assert fig["optimizer_tensors"] > 0 and fig["optimizer_differing"] == 0
    assert fig["rounds_compared"] == ROUNDS and fig["rounds_differing"] == 0 and fig["keys_differing"] == []
    assert fig["consumed_same"] and fig["identical"]
    assert "=> IDENTICAL" in proc.stdout
    # each run logged every round once, in order, with a learning step in most of them
    rows = [json.loads(line) for line in (tmp_path / "runs" / "killed" / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rows] == list(range(0, ROUNDS + 1))  # round 0: the evaluation before any update
    assert sum(r.get("sequences_with_gradient", 0) > 0 for r in rows) >= ROUNDS // 2
    # the held-out evaluations (every 2 rounds here, and round 0) are in the logs compared
    assert [r["round"] for r in rows if "heldout_acc" in r] == list(range(0, ROUNDS + 1, 2))
    assert (tmp_path / "runs" / "killed" / "node.log").read_text().count("resumed from") >= 1
