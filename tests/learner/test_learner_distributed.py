"""FSDP2 under torchrun (2 ranks, gloo on CPU) against the single-process learner, on one batch.

Weights after an AdamW step cannot catch a gradient-scale bug (Adam divides the scale out),
so the comparison is on the loss, the fp32 gradient of every parameter and its global norm.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from learner_samples import build_learner_model, sample_group, shift_logp
from transformers import AutoModelForCausalLM

from ftis_swarm.config import LearnerConfig, LoRAConfig
from ftis_swarm.learner.batch import ScoredGroup
from ftis_swarm.learner.checkpoint import CheckpointManager
from ftis_swarm.learner.learner import Learner

WORKER = Path(__file__).resolve().parent / "dist_worker.py"
PROMPT_A = [151644, 872, 198, 18, 10, 19, 28]
PROMPT_B = [151644, 872, 198, 22, 9, 15, 10, 16, 17, 28]
LORA = LoRAConfig(rank=4, alpha=8.0)


def _items(model) -> dict[str, list[ScoredGroup]]:
    own_a = sample_group(model, PROMPT_A, G=3, length=5, temperature=0.7, seed=1)
    own_b = sample_group(model, PROMPT_B, G=4, length=6, temperature=1.0, seed=2)
    peer = shift_logp(sample_group(model, PROMPT_B, G=4, length=4, seed=3, sender="peer"), -0.05)
    mixed = [ScoredGroup.vertical(own_a, [1, 0, 0], offpolicy=False, source=0),
             ScoredGroup.vertical(own_b, [1, 0, 1, 0], offpolicy=False, source=0),
             ScoredGroup.vertical(peer, [1, 0, 0, 0], offpolicy=True, source=1)]
    return {"mixed": mixed, "one_group": mixed[:1]}


CASES = {
    # 8 rows with a gradient in 5 micro-batches: rank 1 runs a ghost micro-batch to match rank 0's 3
    "full": (LearnerConfig(lr=1e-3, grad_clip=1e9, micro_batch=2), "mixed"),
    # one micro-batch: rank 1 has no rows at all and still joins every collective
    "lora": (LearnerConfig(lr=1e-3, grad_clip=1e9, micro_batch=8, lora=LORA), "one_group"),
    "lora_bf16": (LearnerConfig(lr=1e-3, grad_clip=1e9, micro_batch=2, dtype="bf16", lora=LORA,
                                activation_checkpointing=True), "mixed"),
}


@pytest.fixture(scope="module")
def sharded(tmp_path_factory, tiny_dir):
    """Runs every case once under torchrun with 2 ranks; returns (rank 0's results, items, save dir)."""
    work = tmp_path_factory.mktemp("dist")
    items = _items(AutoModelForCausalLM.from_pretrained(tiny_dir))
    cases = [{"name": name, "model_dir": str(tiny_dir), "cfg": cfg.model_dump_json(), "items": items[which],
              "save_dir": str(work / f"saved-{name}"), "ckpt_save": str(work / f"ckpt-{name}")}
             for name, (cfg, which) in CASES.items()]
    one, _ = _single(tiny_dir, "full", items)  # a one-process checkpoint for two ranks to resume from
    CheckpointManager(work / "ckpt-one").save(round_idx=1, learner=one, state={})
    cases.append({"name": "resumed", "model_dir": str(tiny_dir), "cfg": CASES["full"][0].model_dump_json(),
                  "ckpt_load": str(work / "ckpt-one"), "save_dir": str(work / "saved-resumed")})
    torch.save(cases, work / "cases.pt")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                           "--standalone", str(WORKER), str(work / "cases.pt"), str(work / "out.pt")],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return torch.load(work / "out.pt", weights_only=False), items, work


_SINGLE: dict[tuple[str, str], tuple[Learner, dict]] = {}


def _single(tiny_dir, name: str, items) -> tuple[Learner, dict]:
    """The one-process learner after one update on the case's batch (built once per module; read only)."""
    key = (str(tiny_dir), name)
    if key not in _SINGLE:
        cfg, which = CASES[name]
        learner = Learner(build_learner_model(str(tiny_dir), cfg), cfg=cfg, pad_id=0)
        _SINGLE[key] = learner, learner.update(items[which])
    return _SINGLE[key]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["full", "lora"])
def test_two_ranks_give_the_single_process_loss_and_gradients(sharded, tiny_dir, name) -> None:
    results, items, _ = sharded
    got = results[name]
    learner, ref = _single(tiny_dir, name, items)
    assert ref["sequences_with_gradient"] == got["metrics"]["sequences_with_gradient"] > 0
    assert got["metrics"]["loss"] == pytest.approx(ref["loss"], abs=1e-6)
    assert got["metrics"]["grad_norm"] == pytest.approx(ref["grad_norm"], rel=1e-6)
    assert got["metrics"]["frac_filtered"] == ref["frac_filtered"]
    ref_grads = {n: p.grad for n, p in learner.model.named_parameters() if p.grad is not None}
    assert set(got["grads"]) == set(ref_grads)
    worst = max(float((got["grads"][n] - g).abs().max()) for n, g in ref_grads.items())
    assert worst < 1e-6
    assert max(float(g.abs().max()) for g in ref_grads.values()) > 1e-3  # gradients that could differ


@pytest.mark.slow
def test_parameters_are_sharded_across_the_ranks(sharded) -> None:
    got = sharded[0]["full"]
    assert got["local_shard_numel"] == pytest.approx(got["full_numel"] / 2, rel=0.01)


@pytest.mark.slow
def test_saved_full_weights_load_with_transformers_and_match_one_process_step(sharded, tiny_dir) -> None:
    _, items, work = sharded
    learner, _ = _single(tiny_dir, "full", items)
    loaded = AutoModelForCausalLM.from_pretrained(work / "saved-full")
    lr = CASES["full"][0].lr
    for (n, p), (m, q) in zip(learner.model.named_parameters(), loaded.named_parameters()):
        assert n == m
        torch.testing.assert_close(q, p.detach(), atol=2.5 * lr, rtol=0)  # one Adam step moves at most ~lr


@pytest.mark.slow
def test_bf16_lora_keeps_bf16_base_weights_and_fp32_adapter(sharded, tiny_dir) -> None:
    results, items, work = sharded
    got = results["lora_bf16"]
    assert got["trainable_dtypes"] == ["torch.float32"] and got["frozen_dtypes"] == ["torch.bfloat16"]
    learner, ref = _single(tiny_dir, "lora_bf16", items)
    assert got["metrics"]["grad_norm"] == pytest.approx(ref["grad_norm"], rel=0.05)  # bf16 compute on both
    from peft import PeftModel

    adapted = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_dir), work / "saved-lora_bf16")
    names = [n for n, _ in adapted.named_parameters() if "lora_A" in n]
    assert len(names) == 2 * 7  # 2 layers x 7 target modules


@pytest.mark.slow
def test_checkpoints_move_between_one_process_and_two_ranks(sharded, tiny_dir) -> None:
    results, items, work = sharded
    one, _ = _single(tiny_dir, "full", items)
    expected = one.optimizer_state()
    # two ranks resume a one-process checkpoint: the same weights, the same AdamW state, shard by shard
    loaded = results["resumed"]["optimizer_state"]
    assert set(loaded["state"]) == set(expected["state"]) and len(expected["state"]) > 10
    for name, entry in expected["state"].items():
        for key in ("exp_avg", "exp_avg_sq", "step"):
            torch.testing.assert_close(loaded["state"][name][key], entry[key], atol=0, rtol=0)
    resumed = AutoModelForCausalLM.from_pretrained(work / "saved-resumed")
    for (n, p), (_, q) in zip(one.model.named_parameters(), resumed.named_parameters()):
        assert torch.equal(p.detach(), q), n
    # one process resumes the two ranks' checkpoint, and holds what it would have after its own update
    fresh = Learner(build_learner_model(str(tiny_dir), CASES["full"][0]), cfg=CASES["full"][0], pad_id=0)
    manager = CheckpointManager(work / "ckpt-full")
    state = manager.load(manager.latest(), fresh)
    assert state["round"] == 1 and fresh.policy_version == 1
    for name, entry in fresh.optimizer_state()["state"].items():
        torch.testing.assert_close(entry["exp_avg"], expected["state"][name]["exp_avg"], atol=1e-7, rtol=0)
