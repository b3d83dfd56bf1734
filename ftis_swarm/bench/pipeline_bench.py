"""`ftis-node bench pipeline`: the same lone node with `max_staleness` 0 against 1, the same total threads.

Arms, each a real node (its swarm peer alone, so a gather ends at once) running the same
rounds on the same seed, one after the other in this process:

- `sync`: `max_staleness 0`, `threads` torch threads: generate, then learn;
- `pipelined`: `max_staleness 1`, the same `threads`, split into the generator's share
  and the learner's (`generate_threads`; half each by default): round r + 1 generates
  while round r learns, then the generator's copy is synced in memory (`time_sync`);
- `alone`: `max_staleness 0` with `threads` = the generator's share, whose
  `time_generate` is generation alone with that share, and with the learner's share,
  whose rest of the round (publish, gather, learn) is learning alone with it (one run
  when the shares are equal).

Figures (medians over the rounds between the first and the last: the pipelined node
generates its first round before it can overlap anything, and has nothing to generate
ahead in its last): the pipelined round against max(generate alone, learn
alone); samples learned per second, pipelined over sync; sync time over learn time.
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
    """Pipelined round / max(generate alone, learn alone): 1 is a perfect overlap."""
    samples_per_s_sync: float
    samples_per_s_pipelined: float
    speedup: float
    """Samples learned per second, pipelined / sync."""
    sync_over_learn: float

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def _median(rows: list[dict], key: str) -> float:
    return statistics.median(float(r.get(key, 0.0)) for r in rows)


def _measured(rows: list[dict]) -> list[dict]:
    """Rounds 2 .. n - 1 (module docstring)."""
    return rows[1:-1]


def _node_rows(flags: dict[str, Any], run_dir: Path) -> list[dict]:
    from ftis_swarm.config import load_node_config
    from ftis_swarm.node.daemon import Node

    shutil.rmtree(run_dir, ignore_errors=True)
    cfg = load_node_config(None, {**flags, "run_dir": str(run_dir)})
    return [res.record for res in Node(cfg).run()]


def run_pipeline_bench(*, workdir: Path, model: str = "smollm2-135m", rounds: int = 5, threads: int = 2,
                       generate_threads: Optional[int] = None, prompts: int = 4, group_size: int = 4,
                       max_new_tokens: int = 24, lr: float = 1e-5, seed: int = 0,
                       progress: Callable[[str], None] = lambda s: None) -> PipelineBench:
    """Runs the arms (module docstring) and returns their figures; `rounds` >= 3."""
    if rounds < 3:
        raise ValueError(f"rounds must be >= 3 (the first and the last are not measured), got {rounds}")
    workdir = Path(workdir)
    if model == "tiny":
        from ftis_swarm.bench.tiny_arith import build_tiny_arith_model

        progress("building the tiny arith model")
        model = str(build_tiny_arith_model(workdir / "tiny-arith"))
    gen_threads = generate_threads or max(1, threads // 2)
    learn_threads = max(1, threads - gen_threads)
    base = {"model": model, "rounds": rounds, "prompts_per_round": prompts, "sampling.group_size": group_size,
            "sampling.max_new_tokens": max_new_tokens, "learner.lr": lr, "seed": seed, "round_deadline": 0.2,
            "checkpoint_every": rounds, "swarm.host": "127.0.0.1", "backend": "transformers"}
    progress(f"sync node: max_staleness 0, {threads} threads")
    sync = _measured(_node_rows({**base, "threads": threads}, workdir / "sync"))
    progress(f"pipelined node: max_staleness 1, {gen_threads} generator + {learn_threads} learner threads")
    piped = _measured(_node_rows({**base, "threads": threads, "max_staleness": 1, "generate_threads": gen_threads},
                                 workdir / "pipelined"))
    progress(f"alone: generate with {gen_threads} threads, learn with {learn_threads}")
    gen_rows = _measured(_node_rows({**base, "threads": gen_threads}, workdir / "alone-generate"))
    learn_rows = gen_rows if learn_threads == gen_threads else _measured(_node_rows(
        {**base, "threads": learn_threads}, workdir / "alone-learn"))
    gen_alone = _median(gen_rows, "time_generate")
    learn_alone = statistics.median(r["time_round"] - r["time_generate"] for r in learn_rows)
    piped_round, sync_round = _median(piped, "time_round"), _median(sync, "time_round")
    piped_learn = statistics.median(r["time_gather"] + r["time_learn"] for r in piped)
    sps_sync = sum(r.get("sequences", 0.0) for r in sync) / sum(r["time_round"] for r in sync)
    sps_piped = sum(r.get("sequences", 0.0) for r in piped) / sum(r["time_round"] for r in piped)
    own = sum(r["own_groups"] for r in piped)
    return PipelineBench(
        model=model, rounds=rounds, threads=threads, generate_threads=gen_threads, learn_threads=learn_threads,
        samples_per_round=prompts * group_size, sync_round_s=sync_round, pipelined_round_s=piped_round,
        generate_alone_s=gen_alone, learn_alone_s=learn_alone,
        pipelined_generate_s=_median(piped, "time_generate_ahead"), pipelined_learn_s=piped_learn,
        sync_s=_median(piped, "time_sync"), stale_share=sum(r.get("stale_groups", 0) for r in piped) / own if own else 0.0,
        overlap_ratio=piped_round / max(gen_alone, learn_alone), samples_per_s_sync=sps_sync,
        samples_per_s_pipelined=sps_piped, speedup=sps_piped / sps_sync if sps_sync else 0.0,
        sync_over_learn=_median(piped, "time_sync") / piped_learn if piped_learn else 0.0,
    )


def format_pipeline(b: PipelineBench) -> str:
    """The bench's table: medians over rounds 2 .. n - 1, ratios of arms run in this process one after the other."""
    return "\n".join([
        f"pipeline bench: {b.model}, {b.rounds} rounds ({b.rounds - 2} measured), {b.samples_per_round} samples a round,"
        f" {b.threads} threads ({b.generate_threads} generator + {b.learn_threads} learner when pipelined)",
        f"  round, sync (max_staleness 0)      {b.sync_round_s:8.3f} s",
        f"  round, pipelined (max_staleness 1) {b.pipelined_round_s:8.3f} s",
        f"    generate ahead (its thread)      {b.pipelined_generate_s:8.3f} s",
        f"    gather + learn                   {b.pipelined_learn_s:8.3f} s",
        f"    weight sync, in memory           {b.sync_s:8.4f} s   = {b.sync_over_learn:.3f} x learn",
        f"  generate alone ({b.generate_threads} threads)         {b.generate_alone_s:8.3f} s",
        f"  learn alone ({b.learn_threads} threads)            {b.learn_alone_s:8.3f} s",
        f"  pipelined round / max(generate, learn) alone   {b.overlap_ratio:.3f} x",
        f"  samples learned per second: sync {b.samples_per_s_sync:.2f}, pipelined {b.samples_per_s_pipelined:.2f}"
        f"  => {b.speedup:.2f} x",
        f"  own groups learned one version late: {b.stale_share:.0%}",
    ])
