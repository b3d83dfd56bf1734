"""Generation runs ahead of learning (max_staleness >= 1): stale own samples, dropped groups, exact resume.

A lone node on a tiny Qwen2 taught arith's answer form (so its rounds take optimiser steps
and the policy version moves), in this process, with a real swarm peer and no others.
Slow: teaching the model takes about 25 CPU seconds, and the file runs 20 node rounds. The generator
samples in a process of its own (the default) except where a test says thread.
"""

from __future__ import annotations

import pytest
import torch

from ftis_swarm.config import load_node_config
from ftis_swarm.learner.checkpoint import CheckpointManager
from ftis_swarm.metrics import read_jsonl
from ftis_swarm.node.daemon import Node
from ftis_swarm.node.pipeline import fresh_enough
from ftis_swarm.ops.taught import build_tiny_arith_model
from ftis_swarm.rollout.process_backend import ProcessBackend

pytestmark = pytest.mark.net
slow = pytest.mark.slow


@pytest.fixture(scope="module")
def arith_model(tmp_path_factory):
    return build_tiny_arith_model(tmp_path_factory.mktemp("pipeline") / "tiny-arith")


def node_config(run_dir, model_dir, **over):
    flags = {"model": str(model_dir), "run_dir": str(run_dir), "rounds": 4, "prompts_per_round": 3,
             "sampling.group_size": 4, "sampling.max_new_tokens": 3, "round_deadline": 0.3,
             "checkpoint_every": 1, "swarm.transport.host": "127.0.0.1", "learner.lr": 1e-2, "threads": 2,
             "max_staleness": 1}
    flags.update(over)
    return load_node_config(None, flags)


def rows(run_dir):
    return list(read_jsonl(run_dir / "metrics.jsonl"))


def without_clocks(row):
    return {k: v for k, v in row.items() if k != "time" and not k.startswith("time_")}


def last_weights(run_dir):
    ckpt = CheckpointManager(run_dir / "checkpoints").latest()
    from safetensors.torch import load_file

    return {k: v for f in sorted(ckpt.rglob("*.safetensors")) for k, v in load_file(str(f)).items()}


@slow
@pytest.mark.parametrize("where", ["process", "thread"])
def test_groups_generated_ahead_are_one_version_old_weighted_never_filtered(tmp_path, arith_model, where):
    cfg = node_config(tmp_path / "run", arith_model, generate_in=where)
    node = Node(cfg)
    generator = node.pipeline.backend
    assert isinstance(generator, ProcessBackend) == (where == "process")
    node.run()
    if where == "process":
        assert generator.pid is None  # closed with the node
    lines = rows(cfg.run_dir)
    assert [r["round"] for r in lines] == [0, 1, 2, 3, 4]  # round 0: the held-out evaluation before any update
    assert [r["round"] for r in lines if "heldout_acc" in r] == [0, 4]  # and the last round's, after the sync
    got = lines[1:]
    assert got[0].get("stale_groups", 0) == 0  # round 1 is generated when it starts: on-policy
    versions = [0] + [r["policy_version"] for r in got]
    for i, r in enumerate(got[1:], start=1):
        # round i + 1's groups were generated during round i, with the weights from before round i's update
        lagging = versions[i] > versions[i - 1]
        assert r.get("stale_groups", 0) == (r["own_groups"] if lagging else 0), (i, versions)
        assert r["own_groups"] == cfg.prompts_per_round and r.get("stale_dropped", 0) == 0
    for r in got:
        assert r["frac_filtered"] == 0.0  # own samples, stale ones included, are never filtered
    assert sum(r.get("stale_groups", 0) for r in got) >= cfg.prompts_per_round  # some round did lag
    # a stale sample's weight exp(logp_old - logp_gen) carries the step it lags; a fresh one's is 1 up to rounding
    for r in got:
        if r.get("stale_groups"):
            assert r["kl_mean"] > 0 and abs(r["mean_weight"] - 1.0) > 1e-3, r
        else:
            assert r["kl_mean"] == 0.0 and abs(r["mean_weight"] - 1.0) < 1e-4, r
    for r in got:  # every round waited for the generation ahead, then synced the generator's copy
        assert r["time_sync"] >= 0 and r["time_generate_wait"] >= 0
    assert all(r["time_generate_ahead"] > 0 for r in got[:-1]) and got[-1]["time_generate_ahead"] == 0


@slow
def test_a_stopped_node_resumes_exactly_with_its_groups_generated_ahead(tmp_path, arith_model):
    ref = node_config(tmp_path / "ref", arith_model)
    Node(ref).run()
    cfg = node_config(tmp_path / "cut", arith_model)
    first = Node(cfg)
    first.run(on_round=lambda res: first.request_stop() if res.round == 2 else None)
    assert [r["round"] for r in rows(cfg.run_dir)] == [0, 1, 2]
    again = Node(cfg)
    assert again.state.start_round == 3 and sorted(again.pipeline._ready) == [3]  # round 3 came from the checkpoint
    again.run()
    assert [without_clocks(r) for r in rows(cfg.run_dir)] == [without_clocks(r) for r in rows(ref.run_dir)]
    a, b = last_weights(ref.run_dir), last_weights(cfg.run_dir)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert any(r.get("stale_groups") for r in rows(cfg.run_dir)[2:])  # the resumed rounds learned stale groups


@slow
def test_groups_older_than_max_staleness_are_dropped_and_counted(tmp_path, arith_model):
    """Generated two rounds ahead, then resumed with max_staleness 1: the round-3 groups lag two versions."""
    cfg = node_config(tmp_path / "run", arith_model, max_staleness=2)
    first = Node(cfg)
    first.run(on_round=lambda res: first.request_stop() if res.round == 2 else None)
    assert sorted(first.pipeline._ready) == [3, 4]
    versions = [r["policy_version"] for r in rows(cfg.run_dir)]
    lower = node_config(tmp_path / "run", arith_model, max_staleness=1)
    again = Node(lower)
    again.run()
    got = rows(cfg.run_dir)
    # round 3's groups came from the weights after round 0 (version 0); the learner is at versions[1]
    if versions[1] >= 2:
        assert got[2]["stale_dropped"] == cfg.prompts_per_round and got[2]["own_groups"] == 0
    assert sum(r.get("stale_dropped", 0) for r in got) >= 1


def test_fresh_enough_keeps_at_most_k_versions_behind():
    class G:
        def __init__(self, v):
            self.policy_version = v

    kept, dropped = fresh_enough([G(5), G(4), G(3), G(2)], 5, 2)
    assert [g.policy_version for g in kept] == [5, 4, 3] and dropped == 1


@slow
def test_the_experiments_vertical_arm_learns_stale_own_groups_as_the_pipelined_node(arith_model):
    """`max_staleness 1` in the experiment: round 1 as with 0, later own groups one version late."""
    from ftis_swarm.lab.experiment.config import ExperimentConfig
    from ftis_swarm.lab.experiment.run import run_arm

    def arm(k):
        cfg = ExperimentConfig(learners=({"model": str(arith_model), "learner": {"lr": 1e-2}},
                                         {"model": str(arith_model), "learner": {"lr": 1e-2, "lora": {"rank": 4, "alpha": 8.0}}}),
                               node={"rounds": 3, "prompts_per_round": 2, "max_staleness": k,
                                     "sampling": {"group_size": 4, "temperature": 1.0, "max_new_tokens": 3}},
                               arms=["vertical-ftis"], seeds=[0], eval_items=1, eval_max_new_tokens=2)
        return run_arm(cfg.model_dump_json(), "vertical-ftis", 0)["rounds"]

    sync, ahead = arm(0), arm(1)
    assert [x["reward"] for x in ahead[:2]] == [x["reward"] for x in sync[:2]]  # round 1: the same groups
    assert all(x.get("stale_groups", 0) == 0 for x in sync)
    for name in {x["learner"] for x in ahead}:
        mine = [x for x in ahead if x["learner"] == name]
        v = [0] + [x["policy_version"] for x in mine]  # v[r]: after round r
        for r in (2, 3):  # round r's groups were sampled before round r - 1 learned
            lagging = v[r - 1] > v[r - 2]
            assert mine[r - 1].get("stale_groups", 0) == (2 if lagging else 0), (name, r, v)
    assert sum(x.get("stale_groups", 0) for x in ahead) > 0
