"""A LoRA checkpoint names its base model so that `ftis-node eval` loads it from any working directory."""

from __future__ import annotations

import json

import torch
from learner_samples import sample_group
from transformers import AutoModelForCausalLM

from ftis_swarm.config import LearnerConfig, LoRAConfig
from ftis_swarm.learner.batch import ScoredGroup
from ftis_swarm.learner.checkpoint import CheckpointManager
from ftis_swarm.learner.learner import Learner, apply_lora
from ftis_swarm.models import portable_model_name
from ftis_swarm.ops.evaluate import load_for_eval

PROMPT = [151644, 872, 198, 18, 10, 19, 28]


def test_short_names_and_hub_ids_stay_folders_become_absolute(tmp_path, monkeypatch):
    assert portable_model_name("smollm2-135m") == "smollm2-135m"
    assert portable_model_name(" Qwen2.5-1.5B ") == "Qwen2.5-1.5B"
    assert portable_model_name("HuggingFaceTB/SmolLM2-360M") == "HuggingFaceTB/SmolLM2-360M"
    (tmp_path / "m").mkdir()
    monkeypatch.chdir(tmp_path)
    assert portable_model_name("m") == str(tmp_path / "m")


def test_adapter_loads_on_its_base_from_another_directory(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tiny_model_dir.parent)
    relative = tiny_model_dir.name  # how a user may have named it: relative to where the node ran
    cfg = LearnerConfig(lr=1e-2, lora=LoRAConfig(rank=4, alpha=8, target_modules=["q_proj", "v_proj"]))
    learner = Learner(apply_lora(AutoModelForCausalLM.from_pretrained(relative), cfg), cfg=cfg, pad_id=0)
    group = sample_group(learner.model, PROMPT, G=4, length=5, seed=0)
    learner.update([ScoredGroup.vertical(group, [1, 0, 0, 1], offpolicy=False, source=0)])
    path = CheckpointManager(tmp_path / "ckpt").save(round_idx=1, learner=learner, state={},
                                                     base_model=portable_model_name(relative))
    recorded = json.loads((path / "adapter" / "adapter_config.json").read_text())["base_model_name_or_path"]
    assert recorded == str(tiny_model_dir.resolve())
    assert CheckpointManager(tmp_path / "ckpt").latest() == path  # still complete after the rewrite

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    model, _ = load_for_eval(str(path / "adapter"))
    ids = torch.tensor([PROMPT])
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, learner.model(ids).logits)
        base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)(ids).logits
    assert not torch.allclose(base, learner.model(ids).logits)  # the adapter changed something
