"""The experiment measures the product: its `solo` arm trains each learner exactly as a lone node.

Learner A of seed s is the node with seed s and the config `arm_config` derives; run as
a real `ftis-node join` process with no peers, that node must end two rounds with the same
weights as the experiment's learner A (both are fed by `node.rollouts` and learn through
`node.learning.learn_round`). The model is the tiny Qwen2 taught arith's answer form, so
both rounds take optimiser steps: the weights the test compares have moved.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from ftis_swarm.config import dump_node_config
from ftis_swarm.lab.bench.run_compare import compare_tensors, initial_weights, tensor_files
from ftis_swarm.lab.experiment.config import ExperimentConfig, arm_config
from ftis_swarm.lab.experiment.run import run_arm
from ftis_swarm.metrics import read_jsonl
from ftis_swarm.ops.taught import build_tiny_arith_model

pytestmark = [pytest.mark.slow, pytest.mark.net]

SEED = 1
ROUNDS = 2


@pytest.fixture(scope="module")
def tiny_arith(tmp_path_factory):
    return build_tiny_arith_model(tmp_path_factory.mktemp("models") / "tiny-arith")


def _join(tmp_path, cfg, run_dir):
    """Starts a lone `ftis-node join` from the node config the experiment derived (one thread, as the experiment here)."""
    cfg_file = tmp_path / f"{run_dir.name}.json"
    cfg_file.write_text(dump_node_config(cfg))
    cmd = [sys.executable, "-c", "from ftis_swarm.cli.main import main; main()", "join", "--config", str(cfg_file),
           "--run-dir", str(run_dir), "--host", "127.0.0.1", "--threads", "1", "--round-deadline", "0.3",
           "--checkpoint-every", "1", "--no-table"]
    with open(tmp_path / f"{run_dir.name}.stderr", "w") as err:
        return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)


def test_solo_arm_trains_as_a_lone_node(tmp_path, tiny_arith):
    cfg = ExperimentConfig(learners=({"model": str(tiny_arith), "learner": {"lr": 3e-3}},
                                     {"model": str(tiny_arith), "learner": {"lr": 3e-3, "lora": {"rank": 4, "alpha": 8.0}}}),
                           node={"task": "arith", "rounds": ROUNDS, "prompts_per_round": 3,
                                 "sampling": {"group_size": 4, "temperature": 1.0, "max_new_tokens": 6}},
                           arms=["solo"], seeds=[SEED], eval_items=2, eval_max_new_tokens=4)
    node_cfgs = [arm_config(cfg, index, SEED, "solo") for index in range(2)]
    assert node_cfgs[0].seed == SEED and node_cfgs[1].seed != SEED
    procs = [_join(tmp_path, c, tmp_path / f"node-{name}") for c, name in zip(node_cfgs, cfg.learner_names)]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:  # the experiment's solo arm, here, while the two nodes run
        result = run_arm(cfg.model_dump_json(), "solo", SEED, weights_dir=tmp_path / "experiment")
        for proc, name in zip(procs, cfg.learner_names):
            assert proc.wait(timeout=600) == 0, (tmp_path / f"node-{name}.stderr").read_text()[-3000:]
    finally:
        torch.set_num_threads(threads)
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    initial = initial_weights(str(tiny_arith))
    for node_cfg, name in zip(node_cfgs, cfg.learner_names):
        ckpt = tmp_path / f"node-{name}" / "checkpoints" / f"ckpt-{ROUNDS:08d}"
        node_w, exp_w = tensor_files(ckpt), tensor_files(tmp_path / "experiment" / name)
        assert node_w.keys() == exp_w.keys() and len(node_w) > 0
        worst = max(float((node_w[k].double() - exp_w[k].double()).abs().max()) for k in node_w)
        assert worst <= 1e-6, f"learner {name}: node and experiment differ by {worst}"
        print(f"learner {name}: {len(node_w)} tensors, {compare_tensors(node_w, exp_w)[1]} not bit-identical, "
              f"largest difference {worst}")

        rows = list(read_jsonl(tmp_path / f"node-{name}" / "metrics.jsonl"))
        records = [x for x in result["rounds"] if x["learner"] == name]
        assert [x["policy_version"] for x in records] == [r["policy_version"] for r in rows]
        assert rows[-1]["policy_version"] >= 1  # a step was taken: the weights compared have moved
        # the same prompts and completions: the same rewards in each round
        assert [x["reward"] for x in records] == pytest.approx([r["reward"] for r in rows], abs=1e-12)
        if node_cfg.learner.lora is None:  # the full model moved away from where it started
            moved = max(float((node_w[k].double() - initial[k.split("/", 1)[1]].double()).abs().max())
                        for k in node_w)
            assert moved > 1e-4
        else:  # a LoRA adapter's B starts at zero: it moved once its first step was taken
            assert any(float(v.abs().max()) > 0 for k, v in node_w.items() if "lora_B" in k)
        assert json.loads((tmp_path / f"node-{name}" / "config.json").read_text())["seed"] == node_cfg.seed
