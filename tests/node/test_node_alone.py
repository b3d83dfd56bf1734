"""A node alone (a real swarm peer with no others): plain on-policy GRPO, checkpoints, stop requests."""

from __future__ import annotations

import json
import logging
import urllib.request

import pytest

from ftis_swarm.config import load_node_config
from ftis_swarm.metrics import read_jsonl
from ftis_swarm.node import daemon
from ftis_swarm.node.daemon import Node

pytestmark = pytest.mark.net


def node_config(tmp_path, model_dir, **over):
    flags = {"model": str(model_dir), "run_dir": str(tmp_path / "run"), "rounds": 2, "prompts_per_round": 2,
             "sampling.group_size": 3, "sampling.max_new_tokens": 4, "round_deadline": 0.5,
             "checkpoint_every": 1, "swarm.transport.host": "127.0.0.1", "learner.lr": 1e-3, "threads": 1}
    flags.update(over)
    return load_node_config(None, flags)


def test_alone_is_on_policy_grpo_and_checkpoints_each_round(tmp_path, tiny_model_dir, caplog):
    caplog.set_level(logging.INFO)
    cfg = node_config(tmp_path, tiny_model_dir, metrics_port=0)
    node = Node(cfg)
    port = node.parts.sink.sinks[1].port
    results = node.run(on_round=lambda res: scrape.append(
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()))
    lines = list(read_jsonl(cfg.run_dir / "metrics.jsonl"))
    assert [r["round"] for r in lines] == [0, 1, 2]  # round 0: the held-out evaluation before any update
    rows = lines[1:]
    assert [r["round"] for r in rows] == [res.round for res in results]
    for r in rows:
        assert r["own_groups"] == 2 and r["peer_groups"] == 0
        assert r["publish_failed"] == 2 and r.get("published", 0) == 0  # nobody to replicate to
        assert r["frac_filtered"] == 0.0 and r["offpolicy_sequences"] == 0.0
        assert r["mean_weight"] == pytest.approx(1.0, abs=1e-3)  # own samples: pi_gen == pi_theta
        assert r["time_generate"] > 0 and r["time_learn"] > 0
    assert "\nftis_reward " in scrape[0] and "\nftis_round_seconds " in scrape[-1]
    assert "\nftis_rounds_total 2.0" in scrape[-1] and "\nftis_groups_publish_failed_total 4.0" in scrape[-1]
    done = sorted(p.name for p in (cfg.run_dir / "checkpoints").iterdir())
    assert done == ["ckpt-00000002"]  # one kept (keep_checkpoints' default): round 1's went once 2's was complete
    assert json.loads((cfg.run_dir / "config.json").read_text())["rounds"] == 2
    # a swarm's first node is no fault: it says so once, and warns of nothing
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("no peers")]
    assert said == ["no peers yet to hold round 1's pointer: it is kept in this node's DHT storage until peers join"]
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and "publish" in r.getMessage()]


scrape: list[str] = []


def test_stop_request_ends_after_the_round_with_a_checkpoint(tmp_path, tiny_model_dir):
    cfg = node_config(tmp_path, tiny_model_dir, rounds=5, checkpoint_every=10)
    node = Node(cfg)
    results = node.run(on_round=lambda res: node.request_stop())
    assert [r.round for r in results] == [1]
    assert [p.name for p in (cfg.run_dir / "checkpoints").iterdir()] == ["ckpt-00000001"]
    # Started again with the same config, the node resumes at round 2.
    again = Node(cfg)
    assert again.state.start_round == 2
    again.parts.close()


def test_run_keeps_only_the_latest_results_and_checkpoints_the_last_round(tmp_path, tiny_model_dir, monkeypatch):
    monkeypatch.setattr(daemon, "KEPT_RESULTS", 2)  # a long-running node holds a bounded number of results
    cfg = node_config(tmp_path, tiny_model_dir, rounds=3, checkpoint_every=10)
    seen: list[int] = []
    results = Node(cfg).run(on_round=lambda res: seen.append(res.round))
    assert seen == [1, 2, 3] and [r.round for r in results] == [2, 3]
    assert [r["round"] for r in read_jsonl(cfg.run_dir / "metrics.jsonl")] == [0, 1, 2, 3]
    assert [p.name for p in (cfg.run_dir / "checkpoints").iterdir()] == ["ckpt-00000003"]
