"""The learner on torch.distributed: one process per device, the model sharded with FSDP2.

Launched by torchrun (`ftis-node join --nproc-per-node N` wraps it). Rank 0 leads: it alone
runs the node's round (swarm, rollouts, scoring) and calls the learner as the single-process
node does; every public method of `ShardedLearner` is collective, so on rank 0 it first
broadcasts the call (the round's batch included) and the ranks > 0, in `follow()`, make the
same call until rank 0 calls `stop()`.

An update is `Learner.update` with four of its hooks replaced:

- micro-batches are dealt round robin; a rank that has fewer runs ghost micro-batches (one
  real row, weight 0) so that every forward and backward meets the same all-gathers and
  reduce-scatters on every rank, a rank with no rows at all included;
- `logp_old`: each rank computes its rows, and an all-reduce of the disjoint rows gives every
  rank the whole `[N, T]`, so every rank takes the same filter decisions and reports the same
  metrics;
- the gradient norm is that of the whole (sharded) gradient: a DTensor reduced over ranks;
- the loss is the sum of the ranks' shares.

Weights and optimiser state leave through full state dicts gathered on rank 0 (to CPU), so a
checkpoint is the same files a single process writes and loads with transformers / peft.
"""

from __future__ import annotations

import datetime
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

import torch
import torch.distributed as dist

from ftis_swarm.config import LearnerConfig
from ftis_swarm.learner.batch import Batch, MicroBatch, ScoredGroup
from ftis_swarm.learner.learner import Learner
from ftis_swarm.learner.sharding import shard_model
from ftis_swarm.learner.state import checkpoint_tensors, load_optimizer_state, optimizer_state_by_name

log = logging.getLogger(__name__)

GROUP_TIMEOUT_S = 7200
"""How long a rank waits in a collective: the followers wait in one while rank 0 generates,
gathers and scores a round (NCCL's default of 10 minutes would abort them on a slow round)."""


@dataclass(frozen=True)
class Ranks:
    """This process's place in the learner's process group."""

    rank: int
    world: int
    device: torch.device
    mesh: Any
    """The 1-D DeviceMesh over every rank that FSDP shards on."""

    @property
    def leader(self) -> bool:
        return self.rank == 0


def init_ranks(backend: Optional[str] = None) -> Ranks:
    """Joins the process group torchrun describes in the environment (a world of one without it).

    NCCL with one CUDA device per rank (`LOCAL_RANK`) where CUDA is present, gloo on CPU.
    """
    from torch.distributed.device_mesh import init_device_mesh

    for key, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "127.0.0.1")):
        os.environ.setdefault(key, value)
    if "MASTER_PORT" not in os.environ:
        os.environ["MASTER_PORT"] = str(_free_port())
    cuda = torch.cuda.is_available() and backend != "gloo"
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if cuda else torch.device("cpu")
    if not dist.is_initialized():
        if cuda:
            torch.cuda.set_device(device)
        dist.init_process_group(backend or ("nccl" if cuda else "gloo"), device_id=device if cuda else None,
                                timeout=datetime.timedelta(seconds=GROUP_TIMEOUT_S))
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    return Ranks(rank=dist.get_rank(), world=dist.get_world_size(), device=device, mesh=mesh)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class GhostMicroBatch(MicroBatch):
    """A one-row stand-in run only to join the collectives; its weight in the loss is 0."""

    @classmethod
    def of(cls, mb: MicroBatch) -> "GhostMicroBatch":
        return cls(mb.idx[:1], mb.input_ids[:1], mb.attention_mask[:1], mb.target_mask[:1], mb.comp_pos[:1],
                   mb.temperature)


class ShardedLearner(Learner):
    """`Learner` over FSDP2-sharded weights; build it on every rank with the same model and config."""

    def __init__(self, model: Any, *, cfg: LearnerConfig, pad_id: int, ranks: Ranks, tokenizer_fp: str | None = None,
                 vocab_size: int | None = None) -> None:
        self.ranks = ranks
        self.root = shard_model(model, cfg, ranks.mesh)
        super().__init__(model, cfg=cfg, pad_id=pad_id, tokenizer_fp=tokenizer_fp, vocab_size=vocab_size)
        self.device = ranks.device

    # -- collective calls: rank 0 announces, the others follow ----------------------------------
    def _announce(self, name: str, *args: Any) -> None:
        if self.ranks.leader:
            dist.broadcast_object_list([(name, args)], src=0)

    def follow(self) -> None:
        """On ranks > 0: make each call rank 0 announces, until it announces `stop`."""
        if self.ranks.leader:
            raise RuntimeError("rank 0 leads; only the other ranks follow")
        while True:
            box: list[Any] = [None]
            dist.broadcast_object_list(box, src=0)
            name, args = box[0]
            if name == "stop":
                return
            getattr(self, name)(*args)

    def stop(self) -> None:
        """On rank 0: releases the followers."""
        self._announce("stop")

    def update(self, items: Sequence[ScoredGroup], *, allow_mixed: bool = False) -> dict[str, float]:
        self._announce("update_local", items, allow_mixed)
        return self.update_local(items, allow_mixed)

    def update_local(self, items: Sequence[ScoredGroup], allow_mixed: bool = False) -> dict[str, float]:
        """The update without announcing it: for callers that run every rank in lock step (benches)."""
        return super().update(items, allow_mixed=allow_mixed)

    def named_weights(self) -> None:
        """None: no process holds the weights whole (`save_weights` gathers them to write a file)."""
        return None

    def save_weights(self, path: Path) -> Path:
        """Gathers the full weights (or adapter) and writes them from rank 0, as one process would."""
        self._announce("save_weights", path)
        state = self.full_state_dict()
        if self.ranks.leader:
            path.mkdir(parents=True, exist_ok=True)
            self.model.save_pretrained(path, state_dict=state, safe_serialization=True)
        dist.barrier()
        return path

    def optimizer_state(self) -> dict:
        """AdamW's state by parameter name, gathered whole (every rank returns it; rank 0 writes it)."""
        self._announce("optimizer_state")
        return optimizer_state_by_name(self.model, self.optimizer)

    def load_checkpoint(self, weights: Path, optimizer_file: Path) -> None:
        """Every rank reads the (one-machine) checkpoint files and keeps its shard of each tensor."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        self._announce("load_checkpoint", weights, optimizer_file)
        tensors = checkpoint_tensors(self.model, weights, is_lora=self.is_lora)
        set_model_state_dict(self.root, {f"model.{k}": v for k, v in tensors.items()},
                             options=StateDictOptions(full_state_dict=True, strict=False))
        load_optimizer_state(self.model, self.optimizer, torch.load(optimizer_file, weights_only=True))

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """The model's full state dict on rank 0's CPU (empty on the others); collective."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        state = get_model_state_dict(self.root, options=options)
        return {k.removeprefix("model."): v for k, v in state.items()}

    # -- Learner hooks ---------------------------------------------------------------------------
    def _logprobs(self, mb: MicroBatch) -> torch.Tensor:
        dev = self.device
        full = self.root(mb.input_ids.to(dev), mb.attention_mask.to(dev), mb.target_mask.to(dev),
                         mb.temperature)  # (n, L-1)
        return torch.gather(full, 1, mb.comp_pos.to(dev)).cpu()  # (n, T)

    def _old_logprobs(self, batch: Batch) -> tuple[torch.Tensor, set[int]]:
        """`logp_old` from disjoint rows per rank, summed; no row-by-row retry (ranks must stay in
        lock step: a failing forward raises on every rank alike, and ends the update)."""
        out = torch.zeros_like(batch.logp_gen)  # (N, T)
        with torch.no_grad():
            for mb in self._micro_batches(batch, list(range(batch.num_sequences))):
                lp = self._logprobs(mb)  # (n, T)
                if not isinstance(mb, GhostMicroBatch):
                    out[mb.idx] = lp
        out = self._all_sum(out)  # (N, T) each row from the one rank that computed it
        return torch.where(batch.mask.bool(), out, 0.0), set()  # (N, T)

    def _micro_batches(self, batch: Batch, rows: list[int]) -> list[MicroBatch]:
        every = batch.micro_for(rows)
        mine = every[self.ranks.rank :: self.ranks.world]
        rounds = -(-len(every) // self.ranks.world)
        return mine + [GhostMicroBatch.of(every[0])] * (rounds - len(mine)) if every else []

    def _share(self, mb: MicroBatch, N: int) -> float:
        return 0.0 if isinstance(mb, GhostMicroBatch) else len(mb.idx) / N

    def _clip_gradients(self) -> float:
        from torch.distributed.tensor import DTensor

        grads = [p.grad for p in self.params if p.grad is not None]
        norm = torch.nn.utils.get_total_norm(grads, 2.0)
        if isinstance(norm, DTensor):
            norm = norm.full_tensor()
        torch.nn.utils.clip_grads_with_norm_(self.params, self.cfg.grad_clip, norm)
        return float(norm)

    def _sum_over_ranks(self, value: float) -> float:
        return float(self._all_sum(torch.tensor([value], dtype=torch.float64)))

    def _all_sum(self, t: torch.Tensor) -> torch.Tensor:
        """Sum over ranks of a CPU tensor (moved to the device for NCCL and back)."""
        on = t.to(self.device)
        dist.all_reduce(on, op=dist.ReduceOp.SUM)
        return on.cpu()
