"""A learner's weights and optimiser state in a form any process count can load.

Weights are what `save_pretrained` writes (transformers / peft load them unchanged).
The optimiser state is keyed by parameter name, with full (unsharded) tensors, rather than
by the position of each parameter in `optimizer.param_groups`: a checkpoint written by one
process then loads into N FSDP ranks and back. On a sharded parameter (a DTensor) each
state tensor is gathered on save (`full_tensor`, collective) and cut back into this rank's
shard on load (`distribute_tensor`, collective), so every rank walks the same names in the
same order. Checkpoints from before this format (keyed by position) still load into one process.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from ftis_swarm.errors import UserError


class CheckpointError(UserError, RuntimeError):
    """A checkpoint that cannot be restored into this learner (one sentence)."""


def read_weights(folder: Path) -> dict[str, torch.Tensor]:
    tensors: dict[str, torch.Tensor] = {}
    for f in sorted(Path(folder).glob("*.safetensors")):
        tensors.update(load_file(f))
    return tensors


def check_full_weights(model: Any, tensors: dict[str, torch.Tensor]) -> None:
    """Raises CheckpointError unless `tensors` are this model's (tied head aside)."""
    own = {n for n, _ in model.named_parameters()} | {n for n, _ in model.named_buffers() if n in tensors}
    tied = {"lm_head.weight"} if getattr(model.config, "tie_word_embeddings", False) else set()
    missing, unexpected = own - set(tensors) - tied, set(tensors) - own - tied
    if missing or unexpected:
        raise CheckpointError(f"checkpoint weights do not fit this model ({len(missing)} missing, "
                              f"{len(unexpected)} unexpected tensors): was --model changed?")


def adapter_keys(model: Any, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """An adapter file's tensors under the model's parameter names (peft drops the adapter's name on save)."""
    adapter = model.active_adapter
    out = {}
    for key, value in tensors.items():
        stem, _, leaf = key.rpartition(".")
        out[f"{stem}.{adapter}.{leaf}"] = value
    names = {n for n, _ in model.named_parameters()}
    unknown = sorted(set(out) - names)
    if unknown or not out:
        raise CheckpointError(f"the adapter does not fit this model ({unknown[0] if unknown else 'no tensors'}): "
                              "was --model or --lora-rank changed?")
    return out


def checkpoint_tensors(model: Any, weights: Path, *, is_lora: bool) -> dict[str, torch.Tensor]:
    """A checkpoint's weights (or adapter) under the model's parameter names, checked to fit it."""
    tensors = read_weights(weights)
    if is_lora:
        return adapter_keys(model, tensors)
    check_full_weights(model, tensors)
    return tensors


def _full(t: torch.Tensor) -> torch.Tensor:
    from torch.distributed.tensor import DTensor

    if isinstance(t, DTensor):
        return t.full_tensor().cpu()
    return t.detach().cpu().clone()


def _like(param: torch.Tensor, full: torch.Tensor) -> torch.Tensor:
    from torch.distributed.tensor import DTensor, distribute_tensor

    if isinstance(param, DTensor) and full.dim() > 0:
        return distribute_tensor(full.to(param.device_mesh.device_type), param.device_mesh, param.placements)
    return full.to(param.device) if full.dim() > 0 else full.clone()


def optimizer_state_by_name(model: Any, optimizer: torch.optim.Optimizer) -> dict:
    """`{"state": {name: {key: full tensor}}, "param_groups": [...]}`; collective on sharded parameters."""
    names = {id(p): n for n, p in model.named_parameters()}
    state = {}
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p in optimizer.state:
                state[names[id(p)]] = {k: _full(v) if torch.is_tensor(v) else v for k, v in optimizer.state[p].items()}
    groups = [{**{k: v for k, v in g.items() if k != "params"}, "params": [names[id(p)] for p in g["params"]]}
              for g in optimizer.param_groups]
    return {"state": state, "param_groups": groups}


def load_optimizer_state(model: Any, optimizer: torch.optim.Optimizer, saved: dict) -> None:
    """Restores what `optimizer_state_by_name` wrote (or a one-process `state_dict()` of old); collective."""
    if saved["state"] and all(isinstance(k, int) for k in saved["state"]):
        optimizer.load_state_dict(saved)
        return
    params = dict(model.named_parameters())
    unknown = sorted(set(saved["state"]) - set(params))
    if unknown:
        raise CheckpointError(f"optimizer state names parameter {unknown[0]}, which this model lacks")
    for name, entry in saved["state"].items():
        p = params[name]
        optimizer.state[p] = {k: _like(p, v) if torch.is_tensor(v) else v for k, v in entry.items()}
    for group, old in zip(optimizer.param_groups, saved["param_groups"]):
        group.update({k: v for k, v in old.items() if k != "params"})
