"""JSONL and Prometheus sinks."""

from __future__ import annotations

import json
import urllib.request

from ftis_swarm.metrics import JsonlSink, MultiSink, read_jsonl
from ftis_swarm.metrics.prometheus import PrometheusSink, metric_name


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


def test_prometheus_serves_latest_values_with_source_labels():
    sink = PrometheusSink(0)
    multi = MultiSink(sink)
    try:
        multi.log({"reward": 0.5, "frac_filtered@peerA": 0.25, "note": "skipped"})
        multi.log({"reward": 0.75})
        text = urllib.request.urlopen(f"http://127.0.0.1:{sink.port}/metrics", timeout=5).read().decode()
    finally:
        multi.close()
    assert 'ftis_reward{source=""} 0.75' in text
    assert 'ftis_frac_filtered{source="peerA"} 0.25' in text
    assert "note" not in text


def test_metric_names_are_sanitised():
    assert metric_name("time/learn@12D3Koo") == ("ftis_time_learn", "12D3Koo")
    assert metric_name("a-b.c") == ("ftis_a_b_c", "")
