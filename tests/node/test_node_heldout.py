"""A node's held-out curve (node/heldout.py) on real nodes of the tiny model taught arith's answer form.

Round 0 (before any update) and the last round are evaluated, and every `eval_every` rounds
between: in metrics.jsonl, on Prometheus, in the status document, with the answers
`ftis-node eval` gives on the same weights. The evaluation changes nothing in training, and a
resumed node neither redoes an evaluation nor loses the curve, and ends as the
uninterrupted node does.
"""

from __future__ import annotations

import json

import pytest

from ftis_swarm.config import load_node_config
from ftis_swarm.lab.bench.run_compare import compare_tensors, tensor_files
from ftis_swarm.metrics import read_jsonl
from ftis_swarm.node.daemon import Node
from ftis_swarm.ops.evaluate import evaluate
from ftis_swarm.ops.summary import format_summary, summarize_run
from ftis_swarm.ops.taught import build_tiny_arith_model
from ftis_swarm.peers.loopback import LoopbackHub

pytestmark = pytest.mark.slow

TOKENS = 6


@pytest.fixture(scope="module")
def taught(tmp_path_factory):
    """Right on some arith_mix items at greedy (0.04 of the held-out 50 as built): accuracies that are not all 0."""
    return build_tiny_arith_model(tmp_path_factory.mktemp("heldout") / "tiny-arith")


def node_config(run_dir, model, **over):
    keys = {"model": str(model), "run_dir": str(run_dir), "rounds": 4, "prompts_per_round": 4,
            "sampling.group_size": 8, "sampling.max_new_tokens": TOKENS, "sampling.temperature": 1.0,
            "round_deadline": 0.1, "checkpoint_every": 1, "learner.lr": 1e-3, "threads": 1, "eval_every": 3,
            "eval_tasks": ["arith_mix"]}
    keys.update(over)
    return load_node_config(None, keys)


def run_alone(cfg, **kwargs) -> Node:
    node = Node(cfg, swarm=LoopbackHub().member("A"))
    node.run(**kwargs)
    return node


def without_clock_and_eval(rows):
    return [{k: v for k, v in r.items() if k != "time" and not k.startswith(("time_", "heldout_"))}
            for r in rows if r["round"]]


def test_round_0_and_the_last_round_are_evaluated_in_metrics_prometheus_and_status(tmp_path, taught):
    cfg = node_config(tmp_path / "a", taught, metrics_port=0)
    node = Node(cfg, swarm=LoopbackHub().member("A"))
    (sink,) = [s for s in node.parts.sink.sinks if hasattr(s, "registry")]
    node.run()
    rows = list(read_jsonl(cfg.run_dir / "metrics.jsonl"))
    assert [r["round"] for r in rows] == [0, 1, 2, 3, 4]
    evaluated = {r["round"]: r for r in rows if "heldout_acc" in r}
    assert sorted(evaluated) == [0, 3, 4]  # before any update, every 3 rounds, the last
    start = evaluated[0]
    assert start["policy_version"] == 0 and start["heldout_items"] == 50 and start["time_eval"] > 0
    assert rows[-1]["policy_version"] >= 1  # the weights evaluated last are trained ones

    # Prometheus: the last evaluation's gauges, per further task by label; round 0 is not a round
    got = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in sink.registry.collect() for s in f.samples}
    assert got[("ftis_heldout_acc", ())] == evaluated[4]["heldout_acc"]
    assert got[("ftis_heldout_acc_by_task", (("task", "arith_mix"),))] == evaluated[4]["heldout_acc_arith_mix"]
    assert got[("ftis_heldout_items", ())] == 50 and got[("ftis_rounds_total", ())] == 4

    # the node's numbers are `ftis-node eval`'s on the same weights: the model it started from, its last checkpoint
    accs = []
    for weights, r in ((taught, 0), (cfg.run_dir / "checkpoints" / "ckpt-00000004" / "model", 4)):
        for task, key in (("arith", "heldout_acc"), ("arith_mix", "heldout_acc_arith_mix")):
            res = evaluate(str(weights), task, limit=50, max_new_tokens=TOKENS, backend="transformers")
            assert res["pass_at_1"] == evaluated[r][key], (weights, task)
            accs.append(res["pass_at_1"])
    assert any(a > 0 for a in accs)  # a comparison of zeros would prove little

    doc = json.loads((cfg.run_dir / "status.json").read_text())
    assert doc["heldout"]["tasks"] == ["arith", "arith_mix"] and doc["heldout"]["items"] == 50
    assert [(p["round"], p["heldout_acc"]) for p in doc["heldout"]["curve"]] == \
        [(r, evaluated[r]["heldout_acc"]) for r in (0, 3, 4)]
    assert [x["heldout_acc"] for x in doc["rounds"]] == [None, None, evaluated[3]["heldout_acc"],
                                                         evaluated[4]["heldout_acc"]]
    # the closing table: start -> end, and the round statistics without round 0's line
    summary = summarize_run(cfg.run_dir)
    assert summary["rounds"] == 4 and (summary["heldout_start_round"], summary["heldout_end_round"]) == (0, 4)
    line = format_summary([summary]).splitlines()[1]
    assert f"{start['heldout_acc']:.3f} (r0) -> {evaluated[4]['heldout_acc']:.3f} (r4)" in line


def test_the_evaluation_changes_nothing_in_training(tmp_path, taught):
    logs, weights = [], []
    for every in (0, 1):  # none, and one after every round (and at round 0)
        cfg = node_config(tmp_path / f"every-{every}", taught, eval_every=every)
        run_alone(cfg)
        logs.append(without_clock_and_eval(read_jsonl(cfg.run_dir / "metrics.jsonl")))
        weights.append(tensor_files(cfg.run_dir / "checkpoints" / "ckpt-00000004"))
    assert len(logs[0]) == 4 and logs[0] == logs[1]
    assert sum(r["sequences_with_gradient"] > 0 for r in logs[0]) >= 2  # updates were made: weights moved
    n, differing, worst = compare_tensors(*weights)
    assert n > 0 and differing == 0 and worst == 0.0
    rounds = [r["round"] for r in read_jsonl(tmp_path / "every-1" / "metrics.jsonl") if "heldout_acc" in r]
    assert rounds == [0, 1, 2, 3, 4]


def test_a_resumed_node_keeps_its_curve_redoes_no_evaluation_and_ends_as_the_uninterrupted_one(tmp_path, taught):
    whole = node_config(tmp_path / "whole", taught)
    run_alone(whole)
    parts = node_config(tmp_path / "parts", taught)

    def stop_after_3(res):
        if res.round == 3:
            first.request_stop()

    first = Node(parts, swarm=LoopbackHub().member("A"))
    first.run(on_round=stop_after_3)  # stops after round 3 (evaluated), checkpointed
    state = json.loads((parts.run_dir / "checkpoints" / "ckpt-00000003" / "state.json").read_text())
    assert [p["round"] for p in state["heldout"]["curve"]] == [0, 3]
    second = Node(parts, swarm=LoopbackHub().member("A"))
    assert second.state.start_round == 4 and [p["round"] for p in second.heldout.curve] == [0, 3]
    second.run()

    rows = list(read_jsonl(parts.run_dir / "metrics.jsonl"))
    assert [r["round"] for r in rows] == [0, 1, 2, 3, 4]  # round 0's evaluation once: not redone
    assert without_clock_and_eval(rows) == without_clock_and_eval(read_jsonl(whole.run_dir / "metrics.jsonl"))
    accs = [{k: v for k, v in r.items() if k.startswith("heldout_")} for r in rows]
    assert accs == [{k: v for k, v in r.items() if k.startswith("heldout_")}
                    for r in read_jsonl(whole.run_dir / "metrics.jsonl")]
    n, differing, _ = compare_tensors(tensor_files(whole.run_dir / "checkpoints" / "ckpt-00000004"),
                                      tensor_files(parts.run_dir / "checkpoints" / "ckpt-00000004"))
    assert n > 0 and differing == 0
    doc = json.loads((parts.run_dir / "status.json").read_text())
    assert [p["round"] for p in doc["heldout"]["curve"]] == [0, 3, 4]  # the first life's points, from the checkpoint
