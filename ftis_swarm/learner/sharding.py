"""How a model is cut for FSDP2, and activation checkpointing of its decoder layers.

FSDP2 (`torch.distributed.fsdp.fully_shard`) shards each parameter over a `DeviceMesh`'s ranks
and gathers a unit's parameters just before the unit runs. The units here: one per decoder
layer, and a root, `LogprobRoot`, that holds the rest (embedding, final norm, the tied output
head). The root's forward is `token_logprobs` itself: `token_logprobs` calls the decoder and
the head directly rather than the model's forward, so with the model as the root FSDP's root
hooks would never run around the chunked head and its weight would still be a shard.

Mixed precision (`dtype = "bf16"`): parameters are gathered in bf16 for compute and gradients
reduced in fp32, while the sharded parameters (the master weights) and so AdamW's state stay
fp32. LoRA with bf16 keeps the frozen base weights themselves in bf16 (`base_dtype`): half the
memory for weights that never take a step; the adapter stays fp32.

Gradients are summed over ranks (FSDP averages by default): each rank backpropagates its
rows' share of the batch's mean loss, so the sum is the batch's gradient, as in one process.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch.utils.checkpoint import checkpoint

from ftis_swarm.config import LearnerConfig
from ftis_swarm.core.logprobs import token_logprobs

log = logging.getLogger(__name__)


def base_dtype(cfg: LearnerConfig) -> str:
    """The dtype a model is loaded in for this learner: bf16 base weights for a bf16 LoRA, else fp32."""
    return "bf16" if cfg.lora is not None and cfg.dtype == "bf16" else "fp32"


def decoder_layers(model: Any) -> list[torch.nn.Module]:
    """The decoder's layers (Llama, Qwen2, Mistral, SmolLM...), under a peft wrapper too."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    layers = getattr(base.get_decoder(), "layers", None)
    if layers is None:
        raise ValueError(f"{type(base).__name__} has no decoder layers where Llama-like models keep them")
    return list(layers)


def checkpoint_layers(model: Any) -> int:
    """Wraps each decoder layer's forward in non-reentrant activation checkpointing; returns the count.

    The wrapper replaces the instance's `forward`, so parameter names (and checkpoints) do not
    change, and FSDP's hooks, which sit on the module's call, still surround it. Idempotent.
    """
    layers = decoder_layers(model)
    for layer in layers:
        if getattr(layer, "_ftis_checkpointed", False):
            continue
        plain = layer.forward

        def forward(*args: Any, _plain=plain, **kwargs: Any) -> Any:
            if not torch.is_grad_enabled():
                return _plain(*args, **kwargs)
            return checkpoint(_plain, *args, use_reentrant=False, **kwargs)

        layer.forward = forward
        layer._ftis_checkpointed = True
    return len(layers)


class LogprobRoot(torch.nn.Module):
    """The FSDP root unit: wraps the model so that its forward is `token_logprobs` on it."""

    def __init__(self, model: Any, *, chunk_size: int) -> None:
        super().__init__()
        self.model = model
        self.chunk_size = chunk_size

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, target_mask: torch.Tensor,
                temperature: float) -> torch.Tensor:
        return token_logprobs(self.model, input_ids, attention_mask, target_mask=target_mask,
                              temperature=temperature, chunk_size=self.chunk_size)  # (n, L-1)


def shard_model(model: Any, cfg: LearnerConfig, mesh: Any) -> LogprobRoot:
    """Shards `model` in place over `mesh` (one FSDP unit per decoder layer, the rest in the root)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    if cfg.dtype == "bf16":
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    else:
        policy = MixedPrecisionPolicy()
    if cfg.activation_checkpointing:
        checkpoint_layers(model)
    for layer in decoder_layers(model):
        fully_shard(layer, mesh=mesh, mp_policy=policy)
    root = LogprobRoot(model, chunk_size=cfg.logprob_chunk)
    fully_shard(root, mesh=mesh, mp_policy=policy)
    units = [root] + [m for m in root.modules() if m is not root and hasattr(m, "set_gradient_divide_factor")]
    for unit in units:  # a plain sum over ranks; every backend has SUM (gloo has no PREMUL_SUM)
        unit.set_gradient_divide_factor(1.0)
        if hasattr(unit, "set_force_sum_reduction_for_comms"):  # older torch: NCCL's PREMUL_SUM(1.0) instead
            unit.set_force_sum_reduction_for_comms(True)
    log.info("sharded %d decoder layers over %d ranks (%s)", len(units) - 1, mesh.size(), cfg.dtype)
    return root
