"""In-memory weight sync: a generator's own copy of the model follows the learner's, no file between.

When generation runs ahead of learning (node/pipeline.py), the generator cannot sample
from the learner's model object while an update changes it, so on CPU it samples from a
second copy. After each update `InMemorySync.sync()` copies the learner's trainable
tensors into that copy (`Tensor.copy_`, in place: the copy's storage, and any cache built
on it, stays): every tensor for a full fine-tune, the adapter's alone for LoRA (the frozen
base never changes). No safetensors file is written or read, unlike `load_weights`.

The contract: the two models have the same parameter names and shapes (the copy is a
`copy.deepcopy` of the learner's model, `model_copy`); `sync` must not run while the
copy generates (the pipeline calls it between generations).
"""

from __future__ import annotations

import copy
import logging

import torch

log = logging.getLogger(__name__)


def model_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A frozen deep copy of `model` (LoRA wrapper included) in eval mode, for sampling only."""
    twin = copy.deepcopy(model)
    for param in twin.parameters():
        param.requires_grad_(False)
    return twin.eval()


class InMemorySync:
    """Copies `source`'s trainable parameters into `target`'s of the same name, in place."""

    def __init__(self, source: torch.nn.Module, target: torch.nn.Module) -> None:
        theirs = dict(target.named_parameters(remove_duplicate=False))
        pairs: list[tuple[torch.Tensor, torch.Tensor]] = []
        for name, param in source.named_parameters():  # a tied weight once: the copy keeps the tie
            if not param.requires_grad:
                continue  # frozen (a LoRA base): the copy already holds it
            twin = theirs.get(name)
            if twin is None or twin.shape != param.shape:
                raise ValueError(f"the generator's model does not mirror the learner's: parameter {name}")
            pairs.append((param, twin))
        if not pairs:
            raise ValueError("the learner's model has no trainable parameter to sync")
        self._pairs = pairs
        self.tensors = len(pairs)
        """Tensors one sync copies."""
        self.bytes = sum(p.numel() * p.element_size() for p, _ in pairs)
        """Bytes one sync copies."""

    @torch.no_grad()
    def sync(self) -> None:
        """The copy now holds the source's current trainable weights, bit for bit."""
        for src, dst in self._pairs:
            dst.copy_(src)

