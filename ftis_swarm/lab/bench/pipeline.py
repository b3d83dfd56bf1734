"""`ftis-node bench pipeline`: the same lone node with `max_staleness` 0 against 1, the same total threads.

Arms, each a real node (its swarm peer alone, so a gather ends at once) running the same
rounds on the same seed, one after the other in this process:

- `sync`: `max_staleness 0`, `threads` torch threads: generate, then learn;
- `pipelined`: `max_staleness 1`, the same `threads`, split into the generator's share
  and the learner's (`generate_threads`; half each by default), the generator in its own
  process (`generate_in`; or a thread of the node's): round r + 1 generates while round r
  learns, then the generator's copy is synced in memory (`time_sync`);
- `alone`: `max_staleness 0` with `threads` = the generator's share, whose
  `time_generate` is generation alone with that share, and with the learner's share,
  whose rest of the round (publish, gather, learn) is learning alone with it (one run
  when the shares are equal).

Figures, over the rounds between the first and the last (the pipelined node generates its
first round before it can overlap anything, and has nothing to generate ahead in its
last): the pipelined round against max(generate alone, learn alone); samples learned per
second, pipelined over sync; sync time over learn time.

The overlap is compared on matched work. The arms sample different completions (their
weights differ), so a round's learning work differs between them: a round with no signal
takes no backward pass, and the update's time grows with the sequences that carry a
gradient (one group with signal or two doubles it). So learning alone is measured as
rates from the `alone` run (log-probs per sequence, update per sequence with a gradient,
and the rest of a round: publish, gather, serve) and applied to each pipelined round's own
work: `overlap_ratio` = the pipelined rounds' summed time / the sum over the same rounds
of max(generate alone, learning alone on that round's work). The plain medians' ratio is
kept beside it (`overlap_ratio_medians`).
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import statistics
from pathlib import Path
from typing import Any, Callable, Optional

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class PipelineBench:
    model: str
    task: str
    generate_in: str
    """Where the pipelined node's generator samples: its own process, or a thread of the node's."""
    rounds: int
    threads: int
    generate_threads: int
    learn_threads: int
    samples_per_round: int
    sync_round_s: float
    pipelined_round_s: float
    generate_alone_s: float
    """Generation of one round alone, with the generator's share of the threads."""
    learn_alone_s: float
    """The rest of a round (publish, gather, learn, serve) alone, with the learner's share."""
    pipelined_generate_s: float
    """Generation ahead in the pipelined node (in its thread, beside the learner)."""
    pipelined_learn_s: float
    sync_s: float
    """Copying the learner's weights into the generator's model, per round."""
    stale_share: float
    """Own groups learned one version late / own groups learned, pipelined."""
    overlap_ratio: float
    """Pipelined rounds / max(generate alone, learning alone on the same work) (module docstring): 1 is a perfect overlap."""
    overlap_ratio_medians: float
    """Median pipelined round / max(median generate alone, median learn alone), work not matched."""
    generate_slowdown: float
    """Generation beside learning / alone (medians; the same prompts, G and token budget)."""
    learn_slowdown: float
    """Learning beside generation / alone on the same work (sums over the measured rounds)."""
    samples_per_s_sync: float
    samples_per_s_pipelined: float
    speedup: float
    """Samples learned per second, pipelined / sync."""
    sync_over_learn: float
    steps_sync: int
    """Optimiser steps the sync node took (its last policy version); 0: no round carried signal, no backward ran."""
    steps_pipelined: int

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def _median(rows: list[dict], key: str) -> float:
    return statistics.median(float(r.get(key, 0.0)) for r in rows)


def _measured(rows: list[dict]) -> list[dict]:
    """Rounds 2 .. n - 1 (module docstring)."""
    return rows[1:-1]


@dataclasses.dataclass(frozen=True)
class LearnRates:
    """Learning alone, per unit of work (from a synchronous node's rounds)."""

    logp_per_sequence: float
    update_per_gradient_sequence: float
    rest: float
    """A round's time besides generating and learning: publish, gather, serve."""

    @classmethod
    def of(cls, rows: list[dict]) -> "LearnRates":
        """Medians over `rows` after the first (its update allocates the optimiser's state)."""
        rows = rows[1:] or rows
        stepped = [r for r in rows if r.get("time_update", 0.0) > 0 and r.get("sequences_with_gradient", 0)]
        return cls(
            logp_per_sequence=statistics.median(r["time_logp_old"] / r["sequences"] for r in rows if r.get("sequences")),
            update_per_gradient_sequence=statistics.median(
                r["time_update"] / r["sequences_with_gradient"] for r in stepped) if stepped else 0.0,
            rest=statistics.median(r["time_round"] - r["time_generate"] - r["time_learn"] for r in rows))

    def learn_time(self, row: dict) -> float:
        """What learning `row`'s round (its sequences, its update if it took one) takes alone."""
        update = row.get("sequences_with_gradient", 0) if row.get("time_update", 0.0) > 0 else 0
        return (self.logp_per_sequence * row.get("sequences", 0) + self.update_per_gradient_sequence * update
                + self.rest)


def matched_overlap(piped: list[dict], rates: LearnRates, generate_alone: float) -> tuple[float, float]:
    """`(overlap ratio, learning slowdown)` of the measured pipelined rounds on their own work (module docstring)."""
    alone = [rates.learn_time(r) for r in piped]
    beside = [r["time_round"] - r.get("time_generate_wait", 0.0) - r.get("time_sync", 0.0) - r["time_generate"]
              for r in piped]
    return (sum(r["time_round"] for r in piped) / sum(max(generate_alone, a) for a in alone),
            sum(beside) / sum(alone))


def _node_rows(flags: dict[str, Any], run_dir: Path) -> list[dict]:
    from ftis_swarm.config import load_node_config
    from ftis_swarm.node.daemon import Node

    shutil.rmtree(run_dir, ignore_errors=True)
    cfg = load_node_config(None, {**flags, "run_dir": str(run_dir), "eval_every": 0})  # rounds alone, timed
    # a lone node's publishes find no replica: one warning per group would bury the progress lines
    swarm_log = logging.getLogger("ftis_swarm.swarm.client")
    level = swarm_log.level
    swarm_log.setLevel(logging.ERROR)
    try:
        return [res.record for res in Node(cfg).run()]
    finally:
        swarm_log.setLevel(level)


def run_pipeline_bench(*, workdir: Path, model: str = "smollm2-135m", task: Optional[str] = None, rounds: int = 5,
                       threads: int = 2, generate_in: str = "process",
                       generate_threads: Optional[int] = None, prompts: int = 4, group_size: int = 4,
                       max_new_tokens: int = 24, lr: float = 1e-5, seed: int = 0,
                       progress: Callable[[str], None] = lambda s: None) -> PipelineBench:
    """Runs the arms (module docstring) and returns their figures; `rounds` >= 3.

    `task`: the nodes' task; by default `arith` for the tiny model (what it was taught) and
    `arith_mix` for another (one SmolLM2-135M solves about a quarter of when sampling, so
    most groups carry signal and most rounds take an optimiser step)."""
    if rounds < 3:
        raise ValueError(f"rounds must be >= 3 (the first and the last are not measured), got {rounds}")
    workdir = Path(workdir)
    if model == "tiny":
        from ftis_swarm.ops.taught import build_tiny_arith_model

        progress("building the tiny arith model")
        model = str(build_tiny_arith_model(workdir / "tiny-arith"))
        task = task or "arith"
    task = task or "arith_mix"
    gen_threads = generate_threads or max(1, threads // 2)
    learn_threads = max(1, threads - gen_threads)
    base = {"model": model, "task": task, "rounds": rounds, "prompts_per_round": prompts, "sampling.group_size": group_size,
            "sampling.max_new_tokens": max_new_tokens, "learner.lr": lr, "seed": seed, "round_deadline": 0.2,
            "checkpoint_every": rounds, "swarm.transport.host": "127.0.0.1", "backend": "transformers"}
    progress(f"sync node: max_staleness 0, {threads} threads")
    sync_all = _node_rows({**base, "threads": threads}, workdir / "sync")
    sync = _measured(sync_all)
    progress(f"pipelined node: max_staleness 1, {gen_threads} generator ({generate_in}) + {learn_threads} learner threads")
    piped_all = _node_rows({**base, "threads": threads, "max_staleness": 1, "generate_threads": gen_threads,
                            "generate_in": generate_in}, workdir / "pipelined")
    piped = _measured(piped_all)
    progress(f"alone: generate with {gen_threads} threads, learn with {learn_threads}")
    gen_all = _node_rows({**base, "threads": gen_threads}, workdir / "alone-generate")
    gen_rows = _measured(gen_all)
    learn_all = gen_all if learn_threads == gen_threads else _node_rows(
        {**base, "threads": learn_threads}, workdir / "alone-learn")
    learn_rows = _measured(learn_all)
    gen_alone = _median(gen_rows, "time_generate")
    learn_alone = statistics.median(r["time_round"] - r["time_generate"] for r in learn_rows)
    piped_round, sync_round = _median(piped, "time_round"), _median(sync, "time_round")
    piped_learn = statistics.median(r["time_gather"] + r["time_learn"] for r in piped)
    sps_sync = sum(r.get("sequences", 0.0) for r in sync) / sum(r["time_round"] for r in sync)
    sps_piped = sum(r.get("sequences", 0.0) for r in piped) / sum(r["time_round"] for r in piped)
    own = sum(r["own_groups"] for r in piped)
    overlap, learn_slowdown = matched_overlap(piped, LearnRates.of(learn_all), gen_alone)
    return PipelineBench(
        model=model, task=task, generate_in=generate_in, rounds=rounds, threads=threads, generate_threads=gen_threads, learn_threads=learn_threads,
        samples_per_round=prompts * group_size, sync_round_s=sync_round, pipelined_round_s=piped_round,
        generate_alone_s=gen_alone, learn_alone_s=learn_alone,
        pipelined_generate_s=_median(piped, "time_generate_ahead"), pipelined_learn_s=piped_learn,
        sync_s=_median(piped, "time_sync"), stale_share=sum(r.get("stale_groups", 0) for r in piped) / own if own else 0.0,
        overlap_ratio=overlap, overlap_ratio_medians=piped_round / max(gen_alone, learn_alone),
        generate_slowdown=_median(piped, "time_generate_ahead") / gen_alone, learn_slowdown=learn_slowdown,
        samples_per_s_sync=sps_sync,
        samples_per_s_pipelined=sps_piped, speedup=sps_piped / sps_sync if sps_sync else 0.0,
        sync_over_learn=_median(piped, "time_sync") / piped_learn if piped_learn else 0.0,
        steps_sync=int(sync_all[-1]["policy_version"]), steps_pipelined=int(piped_all[-1]["policy_version"]),
    )


def format_pipeline(b: PipelineBench) -> str:
    """The bench's table: medians over rounds 2 .. n - 1, ratios of arms run in this process one after the other."""
    return "\n".join([
        f"pipeline bench: {b.model} on {b.task}, {b.rounds} rounds ({b.rounds - 2} measured), {b.samples_per_round} samples a round,"
        f" {b.threads} threads ({b.generate_threads} generator in a {b.generate_in} + {b.learn_threads} learner when"
        f" pipelined)",
        f"  round, sync (max_staleness 0)      {b.sync_round_s:8.3f} s",
        f"  round, pipelined (max_staleness 1) {b.pipelined_round_s:8.3f} s",
        f"    generate ahead (beside learning) {b.pipelined_generate_s:8.3f} s",
        f"    gather + learn                   {b.pipelined_learn_s:8.3f} s",
        f"    weight sync, in memory           {b.sync_s:8.4f} s   = {b.sync_over_learn:.3f} x learn",
        f"  generate alone ({b.generate_threads} threads)         {b.generate_alone_s:8.3f} s",
        f"  learn alone ({b.learn_threads} threads)            {b.learn_alone_s:8.3f} s",
        f"  pipelined round / max(generate, learn) alone   {b.overlap_ratio:.3f} x on matched work"
        f" ({b.overlap_ratio_medians:.3f} x of the medians)",
        f"    beside each other: generation {b.generate_slowdown:.2f} x, learning {b.learn_slowdown:.2f} x their time alone",
        f"  samples learned per second: sync {b.samples_per_s_sync:.2f}, pipelined {b.samples_per_s_pipelined:.2f}"
        f"  => {b.speedup:.2f} x",
        f"  own groups learned one version late: {b.stale_share:.0%}",
        f"  optimiser steps: sync {b.steps_sync}, pipelined {b.steps_pipelined} of {b.rounds} rounds",
    ])
