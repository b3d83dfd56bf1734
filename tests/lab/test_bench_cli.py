"""`ftis-node bench wire` and `bench learner` through the real CLI, the memory probe that
`bench learner --memory` relies on, `bench hostile`'s, `bench swarm`'s and `bench scale`'s
refusal of bad flags, and the bench tables' ratios."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from ftis_swarm.lab.bench.logprob_memory import measure_logprobs
from ftis_swarm.lab.bench.scale import ScaleRow, paper_budget
from ftis_swarm.lab.bench.scale import format_table as format_scale
from ftis_swarm.lab.bench.scale_legs import leg_figures
from ftis_swarm.lab.bench.swarm import SwarmBenchRow, format_table
from ftis_swarm.lab.bench.wire import paper_group
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
    assert 8.0 < fig["bytes_per_completion_token"] <= 8.05  # the bound docs/benchmarks.md states
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
    assert f"learner throughput        {fig['tokens_per_s']:.0f} tokens/s" in proc.stdout  # the table shows the JSON's figure
    has_trl = importlib.util.find_spec("trl") is not None
    assert (fig["trl_fwd_bwd_s"] is not None) == has_trl
    assert ("ratio ours/TRL" in proc.stdout) == has_trl


def test_memory_probe_does_not_inherit_the_parents_peak():
    """Linux carries ru_maxrss across fork and exec: a probe started from a large process must
    still report only what the log-prob computation adds."""
    ballast = np.ones(1_500_000_000 // 8)  # 1.5 GB resident in this process
    assert _resident_bytes() > 1.4e9  # the parent really is large when the probe starts
    small = measure_logprobs(naive=False, grad=False, vocab=1000, batch=2, seq=64, chunk=64, threads=1)
    del ballast
    assert small.peak_bytes < 200e6, small


def test_bench_hostile_refuses_bad_flags_in_one_sentence():
    for flags in (["--rounds", "0"], ["--round-deadline", "-1"], ["--identities", "5000"], ["--phase", "crowds"],
                  ["--phase", "identities", "--crowd", "0"], ["--phase", "identities", "--crowd-pointers", "0"],
                  ["--phase", "identities", "--crowd", "2", "--crowd-processes", "3"], ["--fill", "0"],
                  ["--storage-mib", "0.5"]):
        proc = subprocess.run(CLI + ["hostile", *flags], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2, (flags, proc.stderr)
        assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1, proc.stderr


def _resident_bytes() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")


@pytest.mark.slow
def test_bench_attacks_on_tiny_models(tmp_path):
    """The attack table and the detector's figures through the real CLI (tiny preset: seconds per step)."""
    out = tmp_path / "attacks.json"
    flags = ["--preset", "tiny", "--rounds", "2", "--honest-groups", "3", "--forged-groups", "2",
             "--standing-rounds", "2", "--run-dir", str(tmp_path), "--json", str(out)]
    proc = subprocess.run(CLI + ["attacks"] + flags, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    fig = json.loads(out.read_text())
    rows = {r["attack"]: r for r in fig["attacks"]}
    assert set(rows) == {"honest", "nan_temperature", "test_split", "eval_task", "out_of_range", "unknown_item",
                         "prompt_mismatch", "forged_minus_3", "flood"}
    for name, row in rows.items():
        if name != "honest":
            assert row["sent"] == 2 and row["reached"] == 0 and sum(row["stopped_by"].values()) == 2, row
    assert rows["nan_temperature"]["stopped_by"] == {"wire": 2}
    assert rows["test_split"]["stopped_by"] == {"not_train_split": 2}
    assert rows["flood"]["stopped_by"] == {"peer_over_budget": 2}
    # forged at round 1, then banned: its round-2 group never reaches the learner
    assert rows["forged_minus_3"]["stopped_by"] == {"forgery": 1, "peer_refused": 1}
    assert "hostile-forged_minus_3" in fig["banned"] and fig["weights_finite"]
    for d in fig["detector"]:
        assert d["false_alarms"] == 0 and d["delay_fresh"] == 1, d  # 4 completions of 24 tokens: over 28 at once
        assert d["forged_mean"] == pytest.approx(2.0, abs=1e-3)
    assert "forgery detector" in proc.stdout and "stopped by" in proc.stdout
    st = fig["standing"]
    assert len(st["strangers_share"]) == 2 and all(0 < x <= 0.25 for x in st["strangers_share"]), st
    assert all(x <= s for x, s in zip(st["crowd_share"], st["strangers_share"]))
    assert st["over_1_before"] == {"minus_3": 0, "minus_0.5": 0, "t_min": 0, "turncoat": 0}  # the cap, whatever split
    assert st["copies_sent"] >= 2 and st["copies_used"] == 0  # two a round, less any past the vocabulary
    assert st["copies_refused"] + st["copier_refused"] == st["copies_sent"] and st["copies_refused"] >= 2
    assert "newcomer: first group used" in proc.stdout
    # the 54 strangers share one origin, the newcomer has its own: its origin has a turn in every update
    assert st["newcomer_first_used"] in (1, 2), st
    crowd = [row.get("10.0.0.0/24", 0.0) for row in st["share_by_origin"]]
    assert len(crowd) == 2 and all(0 < x <= 0.25 for x in crowd), st
    assert "strangers' tokens by origin / budget, the crowd's (10.0.0.0/24)" in proc.stdout


def test_bench_swarm_refuses_bad_flags_in_one_sentence():
    for flags in (["--nodes", "1"], ["--transport", "carrier-pigeon"], ["--round-seconds", "-1"], ["--groups", "65"]):
        proc = subprocess.run(CLI + ["swarm", *flags], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2, (flags, proc.stderr)
        assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1, proc.stderr


def test_bench_scale_refuses_bad_flags_in_one_sentence():
    for flags in (["--nodes", "1"], ["--layout", "everything"], ["--groups", "33"], ["--period", "0"],
                  ["--bodies-per-stream", "8", "--bodies-per-stream", "33"], ["--read-clock", "never"]):
        proc = subprocess.run(CLI + ["scale", *flags], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2, (flags, proc.stderr)
        assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1, proc.stderr


def test_bench_scale_table_puts_each_row_against_fetch_everything_and_the_smallest_swarm():
    def row(nodes: int, layout: str, kib: float, per_stream: int = 8) -> ScaleRow:
        return ScaleRow(nodes=nodes, layout=layout, rounds=4, bodies=kib / 48, body_kib_in=kib, body_kib_out=kib,
                        messages=40.0, pointer_kib=30.0, gossip_estimate_kib=nodes * 6 * 2.1, publish_p50_ms=20.0,
                        visible_p50_ms=40.0, fill_p50_ms=900.0, fill_share=1.0, publishers_used=1.0, cpu_s=0.5,
                        load=3.0, per_stream=per_stream, streams=kib / 48 / per_stream)

    rows = [row(8, "budget", 3072, 1), row(8, "budget", 1536), row(8, "all", 5376), row(32, "budget", 3072, 1),
            row(32, "budget", 3072), row(32, "all", 23808),
            ScaleRow(64, "budget", 0, *[float("nan")] * 12, load=9.0, per_stream=8, failed="RuntimeError: out of memory")]
    lines = format_scale(rows, period=5.0, groups=16, size=48 * 1024, budget=paper_budget(groups=16, size=48 * 1024)
                         ).splitlines()
    assert [line.split()[2:8] for line in lines[2:8]] == [
        ["1", "64.0", "64.0", "3072", "0.57", "1.00"], ["8", "32.0", "4.0", "1536", "0.29", "1.00"],
        ["8", "112.0", "14.0", "5376", "1.00", "1.00"], ["1", "64.0", "64.0", "3072", "0.13", "1.00"],
        ["8", "64.0", "8.0", "3072", "0.13", "2.00"], ["8", "496.0", "62.0", "23808", "1.00", "4.43"]]
    assert "64 budget  8 did not run: RuntimeError: out of memory (load 9.0)" in lines[8]
    assert paper_budget(groups=16, size=48 * 1024).max_groups == 64  # the node's own Budget.of rule


def test_bench_scale_legs_add_up_to_visible_and_find_each_streams_first_body():
    def legs(started: float, began: float, received: float) -> dict:
        return dict(seen=0.1, chosen=0.2, started=started, began=began, received=received, accepted=received + 0.001)

    rows = [{"node": 0, "round": 1, "legs": {"a": legs(1.0, 1.0, 1.1), "b": legs(1.0, 1.101, 1.102)}},
            {"node": 1, "round": 1, "legs": {"c": legs(1.0, 1.0, 1.05)}}]  # same slot time, another node's stream
    means, p50s = leg_figures(rows, {"a": 0.0, "b": 0.0, "c": 0.0})
    visible = [1.101, 1.103, 1.051]
    assert sum(means.values()) == pytest.approx(1e3 * sum(visible) / 3)
    assert p50s["first_body"] == pytest.approx(75.0)  # a (100 ms) and c (50 ms) opened streams; b waited behind a
    assert p50s["stream"] == pytest.approx(0.0) and means["stream"] == pytest.approx(101 / 3)


def test_bench_swarm_table_gives_each_gossip_row_its_ratio_to_the_poll_row():
    def row(transport: str, group: str, p50: float) -> SwarmBenchRow:
        return SwarmBenchRow(nodes=2, transport=transport, group=group, published=16, complete=16, publish_p50_s=0.02,
                             p50_s=p50, p95_s=2 * p50, groups_per_s=10.0, messages_per_peer=26.0, kib_per_peer=25.8,
                             body_mib_per_peer=0.25)

    table = format_table([row("gossip", "32KiB", 0.022), row("gossip", "1MiB", 0.05), row("poll", "32KiB", 1.1),
                          row("poll", "1MiB", 2.0)], poll_interval=1.0, round_seconds=5.0)
    lines = table.splitlines()[2:]
    assert [line.split()[8] for line in lines] == ["0.020", "0.025", "1.000", "1.000"]
    assert lines[0].split()[6:8] == ["22.0", "44.0"]  # p50 and p95 in ms


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


@pytest.mark.slow
@pytest.mark.net
def test_bench_hostile_identities_keeps_a_crowd_of_one_origin_within_its_quota(tmp_path):
    """At the tests' puzzle (tests/conftest.py) and a quota of 40 records per origin: 4 identities on
    127.0.9.1 flood 200 pointers against 2 honest nodes on 127.0.2.1 and 127.0.3.1."""
    out = tmp_path / "identities.json"
    env = dict(os.environ, FTIS_SWARM__RECORDS__MAX_RECORDS_PER_ORIGIN="40")
    proc = subprocess.run(CLI + ["hostile", "--phase", "identities", "--crowd", "4", "--crowd-processes", "1", "--crowd-pointers", "200",
                                 "--rounds", "1", "--json", str(out)], capture_output=True, text=True, timeout=600,
                          env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    fig = json.loads(out.read_text())
    assert len(fig["puzzle_cpu_s"]) == 4 and all(t >= 1 for t in fig["tries"])
    assert fig["pointers_sent"] == 200 + 4  # and a membership record per identity
    assert fig["held_from_crowd"] == [40, 40]  # the origin's quota, filled and not passed
    assert all(held > 40 for held in fig["held"])  # the honest nodes' own records besides
    assert fig["honest_delivered"] == fig["honest_published"] > 0
    assert "share" in proc.stdout and "1,000 (extrapolated)" in proc.stdout

