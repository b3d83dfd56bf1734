"""The learner: one F-TIS update of this node's model (full or LoRA) on a batch of groups.

An update: admission (tokenizer fingerprint, vocabulary, temperature; a refused group is
counted, never raised); advantages per group; `logp_old` from the model at the start of
the update (no grad, detached); the forgery check and standing on each peer's tokens
(`forgery.py`); the weights and the filter decided once (`core.ftis.sample_terms`: weights
of peers without standing capped at 1, and the weight above 1 of peers whose standing is
recent bounded in aggregate, `max_recent_excess_share`); the batch's metrics
from docs/method.md; then `epochs` optimiser steps, each accumulating the gradient over
micro-batches so the loss is the batch's mean over sequences. The model stays in eval mode
throughout: no dropout, so with one step `logp` equals `logp_old` in value.

Only rows whose effective advantage is non-zero go through the gradient pass: a row with
`A~ = 0` (a group whose rewards are all equal, a filtered or non-finite sample) adds
exactly nothing to the loss or the gradient, while the batch size N in the mean still
counts it; a row whose forward pass made NaNs never reaches a backward pass that would
carry them into the weights. When no row is left, no optimiser step is taken and the
policy version stays. A step whose loss or gradient norm is still not finite is skipped
(counted in `updates_skipped_nonfinite`): no peer can put a NaN into the weights.

What one peer's group can make go wrong is kept to that group: a forward pass that raises
is retried row by row and the failing group left out (`withheld_learn_error`); a flagged
peer's groups are left out (`withheld_forgery`). `peer_report` tells the node, per peer,
what each update used and what it charged.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

import torch

from ftis_swarm.config import T_MIN, LearnerConfig
from ftis_swarm.core.ftis import SampleTerms, ftis_metrics, policy_loss, sample_terms
from ftis_swarm.core.logprobs import token_logprobs
from ftis_swarm.learner.batch import Batch, MicroBatch, ScoredGroup, build_batch
from ftis_swarm.learner.forgery import ForgeryDetector, screen_batch
from ftis_swarm.learner.sharding import checkpoint_layers
from ftis_swarm.learner.state import checkpoint_tensors, load_optimizer_state, optimizer_state_by_name
from ftis_swarm.peers import faults

log = logging.getLogger(__name__)

FORWARD_ERRORS = (RuntimeError, IndexError, ValueError)
"""What a forward pass raises on a pathological input (torch errors, out of memory included)."""


def apply_lora(model: Any, cfg: LearnerConfig) -> Any:
    """Wraps `model` in a fresh peft LoRA adapter when `cfg.lora` is set."""
    if cfg.lora is None:
        return model
    from peft import LoraConfig, get_peft_model

    lora = LoraConfig(r=cfg.lora.rank, lora_alpha=cfg.lora.alpha, lora_dropout=cfg.lora.dropout,
                      target_modules=list(cfg.lora.target_modules), task_type="CAUSAL_LM")
    return get_peft_model(model, lora)


class Learner:
    """Owns the trainable model and its optimiser; `update` is one F-TIS step (or `epochs`).

    `tokenizer_fp`: groups with another fingerprint are refused unless aligned onto this learner's tokens
    (`ScoredGroup.aligned`, docs/method.md "Peers with another tokenizer"; None: not checked).
    `vocab_size`: groups with a token id at or above it are refused (default: the embedding count).
    """

    def __init__(self, model: Any, *, cfg: LearnerConfig, pad_id: int, tokenizer_fp: str | None = None,
                 vocab_size: int | None = None) -> None:
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
        self.tokenizer_fp = tokenizer_fp
        self.vocab_size = vocab_size or int(model.get_input_embeddings().num_embeddings)
        self.detector = ForgeryDetector(C=cfg.ftis.C, delta=cfg.forgery_delta, window=cfg.forgery_window,
                                        margin=cfg.standing_margin, overlap=cfg.standing_overlap,
                                        overlap_block=cfg.standing_overlap_block)
        self.peer_report: dict[str, Counter] = {}
        """Per peer, after each update: `groups` it put into the update, and its faults by reason."""
        self.peer_earned: dict[str, float] = {}
        """Per peer, after each update: the credit it earned, in proportion to the weight its samples that
        carried signal (`A~ != 0`: a nonzero advantage, not filtered) and were not withheld carried in the
        gradient: each sample's mean token weight, capped at 1, over its group's size (`_report`)."""

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
        return self._old_logprobs(batch)[0]

    def _old_logprobs(self, batch: Batch) -> tuple[torch.Tensor, set[int]]:
        """`logp_old`, and the rows whose forward pass raised (tried alone after their micro-batch did)."""
        out = torch.zeros_like(batch.logp_gen)  # (N, T)
        failed: set[int] = set()
        with torch.no_grad():
            for mb in batch.micro:
                try:
                    out[mb.idx] = self._logprobs(mb)
                except FORWARD_ERRORS:
                    for row in mb.idx.tolist():
                        try:
                            out[row] = self._logprobs(batch.micro_for([row])[0])[0]
                        except FORWARD_ERRORS as exc:
                            log.warning("the forward pass of a sequence of group %s failed: %s",
                                        batch.groups[int(batch.group_of[row])].group_id, exc)
                            failed.add(row)
        return torch.where(batch.mask.bool(), out, 0.0), failed  # (N, T)

    def admit(self, items: Sequence[ScoredGroup]) -> list[ScoredGroup]:
        """The groups this learner can take; the others are counted in `peer_report` by reason."""
        kept = []
        for it in items:
            reason = self._refusal(it)
            if reason:
                self.peer_report.setdefault(it.group.sender, Counter())[reason] += 1
            else:
                kept.append(it)
        return kept

    def _refusal(self, it: ScoredGroup) -> str:
        g = it.group
        if self.tokenizer_fp is not None and g.tokenizer_fp != self.tokenizer_fp and it.aligned is None:
            return faults.TOKENIZER
        if not (math.isfinite(g.temperature) and g.temperature >= T_MIN):
            return faults.TEMPERATURE
        if g.G < 2 or len(g.logp_gen) != g.G or any(c.shape != lp.shape or c.size < 1
                                                   for c, lp in zip(g.completion_ids, g.logp_gen)):
            return faults.GROUP_MALFORMED
        body = it.aligned or g  # another tokenizer's group: its re-encoding is what this model embeds
        if max(int(body.prompt_ids.max(initial=0)), max(int(c.max()) for c in body.completion_ids)) >= self.vocab_size:
            return faults.OUT_OF_VOCAB
        return ""

    def update(self, items: Sequence[ScoredGroup], *, allow_mixed: bool = False) -> dict[str, float]:
        """One update on the admitted `items`; returns the loss, docs/method.md's metrics and timings."""
        self.peer_report, self.peer_earned = {}, {}
        kept = self.admit(items)
        if not kept:
            return {"sequences": 0.0, "sequences_with_gradient": 0.0}
        batch = build_batch(kept, pad_id=self.pad_id, micro_batch=self.cfg.micro_batch, allow_mixed=allow_mixed,
                            truncated=self.cfg.truncated_completions)
        return self._update(batch)

    def update_batch(self, batch: Batch) -> dict[str, float]:
        """One update on a built batch (no admission): what `update` runs after it."""
        self.peer_report, self.peer_earned = {}, {}
        return self._update(batch)

    def _update(self, batch: Batch) -> dict[str, float]:
        t0 = time.perf_counter()
        fcfg = self.cfg.ftis
        logp_old, failed = self._old_logprobs(batch)  # (N, T)
        before = {p for p in self._peers(batch) if self.detector.has_standing(p)}
        flagged, stats = screen_batch(self.detector, batch, logp_old, C=self.cfg.ftis.C, skip=failed)
        standing = {p for p in before if self.detector.has_standing(p)}  # had it, and this update kept it
        withheld = self._withheld_rows(batch, failed, flagged)
        recent = {p for p in standing if self._recent(p)}
        extra = {"withheld_learn_error": float(len(withheld[faults.LEARN_ERROR])),
                 "withheld_forgery": float(len(withheld[faults.FORGERY])), **stats,
                 "peers_with_standing": float(len(standing)),
                 "peers_with_recent_standing": float(len(recent)),
                 "peers_without_standing": float(len(self._peers(batch) - standing))}
        gone = withheld[faults.LEARN_ERROR] | withheld[faults.FORGERY]
        if gone:
            keep = [r for r in range(batch.num_sequences) if r not in gone]
            if not keep:
                return {"sequences": 0.0, "sequences_with_gradient": 0.0, **extra}
            batch, logp_old = batch.select(keep), logp_old[torch.tensor(keep)]
        peer_rows = [(bool(batch.filterable[r]), self._sender(batch, r)) for r in range(batch.num_sequences)]
        unproven = torch.tensor([peer and s not in standing for peer, s in peer_rows], dtype=torch.bool)  # (N,)
        recent_rows = torch.tensor([peer and s in recent for peer, s in peer_rows], dtype=torch.bool)  # (N,)
        terms = sample_terms(logp_old, batch.logp_gen, batch.advantages, batch.mask, batch.filterable, fcfg,
                             unproven=unproven, recent=recent_rows, recent_share=self.cfg.max_recent_excess_share,
                             chunks=batch.chunks)
        metrics = ftis_metrics(terms, batch.mask, batch.offpolicy, fcfg, source=batch.source)
        self._report(batch, terms)
        t_old = time.perf_counter()
        active = torch.nonzero(terms.adv_kept != 0).flatten().tolist()
        losses, grad_norm, skipped = self._steps(batch, logp_old, terms, active)
        metrics.update(
            loss=losses[0] if losses else 0.0,
            loss_last_epoch=losses[-1] if losses else 0.0,
            grad_norm=grad_norm,
            updates_skipped_nonfinite=float(skipped),
            sequences=float(batch.num_sequences),
            sequences_with_gradient=float(len(active)),
            tokens=float(batch.mask.sum()),
            reward_mean=float(batch.rewards.mean()),
            time_logp_old=t_old - t0,
            time_update=time.perf_counter() - t_old,
            **extra,
            **_peer_metrics(batch, terms, fcfg.C),
        )
        log.debug("update %d: loss %.4f over %d sequences", self.policy_version, metrics["loss"], batch.num_sequences)
        return metrics

    def _steps(self, batch: Batch, logp_old: torch.Tensor, terms: SampleTerms,
               active: list[int]) -> tuple[list[float], float, int]:
        """The optimiser steps on the `active` rows: losses of the steps taken, last grad norm, steps skipped."""
        N, micro = batch.num_sequences, self._micro_batches(batch, active)
        losses: list[float] = []
        grad_norm = 0.0
        for _ in range(self.cfg.epochs if active else 0):
            self.optimizer.zero_grad(set_to_none=True)
            total = 0.0
            for mb in micro:
                i = mb.idx
                loss = policy_loss(self._logprobs(mb), logp_old[i], batch.mask[i], terms.rows(i), self.cfg.ftis)
                share = self._share(mb, N)
                (loss * share).backward()
                total += loss.item() * share
            total = self._sum_over_ranks(total)  # every rank decides on the same loss and global norm
            norm = self._clip_gradients()
            if not (math.isfinite(total) and math.isfinite(norm)):
                self.optimizer.zero_grad(set_to_none=True)
                log.warning("skipped an optimiser step: loss %s, gradient norm %s", total, norm)
                return losses, grad_norm, 1
            self.optimizer.step()
            losses.append(total)
            grad_norm = norm
        if losses:
            self.policy_version += 1
        return losses, grad_norm, 0

    def _withheld_rows(self, batch: Batch, failed: set[int], flagged: set[str]) -> dict[str, set[int]]:
        """Rows left out of the update: whole groups with a failed forward pass, and flagged peers' groups."""
        bad_groups = {int(batch.group_of[r]) for r in failed}
        out: dict[str, set[int]] = {faults.LEARN_ERROR: set(), faults.FORGERY: set()}
        for r in range(batch.num_sequences):
            g, peer = int(batch.group_of[r]), self._sender(batch, r)
            if g in bad_groups:
                out[faults.LEARN_ERROR].add(r)
            elif peer in flagged and bool(batch.filterable[r]):
                out[faults.FORGERY].add(r)
        for g in bad_groups:
            self.peer_report.setdefault(batch.groups[g].sender, Counter())[faults.LEARN_ERROR] += 1
        for g in {int(batch.group_of[r]) for r in out[faults.FORGERY]}:
            self.peer_report.setdefault(batch.groups[g].sender, Counter())[faults.FORGERY] += 1
        return out

    def _report(self, batch: Batch, terms: SampleTerms) -> None:
        """Per peer: the groups that went into the update, those holding a non-finite sample, and the
        credit earned (`peer_earned`: per group, the weight its kept samples carried, each sample's mean
        token weight capped at 1, over the group's size; docs/method.md, "Credit"). A sample at a weight
        near 0 (log-probs that claim certainty: deflation) earns near 0, however many such samples."""
        for g, group in enumerate(batch.groups):
            rows = batch.group_of == g  # (N,)
            if not bool(batch.filterable[rows].any()):
                continue
            report = self.peer_report.setdefault(group.sender, Counter())
            report["groups"] += 1
            if bool(terms.nonfinite[rows].any()):
                report[faults.NONFINITE] += 1
            kept = rows & (terms.adv_kept != 0)  # (N,)
            m = batch.mask[kept].bool()  # (k, T)
            mean_w = (terms.w[kept] * m).sum(dim=-1) / m.sum(dim=-1).clamp(min=1)  # (k,)
            signal = float(mean_w.clamp(max=1.0).sum()) / group.G
            self.peer_earned[group.sender] = self.peer_earned.get(group.sender, 0.0) + signal

    def _recent(self, peer: str) -> bool:
        """Whether the peer's standing began within the last `recent_standing_updates` updates."""
        age = self.detector.standing_age(peer)
        return age is not None and age <= self.cfg.recent_standing_updates

    @staticmethod
    def _peers(batch: Batch) -> set[str]:
        """The senders of the batch's peers' (filterable) samples."""
        return {batch.groups[int(g)].sender for g in batch.group_of[batch.filterable].tolist()}

    @staticmethod
    def _sender(batch: Batch, row: int) -> str:
        return batch.groups[int(batch.group_of[row])].sender

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

    def named_weights(self) -> Optional[Iterable[tuple[str, torch.Tensor]]]:
        """The full model's tensors by name, in memory (a rollout engine loads them with no file); None
        for an adapter, or where no process holds them whole (the sharded learner)."""
        return None if self.is_lora else self.model.state_dict().items()

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


def _peer_metrics(batch: Batch, terms: SampleTerms, C: float) -> dict[str, float]:
    """The peers' share of the update, and per source what reached the gradient pass: samples, their largest
    weight, those with a weight above 1 (`used_over_1`) and those the standing cap lowered (`used_capped`)."""
    with torch.no_grad():
        peer, m = batch.filterable, batch.mask.bool()  # (N,), (N, T)
        n_peer = float(peer.sum())
        used = terms.adv_kept != 0  # (N,)
        peer_tokens = m & (peer & ~terms.nonfinite)[:, None]  # (N, T)
        out = {
            "offpolicy_sequences": n_peer,
            "offpolicy_used": float((peer & used).sum()),
            "frac_offpolicy_filtered": float((peer & terms.filtered & (terms.adv != 0)).sum()) / n_peer if n_peer else 0.0,
            "frac_offpolicy_over_C": (float((peer_tokens & (torch.exp(terms.x) > C)).sum()) / float(peer_tokens.sum())
                                      if bool(peer_tokens.any()) else 0.0),
        }
        for s in torch.unique(batch.source).tolist():
            rows = used & (batch.source == s)  # (N,)
            w = terms.w[rows][m[rows]]  # (k,)
            out[f"used@{s}"] = float(rows.sum())
            out[f"max_weight_used@{s}"] = float(w.max()) if w.numel() else 0.0
            out[f"used_over_1@{s}"] = float((rows & ((terms.w > 1.0) & m).any(dim=-1)).sum())
            out[f"used_capped@{s}"] = float((rows & terms.capped.any(dim=-1)).sum())
    return out
