"""Atomic checkpoints: restore, corruption fallback, pruning, and loading with transformers/peft."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from learner_samples import sample_group
from transformers import AutoModelForCausalLM

from ftis_swarm.config import LearnerConfig, LoRAConfig
from ftis_swarm.learner.batch import ScoredGroup
from ftis_swarm.learner.checkpoint import CheckpointError, CheckpointManager
from ftis_swarm.learner.learner import Learner, apply_lora

PROMPT = [151644, 872, 198, 18, 10, 19, 28]


def trained_learner(model, cfg, rounds=1):
    learner = Learner(apply_lora(model, cfg), cfg=cfg, pad_id=0)
    for r in range(rounds):
        g = sample_group(learner.model, PROMPT, G=4, length=5, seed=r)
        learner.update([ScoredGroup.vertical(g, [1, 0, 0, 1], offpolicy=False, source=0)])
    return learner


def test_restore_full_model_optimizer_rng_and_state(tiny_dir, tmp_path):
    cfg = LearnerConfig(lr=1e-3)
    learner = trained_learner(AutoModelForCausalLM.from_pretrained(tiny_dir), cfg, rounds=2)
    mgr = CheckpointManager(tmp_path / "ckpt", keep=2)
    torch.manual_seed(123)
    path = mgr.save(round_idx=2, learner=learner, state={"consumed": ["g1", "g2"]})
    expected_rng = torch.rand(3)

    fresh = Learner(AutoModelForCausalLM.from_pretrained(tiny_dir), cfg=cfg, pad_id=0)
    assert mgr.latest() == path and mgr.round_of(path) == 2 and mgr.round_of(None) == 0
    state = CheckpointManager(tmp_path / "ckpt").load(path, fresh)
    assert state["round"] == 2 and state["consumed"] == ["g1", "g2"] and fresh.policy_version == 2
    for (n, a), (_, b) in zip(learner.model.named_parameters(), fresh.model.named_parameters()):
        assert torch.equal(a, b), n
    s_old, s_new = learner.optimizer.state_dict()["state"], fresh.optimizer.state_dict()["state"]
    assert s_old.keys() == s_new.keys() and torch.equal(s_old[0]["exp_avg"], s_new[0]["exp_avg"])
    assert torch.equal(torch.rand(3), expected_rng)
    # The model directory loads with transformers, unchanged.
    reloaded = AutoModelForCausalLM.from_pretrained(path / "model")
    assert torch.equal(reloaded.model.norm.weight, learner.model.model.norm.weight)


def test_corrupted_or_partial_latest_falls_back_to_previous(tiny_dir, tmp_path):
    learner = trained_learner(AutoModelForCausalLM.from_pretrained(tiny_dir), LearnerConfig())
    mgr = CheckpointManager(tmp_path, keep=3)
    first = mgr.save(round_idx=1, learner=learner, state={})
    second = mgr.save(round_idx=2, learner=learner, state={})
    assert mgr.latest() == second
    # A partial write: bytes of the latest model file cut off after it was marked complete.
    weights = next((second / "model").glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes()[:1000])
    assert mgr.latest() == first
    # A save killed before COMPLETE: the directory exists, the marker does not.
    third = mgr.save(round_idx=3, learner=learner, state={})
    (third / "COMPLETE").unlink()
    assert mgr.latest() == first
    # A save killed before the rename leaves a temporary directory: removed on the next start.
    (tmp_path / ".tmp-ckpt-00000004-999").mkdir()
    assert not list(CheckpointManager(tmp_path).root.glob(".tmp-*"))


def test_keeps_only_the_last_n(tiny_dir, tmp_path):
    learner = trained_learner(AutoModelForCausalLM.from_pretrained(tiny_dir), LearnerConfig())
    mgr = CheckpointManager(tmp_path, keep=2)
    for r in (1, 2, 3, 4):
        mgr.save(round_idx=r, learner=learner, state={})
    assert [p.name for p in mgr.complete()] == ["ckpt-00000004", "ckpt-00000003"]


def test_keeps_one_by_default_and_never_fewer_while_the_next_is_written(tiny_dir, tmp_path, monkeypatch):
    learner = trained_learner(AutoModelForCausalLM.from_pretrained(tiny_dir), LearnerConfig())
    mgr = CheckpointManager(tmp_path)
    first = mgr.save(round_idx=1, learner=learner, state={})
    one = mgr.disk_bytes()
    second = mgr.save(round_idx=2, learner=learner, state={})
    assert [p.name for p in mgr.complete()] == [second.name] and not first.exists()
    assert mgr.disk_bytes() == one  # the same model: one checkpoint's bytes, not two

    # A save killed between its rename and its marker: the previous checkpoint is still there and loads.
    def killed(self, ckpt):
        raise KeyboardInterrupt

    monkeypatch.setattr(CheckpointManager, "_mark_complete", killed)
    with pytest.raises(KeyboardInterrupt):
        mgr.save(round_idx=3, learner=learner, state={})
    monkeypatch.undo()
    assert mgr.latest() == second and (tmp_path / "ckpt-00000003").is_dir()
    # The next complete save removes both the old checkpoint and the unfinished one.
    fourth = mgr.save(round_idx=4, learner=learner, state={})
    assert sorted(p.name for p in tmp_path.iterdir()) == [fourth.name]
    with pytest.raises(ValueError, match="at least one"):
        CheckpointManager(tmp_path, keep=0)


def test_lora_checkpoint_loads_with_peft(tiny_dir, tmp_path):
    from peft import PeftModel

    cfg = LearnerConfig(lr=1e-2, lora=LoRAConfig(rank=4, alpha=8, target_modules=["q_proj", "v_proj"]))
    learner = trained_learner(AutoModelForCausalLM.from_pretrained(tiny_dir), cfg)
    path = CheckpointManager(tmp_path).save(round_idx=1, learner=learner, state={})
    assert json.loads((path / "adapter" / "adapter_config.json").read_text())["r"] == 4
    peft_model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_dir), path / "adapter")
    ids = torch.tensor([PROMPT])
    with torch.no_grad():
        torch.testing.assert_close(peft_model(ids).logits, learner.model(ids).logits)
    fresh = Learner(apply_lora(AutoModelForCausalLM.from_pretrained(tiny_dir), cfg), cfg=cfg, pad_id=0)
    CheckpointManager(tmp_path).load(path, fresh)
    with torch.no_grad():
        torch.testing.assert_close(fresh.model(ids).logits, learner.model(ids).logits)


def test_a_checkpoint_of_another_kind_is_refused_clearly(tiny_dir, tmp_path):
    learner = trained_learner(AutoModelForCausalLM.from_pretrained(tiny_dir), LearnerConfig())
    path = CheckpointManager(tmp_path).save(round_idx=1, learner=learner, state={})
    cfg = LearnerConfig(lora=LoRAConfig(rank=2))
    lora = Learner(apply_lora(AutoModelForCausalLM.from_pretrained(tiny_dir), cfg), cfg=cfg, pad_id=0)
    with pytest.raises(CheckpointError, match="does not hold an adapter"):
        CheckpointManager(tmp_path).load(path, lora)
    shutil.rmtree(path / "model")
    assert CheckpointManager(tmp_path).latest() is None
