"""`ftis-node bench pipeline` through the real CLI: bad flags refused; a tiny run's figures hold together."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

CLI = [sys.executable, "-m", "ftis_swarm.cli", "bench", "pipeline"]


@pytest.mark.parametrize("flags", [["--threads", "1"], ["--rounds", "2"], ["--threads", "4", "--generate-threads", "4"]])
def test_bad_flags_are_one_sentence_and_exit_2(flags):
    proc = subprocess.run(CLI + flags, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "Traceback" not in proc.stderr


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
    assert fig["overlap_ratio"] == pytest.approx(
        fig["pipelined_round_s"] / max(fig["generate_alone_s"], fig["learn_alone_s"]), rel=1e-9)
    assert fig["speedup"] == pytest.approx(fig["samples_per_s_pipelined"] / fig["samples_per_s_sync"], rel=1e-9)
    assert fig["pipelined_generate_s"] > 0 and fig["sync_s"] > 0
    assert fig["stale_share"] > 0  # the taught model's rounds take steps: groups generated ahead lag one version
    assert fig["sync_over_learn"] == pytest.approx(fig["sync_s"] / fig["pipelined_learn_s"], rel=1e-9)
    runs = tmp_path / "runs"
    piped = [json.loads(line) for line in (runs / "pipelined" / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in piped] == [1, 2, 3, 4] and all("time_sync" in r for r in piped)
    assert "samples learned per second" in proc.stdout
