"""A node started again cuts its per-round files back to its last complete checkpoint, to nothing without one."""

from __future__ import annotations

import json

import pytest

from ftis_swarm.config import load_node_config
from ftis_swarm.metrics import read_jsonl
from ftis_swarm.node.daemon import Node

pytestmark = pytest.mark.net


def test_rounds_logged_before_any_complete_checkpoint_are_dropped(tmp_path, tiny_model_dir):
    cfg = load_node_config(None, {
        "model": str(tiny_model_dir), "run_dir": str(tmp_path / "run"), "rounds": 1, "prompts_per_round": 1,
        "sampling.group_size": 2, "sampling.max_new_tokens": 2, "round_deadline": 0.1, "swarm.transport.host": "127.0.0.1",
        "threads": 1})
    # what a node killed after round 1's metrics line, before its first checkpoint completed, leaves
    cfg.run_dir.mkdir(parents=True)
    (cfg.run_dir / "metrics.jsonl").write_text(json.dumps({"round": 1, "reward": 0.5}) + "\n")
    (cfg.run_dir / "consumed.jsonl").write_text(json.dumps({"round": 1, "peer_groups": ["ab" * 16]}) + "\n")
    (cfg.run_dir / "checkpoints" / "ckpt-00000001").mkdir(parents=True)  # renamed into place, no COMPLETE yet
    node = Node(cfg)
    try:
        assert node.state.start_round == 1
        assert (cfg.run_dir / "metrics.jsonl").read_text() == "" == (cfg.run_dir / "consumed.jsonl").read_text()
        node.run()
    finally:
        node.parts.close()
    # round 0's line (the held-out evaluation before any update) is cut back and written again with the rest
    assert [r["round"] for r in read_jsonl(cfg.run_dir / "metrics.jsonl")] == [0, 1]
    state = json.loads((cfg.run_dir / "checkpoints" / "ckpt-00000001" / "state.json").read_text())
    # what a resume needs to repeat the run: the generate calls (seeds), the intake, the health count
    assert state["rollout_calls"] == 1 and state["intake"]["deferred"] == [] and state["health"]["in_a_row"] == 0
