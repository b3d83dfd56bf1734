"""The learner: one F-TIS update of this node's model (full or LoRA) on a batch of groups.

An update: advantages per group; `logp_old` from the model at the start of the update
(no grad, detached); the batch's metrics from METHOD.md; then `epochs` optimiser steps,
each accumulating the gradient over micro-batches so the loss is the batch's mean over
sequences. The model stays in eval mode throughout: no dropout, so with one step
`logp` equals `logp_old` in value, as METHOD.md requires.

Only rows whose effective advantage is non-zero go through the gradient pass: a row with
`A~ = 0` (a group whose rewards are all equal, or a filtered sample) has `pg = 0` at every
token, so it adds exactly nothing to the loss or the gradient, while the batch size N in the
mean still counts it. When no row is left, no optimiser step is taken (Adam's momentum would
otherwise move the weights on a batch that asks for no change) and the policy version stays.
"""

from __future__ import annotations

import logging
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Sequence

import torch

from ftis_swarm.config import LearnerConfig
from ftis_swarm.core.ftis import filtered_samples, ftis_loss, sample_kl
from ftis_swarm.core.logprobs import token_logprobs
from ftis_swarm.learner.batch import Batch, MicroBatch, ScoredGroup, build_batch
from ftis_swarm.learner.sharding import checkpoint_layers
from ftis_swarm.learner.state import checkpoint_tensors, load_optimizer_state, optimizer_state_by_name

log = logging.getLogger(__name__)


def apply_lora(model: Any, cfg: LearnerConfig) -> Any:
    """Wraps `model` in a fresh peft LoRA adapter when `cfg.lora` is set."""
    if cfg.lora is None:
        return model
    from peft import LoraConfig, get_peft_model

    lora = LoraConfig(r=cfg.lora.rank, lora_alpha=cfg.lora.alpha, lora_dropout=cfg.lora.dropout,
                      target_modules=list(cfg.lora.target_modules), task_type="CAUSAL_LM")
    return get_peft_model(model, lora)


class Learner:
    """Owns the trainable model and its optimiser; `update` is one F-TIS step (or `epochs`)."""

    def __init__(self, model: Any, *, cfg: LearnerConfig, pad_id: int) -> None:
        self.cfg = cfg
        self.model = model.eval()
        self.pad_id = pad_id
        self.is_lora = cfg.lora is not None
        if cfg.activation_checkpointing:
            checkpoint_layers(model)
        self.params = [p for p in model.parameters() if p.requires_grad]
        if not self.params:
            raise ValueError("the model has no trainable parameters")
        self.optimizer = torch.optim.AdamW(self.params, lr=cfg.lr, betas=tuple(cfg.betas),
                                           weight_decay=cfg.weight_decay)
        self.device = next(model.parameters()).device
        self.policy_version = 0

    def _autocast(self):
        if self.cfg.dtype == "bf16":
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return nullcontext()

    def _logprobs(self, mb: MicroBatch) -> torch.Tensor:
        """Completion-aligned log-probs of one micro-batch: `[n, T]`."""
        with self._autocast():
            full = token_logprobs(self.model, mb.input_ids.to(self.device), mb.attention_mask.to(self.device),
                                  target_mask=mb.target_mask.to(self.device), temperature=mb.temperature,
                                  chunk_size=self.cfg.logprob_chunk)  # (n, L-1)
        return torch.gather(full, 1, mb.comp_pos.to(self.device)).cpu()  # (n, T)

    def old_logprobs(self, batch: Batch) -> torch.Tensor:
        """`logp_old`: the model's log-probs at the start of the update, `[N, T]`, no grad."""
        out = torch.zeros_like(batch.logp_gen)  # (N, T)
        with torch.no_grad():
            for mb in batch.micro:
                out[mb.idx] = self._logprobs(mb)
        return out * batch.mask  # (N, T)

    def update(self, items: Sequence[ScoredGroup], *, allow_mixed: bool = False) -> dict[str, float]:
        """One update on `items`; returns the loss, METHOD.md's metrics and timings."""
        t0 = time.perf_counter()
        batch = build_batch(items, pad_id=self.pad_id, micro_batch=self.cfg.micro_batch, allow_mixed=allow_mixed)
        N, fcfg = batch.num_sequences, self.cfg.ftis
        logp_old = self.old_logprobs(batch)  # (N, T)
        with torch.no_grad():
            _, metrics = ftis_loss(logp_old, logp_old, batch.logp_gen, batch.advantages, batch.mask,
                                   batch.offpolicy, fcfg, source=batch.source)
            kl = sample_kl(logp_old, batch.logp_gen, batch.mask, fcfg.kl_estimator)  # (N,)
            dropped = filtered_samples(batch.advantages, kl, batch.offpolicy, fcfg)  # (N,)
            used = batch.offpolicy & ~dropped & (batch.advantages != 0)  # (N,)
            off_tokens = batch.mask * batch.offpolicy[:, None]  # (N, T)
            over_c = (logp_old - batch.logp_gen).clamp(-20, 20).exp() > fcfg.C  # (N, T)
            n_off = float(batch.offpolicy.sum())
        t_old = time.perf_counter()

        active = torch.nonzero(torch.where(dropped, 0.0, batch.advantages) != 0).flatten().tolist()
        micro = self._micro_batches(batch, active)
        losses, grad_norm = [], 0.0
        for _ in range(self.cfg.epochs if active else 0):
            self.optimizer.zero_grad(set_to_none=True)
            total = 0.0
            for mb in micro:
                i = mb.idx
                logp = self._logprobs(mb)  # (n, T)
                loss, _ = ftis_loss(logp, logp_old[i], batch.logp_gen[i], batch.advantages[i], batch.mask[i],
                                    batch.offpolicy[i], fcfg)
                share = self._share(mb, N)
                (loss * share).backward()
                total += loss.item() * share
            grad_norm = self._clip_gradients()
            self.optimizer.step()
            losses.append(self._sum_over_ranks(total))
        if active:
            self.policy_version += 1
        else:
            losses = [0.0]
        metrics.update(
            loss=losses[0],
            loss_last_epoch=losses[-1],
            grad_norm=grad_norm,
            sequences=float(N),
            sequences_with_gradient=float(len(active)),
            tokens=float(batch.mask.sum()),
            offpolicy_sequences=float(batch.offpolicy.sum()),
            offpolicy_used=float(used.sum()),
            frac_offpolicy_filtered=float((dropped & batch.offpolicy).sum()) / n_off if n_off else 0.0,
            frac_offpolicy_over_C=float((off_tokens * over_c).sum() / off_tokens.sum()) if n_off else 0.0,
            reward_mean=float(batch.rewards.mean()),
            time_logp_old=t_old - t0,
            time_update=time.perf_counter() - t_old,
        )
        log.debug("update %d: loss %.4f over %d sequences", self.policy_version, losses[0], N)
        return metrics

    # -- hooks the sharded learner (learner/distributed.py) overrides; identities in one process --
    def _micro_batches(self, batch: Batch, rows: list[int]) -> list[MicroBatch]:
        """The micro-batches this process runs for `rows` of the batch (here: all of them)."""
        return batch.micro_for(rows)

    def _share(self, mb: MicroBatch, N: int) -> float:
        """The weight of a micro-batch's mean loss in the batch's mean over N sequences."""
        return len(mb.idx) / N

    def _clip_gradients(self) -> float:
        """Clips the gradient to `grad_clip` by its global norm; returns the norm before clipping."""
        return float(torch.nn.utils.clip_grad_norm_(self.params, self.cfg.grad_clip))

    def _sum_over_ranks(self, value: float) -> float:
        """A per-process partial sum, summed over every process of the learner (here: one)."""
        return value

    def save_weights(self, path: Path) -> Path:
        """Writes the full model or the adapter as safetensors (what a rollout backend reloads)."""
        path.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(path, safe_serialization=True)
        return path

    def optimizer_state(self) -> dict:
        """The optimiser's state keyed by parameter name: a checkpoint any process count loads."""
        return optimizer_state_by_name(self.model, self.optimizer)

    def load_checkpoint(self, weights: Path, optimizer_file: Path) -> None:
        """Restores what `save_weights` and `optimizer_state` wrote; raises CheckpointError on a misfit."""
        self.model.load_state_dict(checkpoint_tensors(self.model, weights, is_lora=self.is_lora), strict=False)
        load_optimizer_state(self.model, self.optimizer, torch.load(optimizer_file, weights_only=True))
