"""The transformers backend: the default on CPU and the one the local testnet runs.

It can own its model (`from_pretrained`) or serve a model object that a learner trains in
the same process (the node on CPU shares one model, no copy): after each in-place update
the owner calls `bump_policy_version()`. `load_weights` and `set_adapter` are for a backend
that owns its model and follows a learner elsewhere through files.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Sequence

import torch

from ftis_swarm.config import SamplingConfig
from ftis_swarm.models import load_model
from ftis_swarm.rollout.base import (
    Completion,
    GroupHeader,
    PromptRequest,
    RolloutBackend,
    aligner_for,
    check_prompts,
    completion_budget,
    eos_token_ids,
)
from ftis_swarm.rollout.sampler import greedy_rows, sample_rows
from ftis_swarm.wire import Group, tokenizer_fingerprint

log = logging.getLogger(__name__)
ADAPTER_NAME = "rollout"


def read_safetensors_dir(path: str | Path) -> dict[str, torch.Tensor]:
    """Every tensor of the `*.safetensors` files in folder `path` (a sharded checkpoint included)."""
    from safetensors.torch import load_file

    files = sorted(Path(path).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no .safetensors file in {path}")
    state: dict[str, torch.Tensor] = {}
    for f in files:
        state.update(load_file(str(f)))
    return state


def check_fits(model: torch.nn.Module, state: dict[str, torch.Tensor], path: str | Path) -> None:
    """Raises ValueError unless `state` has every tensor of `model` (tied aliases aside) with its shape."""
    own = model.state_dict()
    extra = sorted(set(state) - set(own))
    if extra:
        raise ValueError(f"weights in {path} do not fit the served model: unexpected tensor {extra[0]}")
    wrong = [k for k, v in state.items() if tuple(v.shape) != tuple(own[k].shape)]
    if wrong:
        raise ValueError(f"weights in {path} do not fit the served model: {wrong[0]} has shape {tuple(state[wrong[0]].shape)}")
    params = dict(model.named_parameters(remove_duplicate=False))
    present = {id(params[k]) for k in state if k in params}
    absent = [k for k in own if k not in state and not (k in params and id(params[k]) in present)]
    if absent:
        raise ValueError(f"weights in {path} do not fit the served model: {absent[0]} is missing")


class TransformersBackend(RolloutBackend):
    """Samples groups with a transformers causal LM (see `sampler.sample_rows`)."""

    def __init__(
        self,
        *,
        model: Any,
        tokenizer: Any,
        header: GroupHeader,
        static_cache: bool = True,
        max_batch_rows: int = 64,
    ) -> None:
        super().__init__(header=header, tokenizer_fp=tokenizer_fingerprint(tokenizer))
        if max_batch_rows < 1:
            raise ValueError(f"max_batch_rows must be >= 1, got {max_batch_rows}")
        self.model = model
        self.tokenizer = tokenizer
        self.static_cache = static_cache
        self.max_batch_rows = max_batch_rows
        self.eos_ids = eos_token_ids(tokenizer, model.config, getattr(model, "generation_config", None))
        self.aligner = aligner_for(header, tokenizer, model.config, self.eos_ids)
        pad = tokenizer.pad_token_id
        self.pad_id = int(pad) if pad is not None else self.eos_ids[0]

    @classmethod
    def from_pretrained(
        cls, name_or_path: str, *, header: GroupHeader, dtype: str = "fp32", device: str = "cpu", **options: Any
    ) -> "TransformersBackend":
        """A backend owning the model `name_or_path` (short name, folder or hub id)."""
        model, tokenizer = load_model(name_or_path, dtype=dtype, device=device)
        return cls(model=model, tokenizer=tokenizer, header=header, **options)

    @property
    def context_len(self) -> int:
        return int(self.model.config.max_position_embeddings)

    @property
    def vocab_size(self) -> int:
        return int(self.model.get_input_embeddings().num_embeddings)

    def generate(self, prompts: Sequence[PromptRequest], G: int, sampling: SamplingConfig) -> list[Group]:
        if G < 1:
            raise ValueError(f"G must be >= 1, got {G}")
        check_prompts(prompts, context_len=self.context_len, vocab_size=self.vocab_size)
        version = self.policy_version
        seed = self._next_seed(sampling)
        device = next(self.model.parameters()).device
        generator = torch.Generator(device=device).manual_seed(seed) if seed is not None else None
        per_batch = max(1, self.max_batch_rows // G)
        completions: list[list[Completion]] = []
        for start in range(0, len(prompts), per_batch):
            chunk = prompts[start : start + per_batch]
            rows = [list(p.prompt_ids) for p in chunk for _ in range(G)]
            budgets = [completion_budget(len(r), sampling.max_new_tokens, self.context_len) for r in rows]
            result = sample_rows(
                self.model, rows, budgets=budgets, temperature=sampling.temperature, eos_ids=self.eos_ids,
                pad_id=self.pad_id, generator=generator, static_cache=self.static_cache,
            )
            for i in range(len(chunk)):
                completions.append([
                    Completion(result.token_ids[i * G + j], result.logprobs[i * G + j]) for j in range(G)
                ])
        return self._groups(prompts, completions, sampling, version)

    def greedy(self, prompts: Sequence[Sequence[int]], max_new_tokens: int) -> list[list[int]]:
        """Greedy completions (see `sampler.greedy_rows`), `max_batch_rows` prompts per batch."""
        out: list[list[int]] = []
        for start in range(0, len(prompts), self.max_batch_rows):
            rows = [list(map(int, p)) for p in prompts[start : start + self.max_batch_rows]]
            budgets = [completion_budget(len(r), max_new_tokens, self.context_len) for r in rows]
            out += greedy_rows(self.model, rows, budgets=budgets, eos_ids=self.eos_ids, pad_id=self.pad_id,
                               static_cache=self.static_cache)
        return out

    def load_weights(self, path: str) -> None:
        """Copies the safetensors in folder `path` into the served model, in place.

        The checkpoint is checked whole before anything is copied, so a wrong one leaves
        the served policy untouched. Tied weights may be absent (save_pretrained drops them).
        """
        if hasattr(self.model, "peft_config"):
            raise RuntimeError("this backend serves a LoRA adapter; follow the learner with set_adapter, not load_weights")
        state = read_safetensors_dir(path)
        check_fits(self.model, state, path)
        self.model.load_state_dict(state, strict=False)
        self.bump_policy_version()
        log.info("serving weights from %s as policy version %d", path, self.policy_version)

    def set_adapter(self, path: str) -> None:
        """Serves the base model plus the peft LoRA adapter in folder `path`, replacing any previous one."""
        from peft import PeftModel

        if not (Path(path) / "adapter_config.json").is_file():
            raise FileNotFoundError(f"no LoRA adapter (adapter_config.json) in {path}")
        if isinstance(self.model, PeftModel):
            name = f"{ADAPTER_NAME}-{self.policy_version + 1}"
            old = self.model.active_adapter
            self.model.load_adapter(path, adapter_name=name, is_trainable=False)
            self.model.set_adapter(name)
            self.model.delete_adapter(old)
        else:
            self.model = PeftModel.from_pretrained(self.model, path, adapter_name=ADAPTER_NAME, is_trainable=False)
        self.model.eval()
        self.bump_policy_version()
        log.info("serving adapter %s as policy version %d", path, self.policy_version)
