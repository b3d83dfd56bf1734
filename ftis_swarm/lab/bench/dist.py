"""`ftis-node bench learner --nproc N`: the sharded learner's memory per rank and step time against one process.

Both sides run the product: `Learner` in one plain process, `ShardedLearner` in N processes
under torchrun, on the same model, the same batch and the same full fine-tune. Each process
measures itself after a warm-up update (AdamW's state exists by then), over `repeats` timed
updates:

- on CUDA, `torch.cuda.max_memory_allocated` (the peak of this rank's tensors);
- on CPU, the peak of live tensor bytes over one more update, counted by a dispatch mode (the
  CPU's `max_memory_allocated`; torch's memory profiler trips over FSDP's backward hooks); and, for reference, the peak resident set (VmHWM after
  resetting it through /proc/self/clear_refs), which also holds the interpreter, torch's
  libraries and what the allocator keeps after freeing (each rank loaded the whole model
  before sharding it), so it says little about sharding;
- the tensors a step keeps (weights, gradients, AdamW's state: this rank's shards), which is
  what sharding divides.

The parent starts the processes one after the other (never at once, so they do not share the
cores they are timed on) and prints the ratios: the goal is a peak per rank of at most 0.6 x
the one process's.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

log = logging.getLogger(__name__)


RATIOS = ("peak_bytes", "peak_rss_bytes", "state_bytes", "step_s")
"""The figures compared rank by rank with the one process's."""


@dataclass
class DistFigures:
    model: str
    nproc: int
    sequences: int
    tokens: int
    device: str = "cpu"
    one: dict[str, Any] = field(default_factory=dict)
    ranks: list[dict[str, Any]] = field(default_factory=list)

    def ratio(self, key: str) -> float:
        """The worst rank's figure over the one process's (peak_bytes, peak_rss_bytes, state_bytes, step_s)."""
        return max(r[key] for r in self.ranks) / self.one[key]

    def as_dict(self) -> dict:
        return {**self.__dict__, **{f"{k}_ratio": self.ratio(k) for k in RATIOS}}


def _vm_kib(field_name: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field_name + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field_name}")


def _state_bytes(learner: Any) -> int:
    """Bytes of this process's weights, gradients and optimiser state (local shards of DTensors)."""
    from torch.distributed.tensor import DTensor

    def local(t):
        return t.to_local() if isinstance(t, DTensor) else t

    total = sum(local(p).numel() * local(p).element_size() for p in learner.model.parameters())
    total += sum(local(p.grad).numel() * local(p.grad).element_size() for p in learner.params if p.grad is not None)
    for state in learner.optimizer.state.values():
        total += sum(local(v).numel() * local(v).element_size() for v in state.values() if hasattr(v, "numel"))
    return total


class _LiveBytes:
    """Counts the bytes of tensor storages created while active and not yet freed, and their peak.

    A `TorchDispatchMode` sees every op's outputs (a DTensor's local shard in its place); a
    storage is counted once, and a finalizer takes it off when its last tensor dies. Tensors
    that existed before are not counted: the caller adds them (weights, AdamW's state).
    """

    def __init__(self) -> None:
        self.current = 0
        self.peak = 0
        self._seen: set[int] = set()

    def add(self, t: Any) -> None:
        import weakref

        from torch.distributed.tensor import DTensor

        t = t._local_tensor if isinstance(t, DTensor) else t
        if t.device.type == "meta":
            return
        storage = t.untyped_storage()
        key = storage.data_ptr()
        if key == 0 or key in self._seen:
            return
        self._seen.add(key)
        self.current += storage.nbytes()
        self.peak = max(self.peak, self.current)
        weakref.finalize(storage, self._free, key, storage.nbytes())

    def _free(self, key: int, size: int) -> None:
        self._seen.discard(key)
        self.current -= size

    def mode(self) -> Any:
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils._pytree import tree_leaves

        counter = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
                out = func(*args, **(kwargs or {}))
                for leaf in tree_leaves(out):
                    if isinstance(leaf, torch.Tensor):
                        counter.add(leaf)
                return out

        return Mode()


def _tensor_peak(learner: Any, step: Callable[[], Any]) -> int:
    """Peak tensor bytes over `step`: weights and AdamW's state, plus what the step allocates (CPU)."""
    learner.optimizer.zero_grad(set_to_none=True)  # the step makes its gradients anew: count them once
    before = _state_bytes(learner)
    counter = _LiveBytes()
    with counter.mode():
        step()
    return before + counter.peak


def _worker(args: argparse.Namespace) -> dict:
    """One process of one side: build, warm up, time `repeats` updates, measure memory."""
    import torch

    from ftis_swarm.config import LearnerConfig
    from ftis_swarm.lab.bench.learner import _groups, _rewards
    from ftis_swarm.learner.batch import ScoredGroup
    from ftis_swarm.learner.distributed import ShardedLearner, init_ranks
    from ftis_swarm.learner.learner import Learner
    from ftis_swarm.models import load_model

    torch.set_num_threads(args.threads)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    ranks = init_ranks() if world > 1 else None
    device = str(ranks.device) if ranks else ("cuda" if torch.cuda.is_available() else "cpu")
    model, _ = load_model(args.model, device="cpu" if ranks else device)
    groups = _groups(model, n_groups=args.groups, G=args.group_size, prompt_len=args.prompt_tokens,
                     comp_len=args.completion_tokens, seed=0)
    items = [ScoredGroup.vertical(g, _rewards(args.group_size, k), offpolicy=False, source=0)
             for k, g in enumerate(groups)]
    cfg = LearnerConfig(lr=1e-7, micro_batch=args.micro_batch)
    learner = ShardedLearner(model, cfg=cfg, pad_id=0, ranks=ranks) if ranks else Learner(model, cfg=cfg, pad_id=0)
    cuda = device.startswith("cuda")
    learner.update_local(items) if ranks else learner.update(items)  # warm-up, every rank in lock step
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    else:
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
    times = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        learner.update_local(items) if ranks else learner.update(items)
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    rss = _vm_kib("VmHWM") * 1024
    step = (lambda: learner.update_local(items)) if ranks else (lambda: learner.update(items))
    peak = torch.cuda.max_memory_allocated() if cuda else _tensor_peak(learner, step)
    out = {"rank": ranks.rank if ranks else 0, "step_s": statistics.median(times), "peak_bytes": peak,
           "peak_rss_bytes": rss, "state_bytes": _state_bytes(learner), "device": device}
    if ranks:
        torch.distributed.destroy_process_group()
    return out


def run_dist_bench(*, model: str, nproc: int, groups: int = 2, group_size: int = 8, prompt_tokens: int = 48,
                   completion_tokens: int = 32, micro_batch: int = 4, repeats: int = 3, threads: int = 1,
                   progress: Callable[[str], None] = lambda s: None) -> DistFigures:
    """Runs the one-process side, then the N-rank side, each in fresh processes; returns both."""
    work = Path(tempfile.mkdtemp(prefix="ftis-dist-bench-"))
    common = ["--model", model, "--groups", str(groups), "--group-size", str(group_size),
              "--prompt-tokens", str(prompt_tokens), "--completion-tokens", str(completion_tokens),
              "--micro-batch", str(micro_batch), "--repeats", str(repeats), "--threads", str(threads)]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    progress("one process (Learner)")
    _run([sys.executable, "-m", "ftis_swarm.lab.bench.dist", "--out", str(work / "one"), *common], env)
    progress(f"{nproc} ranks under torchrun (ShardedLearner, FSDP2)")
    _run([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
          "-m", "ftis_swarm.lab.bench.dist", "--out", str(work / "ranks"), *common], env)
    one = json.loads((work / "one" / "rank0.json").read_text())
    ranks = [json.loads((work / "ranks" / f"rank{r}.json").read_text()) for r in range(nproc)]
    return DistFigures(model=model, nproc=nproc, sequences=groups * group_size,
                       tokens=groups * group_size * (prompt_tokens + completion_tokens), device=one["device"],
                       one=one, ranks=ranks)


def _run(cmd: list[str], env: dict) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"bench process failed ({proc.returncode}): {proc.stderr.strip().splitlines()[-1:]}")


def format_dist(f: DistFigures) -> str:
    gib = 2**30
    peak_kind = "max_memory_allocated" if f.device.startswith("cuda") else "live tensor bytes"
    lines = [f"model {f.model}, full fine-tune, fp32; batch {f.sequences} sequences, {f.tokens} tokens; {f.device}",
             f"one process            step {f.one['step_s']:.3f} s   peak {f.one['peak_bytes'] / gib:.3f} GiB   "
             f"weights+grads+AdamW {f.one['state_bytes'] / gib:.3f} GiB"]
    for r in f.ranks:
        lines.append(f"rank {r['rank']} of {f.nproc}            step {r['step_s']:.3f} s   peak {r['peak_bytes'] / gib:.3f} GiB   "
                     f"weights+grads+AdamW {r['state_bytes'] / gib:.3f} GiB")
    lines.append(f"per rank / one process  peak {f.ratio('peak_bytes'):.2f} x ({peak_kind}; goal <= 0.6)   "
                 f"state {f.ratio('state_bytes'):.2f} x   step time {f.ratio('step_s'):.2f} x   "
                 f"peak RSS {f.ratio('peak_rss_bytes'):.2f} x")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="one process of `ftis-node bench learner --nproc`")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--model", required=True)
    for name in ("groups", "group-size", "prompt-tokens", "completion-tokens", "micro-batch", "repeats", "threads"):
        parser.add_argument(f"--{name}", type=int, required=True)
    args = parser.parse_args(argv)
    figures = _worker(args)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"rank{figures['rank']}.json").write_text(json.dumps(figures))


if __name__ == "__main__":
    main()
