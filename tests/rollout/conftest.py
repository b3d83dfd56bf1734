"""Fixtures of the rollout tests: a tiny seeded Qwen2 with the real Qwen tokenizer, and references."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import pytest
import torch

from ftis_swarm.core.logprobs import token_logprobs
from ftis_swarm.models.tiny import build_tiny_qwen2
from ftis_swarm.rollout import GroupHeader, PromptRequest
from ftis_swarm.wire import Group

HEADER = GroupHeader(run_id="test-run", sender="peer-a", model_id="tiny-qwen2")
PROMPTS = [
    PromptRequest("arith", "arith/v1/0/0", [151644, 872, 198, 18, 488, 19, 284]),
    PromptRequest("arith", "arith/v1/0/1", [9707, 11]),
    PromptRequest("gsm8k", "gsm8k/test/17", [785, 3974, 13876, 38835, 34208, 916, 279, 15678, 5562, 13, 1084]),
]
"""Prompts of three lengths (7, 2, 11 tokens): left padding and position ids get exercised."""


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer Qwen2 (hidden 64, head size 32) saved with the real Qwen tokenizer."""
    return build_tiny_qwen2(tmp_path_factory.mktemp("tiny-qwen2"), seed=0)


@pytest.fixture
def tiny_model(tiny_dir: Path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32).eval()


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_dir: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_dir)


def reference_logprobs(model, group: Group) -> list[np.ndarray]:
    """The learner's recomputation (`token_logprobs`, right-padded batch) of each completion's log-probs."""
    prompt = [int(t) for t in group.prompt_ids]
    seqs = [prompt + [int(t) for t in c] for c in group.completion_ids]
    width = max(len(s) for s in seqs)
    ids = torch.zeros((len(seqs), width), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s)
        mask[i, : len(s)] = 1
    with torch.no_grad():
        lp = token_logprobs(model, ids, mask, temperature=group.temperature)
    start = len(prompt) - 1
    return [lp[i, start : start + len(c)].numpy() for i, c in enumerate(group.completion_ids)]


def max_logprob_gap(model, groups: Sequence[Group]) -> float:
    """Largest |logp_gen - token_logprobs| over every token of every group."""
    gap = 0.0
    for g in groups:
        for got, ref in zip(g.logp_gen, reference_logprobs(model, g)):
            gap = max(gap, float(np.abs(got - ref).max()))
    return gap


def perturbed_copy(model, scale: float = 0.05, seed: int = 1):
    """A deep copy of `model` with seeded noise added to every parameter (a new policy)."""
    import copy

    other = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * scale)
    return other


def lora_adapter(model, out_dir: Path, seed: int):
    """Saves a peft LoRA adapter with random (non-zero) A and B for `model` to `out_dir`; returns the PeftModel."""
    import copy

    from peft import LoraConfig, get_peft_model

    torch.manual_seed(seed)
    config = LoraConfig(
        r=8, lora_alpha=16, init_lora_weights=False,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    )
    peft_model = get_peft_model(copy.deepcopy(model), config)
    peft_model.save_pretrained(out_dir)
    return peft_model.eval()


@pytest.fixture(scope="session")
def kit():
    """The helpers above, for test modules (conftest is not importable under --import-mode=importlib)."""
    from types import SimpleNamespace

    return SimpleNamespace(
        header=HEADER, prompts=PROMPTS, gap=max_logprob_gap, reference=reference_logprobs,
        perturbed=perturbed_copy, lora=lora_adapter,
    )
