"""The sinks: JSONL, Prometheus by its conventions, TensorBoard, and the one sentence when one cannot start."""

from __future__ import annotations

import json
import urllib.request

import pytest

from ftis_swarm.metrics import JsonlSink, MetricsSinkError, MultiSink, read_jsonl
from ftis_swarm.metrics.extra_sinks import TensorBoardSink, check_installed
from ftis_swarm.metrics.prometheus import PrometheusSink, metric_of
from ftis_swarm.metrics.sink import require_package


def test_jsonl_appends_one_line_per_round_and_survives_a_torn_tail(tmp_path):
    path = tmp_path / "run" / "metrics.jsonl"
    sink = JsonlSink(path)
    sink.log({"round": 1, "reward": 0.25, "loss": float("nan")})
    sink.log({"round": 2, "reward": 0.5, "peer": "abc"})
    sink.close()
    with open(path, "a") as f:
        f.write('{"round": 3, "rew')  # a writer killed mid-line
    again = JsonlSink(path)  # a resumed node appends
    again.log({"round": 3, "reward": 0.75})
    again.close()
    rows = list(read_jsonl(path))
    assert [r["round"] for r in rows] == [1, 2, 3]
    assert rows[0]["loss"] is None and rows[1]["peer"] == "abc" and rows[2]["reward"] == 0.75
    assert json.loads(path.read_text().splitlines()[0]) == {"round": 1, "reward": 0.25, "loss": None}


def _scrape(sink: PrometheusSink) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{sink.port}/metrics", timeout=5).read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


def test_prometheus_follows_the_naming_conventions():
    sink = PrometheusSink(0)
    multi = MultiSink(sink)
    try:
        multi.log({"round": 1, "reward": 0.5, "frac_filtered": 0.25, "frac_filtered@self": 0.0,
                   "frac_filtered@peerA": 0.5, "published": 2, "peer_over_cap": 1, "rejected_unknown_item": 3,
                   "swarm_rejected_bad_signature": 1, "swarm_fetched_bytes": 1000, "time_generate": 1.5,
                   "banned_peers": ["peerB", "peerC"], "note": "skipped"})
        multi.log({"round": 2, "reward": 0.75, "frac_filtered": 0.1, "frac_filtered@peerA": 0.2, "published": 2,
                   "peer_over_cap": 0, "swarm_rejected_bad_signature": 4, "swarm_fetched_bytes": 1500,
                   "time_generate": 2.0, "banned_peers": []})
        m = _scrape(sink)
    finally:
        multi.close()
    # the latest round as gauges; the overall value apart from the per-peer series
    assert m["ftis_reward"] == 0.75 and m["ftis_frac_filtered"] == 0.1
    assert m['ftis_frac_filtered_by_peer{peer="peerA"}'] == 0.2 and m['ftis_frac_filtered_by_peer{peer="self"}'] == 0.0
    # per-round counts add up as counters, reasons as labels; running totals advance by their increase
    assert m["ftis_rounds_total"] == 2 and m["ftis_groups_published_total"] == 4
    assert m['ftis_peer_groups_dropped_total{reason="over_cap"}'] == 1
    assert m['ftis_groups_unscored_total{reason="unknown_item"}'] == 3
    assert m['ftis_swarm_groups_rejected_total{reason="bad_signature"}'] == 4
    assert m["ftis_swarm_fetched_bytes_total"] == 1500
    # times in seconds, lists by their length, text skipped, the process's own metrics kept
    assert m["ftis_generate_seconds"] == 2.0 and m["ftis_banned_peers"] == 0
    assert not any("note" in k for k in m)
    assert m["process_cpu_seconds_total"] > 0 and any(k.startswith("python_gc_") for k in m)
    assert not any(k.startswith("ftis_") and k.endswith("_total") and "reward" in k for k in m)


def test_metric_names_are_sanitised_and_classified():
    assert metric_of("time/learn@12D3Koo") == ("gauge", "ftis_time_learn_by_peer", {"peer": "12D3Koo"})
    assert metric_of("a-b.c") == ("gauge", "ftis_a_b_c", {})
    assert metric_of("time_round") == ("gauge", "ftis_round_seconds", {})
    assert metric_of("peer_too_long") == ("counter", "ftis_peer_groups_dropped", {"reason": "too_long"})
    assert metric_of("peer_reward") == ("gauge", "ftis_peer_reward", {})  # not a drop reason
    assert metric_of("swarm_served_bytes") == ("running_total", "ftis_swarm_served_bytes", {})


def test_a_busy_metrics_port_is_one_sentence():
    first = PrometheusSink(0)
    try:
        with pytest.raises(MetricsSinkError) as err:
            PrometheusSink(first.port)
    finally:
        first.close()
    assert f"cannot serve metrics on 127.0.0.1:{first.port}" in str(err.value) and "\n" not in str(err.value)


def test_tensorboard_sink_writes_scalars_per_round(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    sink = TensorBoardSink(tmp_path / "tb")
    sink.log({"round": 1, "reward": 0.25, "frac_filtered@peerA": 0.5, "note": "x"})
    sink.log({"round": 2, "reward": 0.75})
    sink.close()
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    assert sorted(events.Tags()["scalars"]) == ["frac_filtered/peerA", "reward"]
    assert [(e.step, e.value) for e in events.Scalars("reward")] == [(1, 0.25), (2, 0.75)]


def test_a_sink_whose_package_is_missing_says_so_in_one_sentence():
    with pytest.raises(MetricsSinkError) as err:
        require_package("no_such_package_xyz", wanted_by="tensorboard = true", extra="tensorboard")
    assert str(err.value) == ("tensorboard = true needs the no_such_package_xyz package, which is not installed: "
                              "pip install 'ftis-swarm[tensorboard]'")
    check_installed(tensorboard=True, wandb=False)  # installed with the dev extra
