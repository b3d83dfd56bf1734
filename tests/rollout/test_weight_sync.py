"""In-memory weight sync: the generator's copy follows the learner's model without a file."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ftis_swarm.config import LearnerConfig, LoRAConfig, SamplingConfig
from ftis_swarm.learner.learner import apply_lora
from ftis_swarm.rollout import TransformersBackend
from ftis_swarm.rollout.weight_sync import InMemorySync, model_copy
from tests.rollout.conftest import HEADER, PROMPTS


def _step(model: torch.nn.Module) -> None:
    """Moves every trainable parameter, as an optimiser step would."""
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(torch.randn_like(p) * 0.05)  # (same shape)


def test_full_copy_follows_the_learner_bit_for_bit_and_samples_like_it(tiny_model, tiny_tokenizer):
    twin = model_copy(tiny_model)
    sync = InMemorySync(tiny_model, twin)
    torch.manual_seed(0)
    _step(tiny_model)
    before = {k: v.clone() for k, v in twin.state_dict().items()}
    assert any(not torch.equal(before[k], v) for k, v in tiny_model.state_dict().items())  # the copy lags
    storage = {k: v.data_ptr() for k, v in twin.state_dict().items()}
    sync.sync()
    for k, v in tiny_model.state_dict().items():
        assert torch.equal(twin.state_dict()[k], v), k
        assert twin.state_dict()[k].data_ptr() == storage[k]  # in place: no new tensor
    assert sync.tensors == len(list(tiny_model.parameters()))
    assert not any(p.requires_grad for p in twin.parameters())
    # the same seeded call on either model gives the same completions; the log-probs agree to fp32 rounding
    # (a kernel may take another path for another tensor's alignment, so not always bit for bit)
    sampling = SamplingConfig(group_size=2, max_new_tokens=5, seed=7)
    a = TransformersBackend(model=tiny_model, tokenizer=tiny_tokenizer, header=HEADER).generate(PROMPTS, 2, sampling)
    b = TransformersBackend(model=twin, tokenizer=tiny_tokenizer, header=HEADER).generate(PROMPTS, 2, sampling)
    for ga, gb in zip(a, b, strict=True):
        assert all((x == y).all() for x, y in zip(ga.completion_ids, gb.completion_ids, strict=True))
        assert all(np.allclose(x, y, rtol=0, atol=1e-5) for x, y in zip(ga.logp_gen, gb.logp_gen, strict=True))


def test_lora_sync_moves_the_adapter_alone(tiny_model):
    learner_model = apply_lora(tiny_model, LearnerConfig(lora=LoRAConfig(rank=4)))
    twin = model_copy(learner_model)
    sync = InMemorySync(learner_model, twin)
    trainable = [n for n, p in learner_model.named_parameters() if p.requires_grad]
    assert sync.tensors == len(trainable) and all("lora_" in n for n in trainable)
    total = sum(p.numel() * p.element_size() for p in learner_model.parameters())
    assert 0 < sync.bytes < total / 10
    _step(learner_model)
    sync.sync()
    mine = dict(twin.named_parameters())
    for n, p in learner_model.named_parameters():
        assert torch.equal(mine[n], p), n


def test_a_model_that_does_not_mirror_the_learner_is_refused(tiny_model, tiny_dir):
    from transformers import AutoModelForCausalLM

    from ftis_swarm.models.tiny import build_tiny_qwen2

    other = AutoModelForCausalLM.from_pretrained(build_tiny_qwen2(tiny_dir.parent / "wide", hidden_size=32, seed=1))
    with pytest.raises(ValueError, match="does not mirror"):
        InMemorySync(tiny_model, other)
