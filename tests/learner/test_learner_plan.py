"""The memory plan: shapes from data, terms from the learner's dtype and sharding choices."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from transformers import AutoModelForCausalLM

from ftis_swarm.config import LearnerConfig, LoRAConfig
from ftis_swarm.learner.learner import apply_lora
from ftis_swarm.learner.plan import (
    GIB,
    RolloutPlan,
    layer_activation_bytes,
    learner_peak,
    plan_memory,
    ranks_needed,
)
from ftis_swarm.models.shapes import ModelShape, shape_of

PUBLISHED_BILLIONS = {"Qwen2.5-1.5B": 1.54, "Qwen2.5-3B": 3.09, "Qwen2.5-7B": 7.62, "Qwen2.5-14B": 14.7,
                      "Qwen2.5-32B": 32.8}


@pytest.mark.parametrize("name", sorted(PUBLISHED_BILLIONS))
def test_embedded_shapes_give_the_published_parameter_counts(name) -> None:
    assert shape_of(name).params / 1e9 == pytest.approx(PUBLISHED_BILLIONS[name], rel=0.006)  # published to 3 digits
    assert shape_of(f"Qwen/{name}-Instruct") == shape_of(name.replace("Qwen2.5", "Qwen2.5-Coder"))


def test_a_checkpoint_folder_shape_counts_its_parameters_and_lora_exactly(tiny_dir, tiny_model) -> None:
    shape = shape_of(str(tiny_dir))
    assert shape.params == sum(p.numel() for p in tiny_model.parameters())
    cfg = LearnerConfig(lora=LoRAConfig(rank=4))
    adapted = apply_lora(AutoModelForCausalLM.from_pretrained(tiny_dir), cfg)
    trainable = sum(p.numel() for p in adapted.parameters() if p.requires_grad)
    assert shape.lora_params(4, tuple(cfg.lora.target_modules)) == trainable


def test_terms_follow_dtype_and_sharding() -> None:
    shape = shape_of("Qwen2.5-3B")
    full = plan_memory(shape, LearnerConfig(), rollout=RolloutPlan(backend="shared"))
    assert full.terms["weights"] == pytest.approx(shape.params * 4 / GIB)
    assert full.terms["optimizer"] == pytest.approx(2 * full.terms["gradients"])
    two = plan_memory(shape, LearnerConfig(), nproc=2, rollout=RolloutPlan(backend="transformers"))
    assert two.terms["weights"] == pytest.approx(full.terms["weights"] / 2)
    assert two.terms["rollout_weights"] == pytest.approx(shape.params * 2 / GIB)  # rank 0's own bf16 copy
    lora = plan_memory(shape, LearnerConfig(dtype="bf16", lora=LoRAConfig(rank=64)))
    trainable = shape.lora_params(64, tuple(LoRAConfig().target_modules))
    assert lora.terms["weights"] == pytest.approx((shape.params * 2 + trainable * 4) / GIB)  # bf16 base, fp32 adapter
    ckpt = plan_memory(shape, LearnerConfig(activation_checkpointing=True))
    assert ckpt.terms["activations"] < full.terms["activations"] / 4
    assert learner_peak(full) == full.peak == full.phases["forward_backward"]  # the shared sampler's cache is freed by then
    assert learner_peak(two) == pytest.approx(two.peak - two.terms["rollout_weights"])


def test_the_fewest_ranks_that_fit_and_a_shared_model_cannot_be_sharded() -> None:
    cfg = LearnerConfig(dtype="bf16", activation_checkpointing=True, micro_batch=4)
    plan = ranks_needed(shape_of("Qwen2.5-7B"), cfg, gpu_gib=80.0, rollout=RolloutPlan(backend="vllm", vllm_gpus=1))
    assert plan is not None and plan.nproc == 2 and plan.fits
    assert not plan_memory(shape_of("Qwen2.5-7B"), cfg, nproc=1, rollout=RolloutPlan(backend="vllm", vllm_gpus=1)).fits
    with pytest.raises(ValueError, match="cannot share"):
        plan_memory(shape_of("Qwen2.5-7B"), cfg, nproc=2, rollout=RolloutPlan(backend="shared"))


def test_plan_cli_prints_a_plan_and_refuses_bad_flags() -> None:
    run = [sys.executable, "-m", "ftis_swarm.cli", "plan"]
    ok = subprocess.run(run + ["--model", "Qwen2.5-14B", "--lora-rank", "64", "--nproc", "2"],
                        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert "Qwen2.5-14B: 14.77B parameters" in ok.stdout and "2 learner ranks" in ok.stdout
    bad = subprocess.run(run + ["--model", "Qwen2.5-9B"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.startswith("error: no shape known for 'Qwen2.5-9B'")
    assert len(bad.stderr.strip().splitlines()) == 1


def _saved_bytes_per_token(layers: int, seq: int) -> float:
    """What autograd saves in a forward of a Qwen2 decoder (math SDPA, no mask), per token; no parameters."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(hidden_size=64, intermediate_size=96, num_hidden_layers=layers, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=128, attn_implementation="sdpa")
    model = Qwen2ForCausalLM(cfg).eval()
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t):
        if t.untyped_storage().data_ptr() not in params:
            seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    ids = torch.randint(0, 128, (2, seq))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), sdpa_kernel([SDPBackend.MATH]):
        model.model(input_ids=ids, use_cache=False)
    return sum(seen.values()) / ids.numel()


def test_the_fp32_layer_count_is_what_autograd_saves() -> None:
    seq = 48
    per_layer = _saved_bytes_per_token(2, seq) - _saved_bytes_per_token(1, seq)
    shape = ModelShape("probe", hidden=64, layers=1, heads=4, kv_heads=2, intermediate=96,
                                               vocab=128, tied=True)
    rsqrt = 2 * 4  # the two norms' per-token rsqrt, left out of the plan
    assert per_layer == layer_activation_bytes(shape, "fp32", seq, masked=False) + rsqrt


def test_the_docs_table_is_the_one_the_code_prints() -> None:
    from pathlib import Path

    from ftis_swarm.cli.plan_cmd import format_table

    doc = (Path(__file__).resolve().parents[2] / "docs" / "gpu.md").read_text()
    rows = format_table(micro_batch=4, seq_len=1024).splitlines()
    assert len(rows) == 12 and all(row in doc for row in rows), "regenerate with `ftis-node plan --table`"
