"""`ftis-node bench learner`: what the F-TIS correction costs, against baselines in the same run.

- **F-TIS vs NoIS**, one full update (logp_old, loss, backward, AdamW) on the same model and
  the same batch of own on-policy groups, so both modes push exactly the same rows through
  the gradient pass and the difference is the weight/filter machinery. Interleaved
  repeats (ABBA); the overhead is the median of the back-to-back pairs' ratios, in wall
  time and in process CPU time, both read on the same calls (CPU time is not inflated by
  time stolen by other tenants).
- **The loss alone**: `ftis_loss` against the `nois` mode on the same `[N, T]` tensors.
- **A peer batch**: the same groups marked off-policy and slightly shifted; F-TIS filters the
  samples with A <= 0 and skips them in the gradient pass, NoIS does not.
- **Chunked log-probs vs the naive full-vocabulary forward** at a 151,936 vocabulary (time and
  peak memory, each in a fresh process; `lab/bench/logprob_memory.py`).
- **TRL's GRPO loss** (`GRPOTrainer._compute_loss`, loss_type grpo) on the same batch and model,
  forward + backward against ours, where `trl` is installed.
"""

from __future__ import annotations

import importlib.util
import logging
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np
import torch

from ftis_swarm.config import FTISConfig, LearnerConfig
from ftis_swarm.core.ftis import ftis_loss
from ftis_swarm.core.logprobs import token_logprobs
from ftis_swarm.lab.bench.logprob_memory import measure_logprobs
from ftis_swarm.learner.batch import ScoredGroup, build_batch
from ftis_swarm.learner.learner import Learner
from ftis_swarm.models import load_model
from ftis_swarm.wire import Group

log = logging.getLogger(__name__)


@dataclass
class LearnerFigures:
    model: str
    sequences: int
    prompt_tokens: int
    completion_tokens: int
    threads: int
    step_nois_s: float = 0.0
    step_ftis_s: float = 0.0
    ftis_overhead: float = 0.0
    step_nois_cpu_s: float = 0.0
    step_ftis_cpu_s: float = 0.0
    ftis_overhead_cpu: float = 0.0
    loss_nois_ms: float = 0.0
    loss_ftis_ms: float = 0.0
    peer_step_nois_s: float = 0.0
    peer_step_ftis_s: float = 0.0
    peer_rows_with_gradient_ftis: int = 0
    tokens_per_s: float = 0.0
    trl_fwd_bwd_s: Optional[float] = None
    ours_fwd_bwd_s: Optional[float] = None
    memory: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def _groups(model: Any, *, n_groups: int, G: int, prompt_len: int, comp_len: int, seed: int) -> list[Group]:
    """Random prompts and completions, with the model's own tempered log-probs as logp_gen (on-policy)."""
    gen = torch.Generator().manual_seed(seed)
    vocab = model.get_input_embeddings().num_embeddings
    out = []
    for k in range(n_groups):
        prompt = torch.randint(0, vocab, (prompt_len,), generator=gen)  # (P,)
        comps = torch.randint(0, vocab, (G, comp_len), generator=gen)  # (G, T)
        ids = torch.cat([prompt.expand(G, -1), comps], dim=1)  # (G, P + T)
        with torch.no_grad():
            lp = token_logprobs(model, ids)[:, prompt_len - 1:]  # (G, T)
        out.append(Group.build(run_id="bench", sender="self", model_id="bench", policy_version=0, created_at=0.0,
                               tokenizer_fp="0" * 32, task_id="arith", item_id=f"arith/v1/s0/{k}",
                               prompt_ids=prompt.numpy(), temperature=1.0, completion_ids=list(comps.numpy()),
                               logp_gen=list(lp.numpy())))
    return out


def _rewards(G: int, k: int) -> list[float]:
    return [float((i + k) % 2) for i in range(G)]  # every group has both outcomes: A != 0


def _shifted(g: Group, rng: np.random.Generator) -> Group:
    """The same completions as if sampled by a slightly different policy (a peer)."""
    fields = {f: getattr(g, f) for f in ("run_id", "sender", "model_id", "policy_version", "created_at",
                                         "tokenizer_fp", "task_id", "item_id", "prompt_ids", "temperature",
                                         "completion_ids")}
    lp = [np.minimum(x + rng.normal(0, 0.3, x.shape), 0.0).astype(np.float32) for x in g.logp_gen]
    return Group.build(**{**fields, "sender": "peer"}, logp_gen=lp)


def _interleaved_runs(fns: dict[str, Callable[[], Any]],
                      repeats: int) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Each function once per repeat, the order reversed every other repeat (ABBA), so drift and
    whatever one call leaves behind for the next weigh on every function alike. Returns each
    call's wall time and its process CPU time (which time stolen by neighbours does not inflate)."""
    wall: dict[str, list[float]] = {k: [] for k in fns}
    cpu: dict[str, list[float]] = {k: [] for k in fns}
    names = list(fns)
    for r in range(repeats):
        for name in (names if r % 2 == 0 else names[::-1]):
            w0, c0 = time.perf_counter(), time.process_time()
            fns[name]()
            wall[name].append(time.perf_counter() - w0)
            cpu[name].append(time.process_time() - c0)
    return wall, cpu


def _interleaved(fns: dict[str, Callable[[], Any]], repeats: int) -> dict[str, float]:
    return {k: statistics.median(v) for k, v in _interleaved_runs(fns, repeats)[0].items()}


def _paired_ratio(a: list[float], b: list[float]) -> float:
    """Median over repeats of a_i / b_i: each pair ran back to back, on the same machine state."""
    return statistics.median(x / y for x, y in zip(a, b))


def run_learner_bench(*, model_name: str = "smollm2-135m", n_groups: int = 2, G: int = 8, prompt_len: int = 48,
                      comp_len: int = 32, repeats: int = 5, threads: int = 2, memory: bool = True,
                      trl: bool = True, progress: Callable[[str], None] = lambda s: None) -> LearnerFigures:
    torch.set_num_threads(threads)
    model, tokenizer = load_model(model_name)
    model.eval()
    groups = _groups(model, n_groups=n_groups, G=G, prompt_len=prompt_len, comp_len=comp_len, seed=0)
    own = [ScoredGroup.vertical(g, _rewards(G, k), offpolicy=False, source=0) for k, g in enumerate(groups)]
    rng = np.random.default_rng(0)
    peer = [ScoredGroup.vertical(_shifted(g, rng), _rewards(G, k), offpolicy=True, source=1)
            for k, g in enumerate(groups)]
    fig = LearnerFigures(model=model_name, sequences=n_groups * G, prompt_tokens=prompt_len, completion_tokens=comp_len,
                         threads=threads)
    learners = {m: Learner(model, cfg=LearnerConfig(lr=1e-7, micro_batch=n_groups * G, ftis=FTISConfig(mode=m)),
                           pad_id=0) for m in ("nois", "ftis")}

    progress("update steps: F-TIS vs NoIS on own groups")
    for m in learners:  # warm-up: allocator, threads, each optimizer's state
        learners[m].update(own)
    steps = {m: (lambda m=m: learners[m].update(own)) for m in learners}
    runs, cpu = _interleaved_runs(steps, repeats)
    fig.step_nois_s, fig.step_ftis_s = statistics.median(runs["nois"]), statistics.median(runs["ftis"])
    fig.ftis_overhead = _paired_ratio(runs["ftis"], runs["nois"]) - 1.0
    fig.step_nois_cpu_s, fig.step_ftis_cpu_s = statistics.median(cpu["nois"]), statistics.median(cpu["ftis"])
    fig.ftis_overhead_cpu = _paired_ratio(cpu["ftis"], cpu["nois"]) - 1.0
    fig.tokens_per_s = fig.sequences * (prompt_len + comp_len) / fig.step_ftis_s

    progress("the loss alone")
    batch = build_batch(own, pad_id=0, micro_batch=n_groups * G)
    lp_old = learners["ftis"].old_logprobs(batch)

    def loss_only(mode: str) -> None:
        x = lp_old.clone().requires_grad_(True)
        loss, _ = ftis_loss(x, lp_old, batch.logp_gen, batch.advantages, batch.mask, batch.offpolicy,
                            FTISConfig(mode=mode), source=batch.source)
        loss.backward()

    t = _interleaved({m: (lambda m=m: loss_only(m)) for m in ("nois", "ftis")}, repeats * 20)
    fig.loss_nois_ms, fig.loss_ftis_ms = t["nois"] * 1e3, t["ftis"] * 1e3

    progress("update steps on a peer batch (F-TIS filters A <= 0)")
    t = _interleaved({m: (lambda m=m: learners[m].update(peer)) for m in learners}, repeats)
    fig.peer_step_nois_s, fig.peer_step_ftis_s = t["nois"], t["ftis"]
    fig.peer_rows_with_gradient_ftis = int(learners["ftis"].update(peer)["sequences_with_gradient"])

    if trl and importlib.util.find_spec("trl") is not None:
        progress("TRL's GRPO loss on the same batch")
        fig.trl_fwd_bwd_s, fig.ours_fwd_bwd_s = _trl_vs_ours(model, tokenizer, batch, repeats, prompt_len)
    if memory:
        progress("chunked vs naive log-probs at a 151,936 vocabulary (fresh processes)")
        for grad in (False, True):
            naive = measure_logprobs(naive=True, grad=grad, threads=threads)
            chunked = measure_logprobs(naive=False, grad=grad, threads=threads)
            key = "fwd_bwd" if grad else "fwd"
            fig.memory[key] = {"naive_peak_gb": naive.peak_bytes / 1e9, "chunked_peak_gb": chunked.peak_bytes / 1e9,
                               "peak_ratio": chunked.peak_bytes / naive.peak_bytes, "naive_s": naive.seconds,
                               "chunked_s": chunked.seconds, "time_ratio": chunked.seconds / naive.seconds}
    return fig


def _trl_vs_ours(model: Any, tokenizer: Any, batch: Any, repeats: int, prompt_len: int) -> tuple[float, float]:
    """Forward + backward of TRL's GRPO loss and of ours (nois: the same objective) on one batch."""
    import tempfile

    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    (mb,) = batch.micro
    G = batch.num_sequences
    args = GRPOConfig(output_dir=tempfile.mkdtemp(), per_device_train_batch_size=G, num_generations=G,
                      max_completion_length=batch.mask.shape[1], use_cpu=True, report_to=[], bf16=False,
                      beta=0.0, loss_type="grpo")
    trainer = GRPOTrainer(model=model, reward_funcs=[lambda completions, **kw: [0.0] * len(completions)], args=args,
                          train_dataset=Dataset.from_dict({"prompt": ["x"] * G}), processing_class=tokenizer)
    trainer.current_gradient_accumulation_steps = 1
    ids = mb.input_ids[torch.argsort(mb.idx)]  # rows back in batch order
    inputs = dict(prompt_ids=ids[:, :prompt_len], prompt_mask=torch.ones_like(ids[:, :prompt_len]),
                  completion_ids=ids[:, prompt_len:], completion_mask=batch.mask.long(),
                  advantages=batch.advantages, num_items_in_batch=batch.mask.sum())

    def trl_step() -> None:
        model.zero_grad(set_to_none=True)
        trainer._compute_loss(model, inputs).backward()

    def ours_step() -> None:
        model.zero_grad(set_to_none=True)
        logp = torch.gather(token_logprobs(model, mb.input_ids, mb.attention_mask, target_mask=mb.target_mask),
                            1, mb.comp_pos)
        i = mb.idx
        loss, _ = ftis_loss(logp, logp.detach(), batch.logp_gen[i], batch.advantages[i], batch.mask[i],
                            batch.offpolicy[i], FTISConfig(mode="nois"))
        loss.backward()

    trl_step(), ours_step()  # warm-up
    t = _interleaved({"trl": trl_step, "ours": ours_step}, repeats)
    model.zero_grad(set_to_none=True)
    model.eval()
    return t["trl"], t["ours"]


def format_learner(f: LearnerFigures) -> str:
    lines = [
        f"model {f.model}; batch {f.sequences} sequences x ({f.prompt_tokens} prompt + {f.completion_tokens} "
        f"completion) tokens; {f.threads} threads",
        f"update step, own groups   NoIS {f.step_nois_s:.3f} s   F-TIS {f.step_ftis_s:.3f} s   "
        f"overhead {100 * f.ftis_overhead:+.2f}%",
        f"  same, process CPU time  NoIS {f.step_nois_cpu_s:.3f} s   F-TIS {f.step_ftis_cpu_s:.3f} s   "
        f"overhead {100 * f.ftis_overhead_cpu:+.2f}%",
        f"loss + backward alone     NoIS {f.loss_nois_ms:.3f} ms  F-TIS {f.loss_ftis_ms:.3f} ms   "
        f"(the difference is {100 * (f.loss_ftis_ms - f.loss_nois_ms) / 1e3 / f.step_nois_s:+.4f}% of a step)",
        f"update step, peer groups  NoIS {f.peer_step_nois_s:.3f} s   F-TIS {f.peer_step_ftis_s:.3f} s   "
        f"({f.peer_rows_with_gradient_ftis} of {f.sequences} rows need a gradient under F-TIS)",
        f"learner throughput        {f.tokens_per_s:.0f} tokens/s (F-TIS step, prompt + completion tokens)",
    ]
    if f.trl_fwd_bwd_s is not None:
        lines.append(f"TRL GRPO loss fwd+bwd     TRL {f.trl_fwd_bwd_s:.3f} s   ours {f.ours_fwd_bwd_s:.3f} s   "
                     f"ratio ours/TRL {f.ours_fwd_bwd_s / f.trl_fwd_bwd_s:.2f}")
    else:
        lines.append("TRL GRPO loss             (trl not installed: pip install trl)")
    for key, m in f.memory.items():
        lines.append(f"log-probs 8x512 @151,936 vocab, {key:<7} naive {m['naive_peak_gb']:.2f} GB {m['naive_s']:.1f} s  "
                     f"chunked {m['chunked_peak_gb']:.2f} GB {m['chunked_s']:.1f} s  "
                     f"peak ratio {m['peak_ratio']:.3f}, time ratio {m['time_ratio']:.2f}")
    return "\n".join(lines)
