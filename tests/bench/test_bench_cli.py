"""`ftis-node bench wire` and `bench learner` through the real CLI, and the memory probe that
`bench learner --memory` relies on."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import numpy as np
import pytest

from ftis_swarm.bench.logprob_memory import measure_logprobs
from ftis_swarm.bench.wire_bench import paper_group
from ftis_swarm.models.tiny import build_tiny_qwen2
from ftis_swarm.wire import encode_group

CLI = [sys.executable, "-m", "ftis_swarm.cli", "bench"]


def test_bench_wire_reports_the_encoded_size_of_the_paper_group(tmp_path):
    out = tmp_path / "wire.json"
    proc = subprocess.run(CLI + ["wire", "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    fig = json.loads(out.read_text())
    size = len(encode_group(paper_group(G=12, tokens=512, prompt=200)))
    assert fig["encoded_bytes"] == size
    assert fig["bytes_per_completion_token"] == pytest.approx((size - 4 * 200) / (12 * 512))
    assert 8.0 < fig["bytes_per_completion_token"] <= 8.05  # the bound
    # the ratios against a memory copy are the throughputs' ratios
    assert fig["encode_vs_copy"] == pytest.approx(fig["encode_gbps"] / fig["copy_gbps"], rel=1e-9)
    assert fig["decode_vs_copy"] == pytest.approx(fig["decode_gbps"] / fig["copy_gbps"], rel=1e-9)
    assert f"{fig['encoded_bytes']} bytes" in proc.stdout


def test_bench_learner_on_a_tiny_model(tmp_path):
    model = build_tiny_qwen2(tmp_path / "tiny")
    out = tmp_path / "learner.json"
    flags = ["--model", str(model), "--groups", "2", "--group-size", "4", "--prompt-tokens", "8",
             "--completion-tokens", "8", "--repeats", "1", "--threads", "1", "--no-memory", "--json", str(out)]
    proc = subprocess.run(CLI + ["learner"] + flags, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    fig = json.loads(out.read_text())
    assert fig["sequences"] == 8 and fig["memory"] == {}
    # rewards alternate 0/1 in every group, so F-TIS keeps exactly the peer rows with A > 0
    assert fig["peer_rows_with_gradient_ftis"] == 4
    assert fig["step_nois_s"] > 0 and fig["step_ftis_s"] > 0 and np.isfinite(fig["ftis_overhead"])
    assert fig["tokens_per_s"] == pytest.approx(8 * 16 / fig["step_ftis_s"])
    has_trl = importlib.util.find_spec("trl") is not None
    assert (fig["trl_fwd_bwd_s"] is not None) == has_trl
    assert ("ratio ours/TRL" in proc.stdout) == has_trl


def test_memory_probe_does_not_inherit_the_parents_peak():
    """Linux carries ru_maxrss across fork and exec: a probe started from a large process must
    still report only what the log-prob computation adds."""
    ballast = np.ones(1_500_000_000 // 8)  # 1.5 GB resident in this process
    small = measure_logprobs(naive=False, grad=False, vocab=1000, batch=2, seq=64, chunk=64, threads=1)
    assert ballast.sum() > 0
    assert small.peak_bytes < 200e6, small


@pytest.mark.slow
def test_bench_learner_nproc_2_halves_the_state_and_cuts_the_peak(tmp_path):
    model = build_tiny_qwen2(tmp_path / "tiny", hidden_size=64, num_layers=2, seed=0)
    out = tmp_path / "dist.json"
    proc = subprocess.run(
        [sys.executable, "-m", "ftis_swarm.cli", "bench", "learner", "--model", str(model), "--nproc", "2",
         "--groups", "1", "--group-size", "4", "--prompt-tokens", "8", "--completion-tokens", "8", "--repeats", "1",
         "--micro-batch", "2", "--json", str(out)],
        capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    figures = json.loads(out.read_text())
    assert [r["rank"] for r in figures["ranks"]] == [0, 1]
    assert figures["state_bytes_ratio"] == pytest.approx(0.5, abs=0.01)  # weights, gradients, AdamW: halved
    # the peak also holds what FSDP gathers and the step's transients, so it drops by less than half
    assert 0.5 < figures["peak_bytes_ratio"] < 0.8
    assert "per rank / one process  peak" in proc.stdout
