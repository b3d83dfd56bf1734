"""Generation runs ahead of learning: round r + k's own groups are sampled while round r learns.

With `max_staleness = k >= 1` the daemon's round is, around the one learning half
(`learning.learn_round`):

1. `take(r)`: round r's own groups, generated ahead (or now, in the first k rounds of a
   fresh run, when none were); a group more than k policy versions behind the learner is
   dropped and counted (`stale_dropped`); the others are own samples, stale ones off-policy
   (weighted, never filtered: docs/method.md, Stale samples), labelled by `learning.label`;
2. `start(r)`: round r + k's generation starts in the generator's thread;
3. publish, gather and learn round r on the main thread, meanwhile;
4. `finish()`: waits for the generation (`time_generate_wait`), then brings the
   generator's weights to the learner's new version (`time_sync`).

So round j's groups come from the weights after round j - k - 1's update and are at most
k versions old when round j learns: the schedule is fixed, whatever the two threads'
speeds, so a run repeats exactly. The generator has its own torch thread count
(`generate_threads`), the learner keeps the rest.

The generator samples from its own copy of the model, refreshed in memory after each
update (`rollout.weight_sync`). On CPU that copy lives in shared memory and is sampled in a
process of its own (`generate_in = "process"`, `rollout.process_backend`): in one process
the decode loop and the learner contend for the GIL (docs/benchmarks.md, bench pipeline);
the pipeline's thread then only waits for the process. `generate_in = "thread"`, or a model
on a GPU, samples in the thread itself. A backend with its own weights already (vLLM, or the
sharded learner's rank-0 copy) is refreshed by `Serving` as before, but only once its
generation is done (`HeldServing` holds the learner's push until `finish`).

A checkpoint is taken between rounds, when no generation is in flight: it carries the
groups generated ahead (wire-encoded, with their rounds and counts: `state` /
`load_state`), since the weights that made them are gone, and the daemon saves the
generator's count of generate calls (`backend`, kept in this process also when the
sampling runs in another), which seeds the next call. The resumed
node learns them as the uninterrupted one would have. Prompts are rendered on the main
thread; only sampling runs in the generator's.
"""

from __future__ import annotations

import base64
import dataclasses
import logging
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import torch

from ftis_swarm.config import NodeConfig, WireConfig
from ftis_swarm.node.rollouts import generate_groups, node_sampling, render_prompts, round_items
from ftis_swarm.node.serving import Serving, check_versions
from ftis_swarm.rollout import PromptRequest, TransformersBackend
from ftis_swarm.rollout.process_backend import ProcessBackend
from ftis_swarm.rollout.weight_sync import InMemorySync, model_copy
from ftis_swarm.wire import Group, decode_group, encode_group

log = logging.getLogger(__name__)


def fresh_enough(groups: Sequence[Group], version: int, max_staleness: int) -> tuple[list[Group], int]:
    """The groups at most `max_staleness` versions behind `version`, and how many were not."""
    kept = [g for g in groups if version - int(g.policy_version) <= max_staleness]
    return kept, len(groups) - len(kept)


def thread_shares(cfg: NodeConfig, available: int) -> tuple[int, int]:
    """`(generator, learner)` torch threads out of `cfg.threads` (or `available`): half each by default."""
    total = cfg.threads or available
    gen = cfg.generate_threads or max(1, total // 2)
    return gen, max(1, total - gen)


@dataclass
class Ahead:
    """One round's own groups, generated before the round."""

    round: int
    groups: list[Group]
    counts: Counter
    seconds: float


class HeldServing:
    """A `Serving` whose push waits for `release`: the learner's update must not reach a backend mid-generation."""

    def __init__(self, serving: Serving) -> None:
        self.serving = serving

    def after_update(self) -> None:
        """Held: `Pipeline.finish` serves the new weights once the generation in flight is done (timed there)."""

    def release(self) -> None:
        self.serving.after_update()


class Pipeline:
    """The generator's side of a node whose generation runs `cfg.max_staleness` rounds ahead."""

    def __init__(self, cfg: NodeConfig, *, backend: Any, learner: Any, task: Any, tokenizer: Any,
                 sync: Callable[[], None], threads: int, owned: Any = None) -> None:
        self.cfg, self.backend, self.learner, self.task, self.tokenizer = cfg, backend, learner, task, tokenizer
        self._owned = owned  # a backend this pipeline started (the generator's process), closed with it
        self._sync = sync
        self._ready: dict[int, Ahead] = {}
        self._future: Optional[Future] = None
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="generate", initializer=torch.set_num_threads,
                                        initargs=(threads,))

    @classmethod
    def build(cls, parts: Any, learning: Any) -> "Pipeline":
        """The pipeline of a node's `parts`; on CPU, its own model copy. Rewires `learning.serving` when needed."""
        cfg, learner = parts.cfg, parts.learner
        gen_threads, learn_threads = thread_shares(cfg, torch.get_num_threads())
        owned = None
        if parts.shares_model:
            twin = model_copy(learner.model)
            copier = InMemorySync(learner.model, twin)
            on_cpu = next(twin.parameters()).device.type == "cpu"
            if cfg.generate_in == "process" and on_cpu:
                # sampling in a process of its own: no GIL shared with the learner; the copy's pages are shared
                backend = owned = ProcessBackend(model=twin, tokenizer=parts.tokenizer, header=parts.backend.header,
                                                 threads=gen_threads)
            else:
                backend = TransformersBackend(model=twin, tokenizer=parts.tokenizer, header=parts.backend.header)

            def sync() -> None:
                copier.sync()
                while backend.policy_version < learner.policy_version:
                    backend.bump_policy_version()

            log.info("generator: its own model copy in %s, %d tensors (%.1f MiB) synced in memory after each update",
                     "a process of its own" if owned else "a thread", copier.tensors, copier.bytes / 2**20)
        else:
            backend, held = parts.backend, HeldServing(learning.serving)
            learning.serving = held
            sync = held.release
        torch.set_num_threads(learn_threads)
        log.info("generation runs up to %d rounds ahead: %d generator threads, %d learner threads",
                 cfg.max_staleness, gen_threads, learn_threads)
        return cls(cfg, backend=backend, learner=learner, task=parts.task, tokenizer=parts.tokenizer, sync=sync,
                   threads=gen_threads, owned=owned)

    # -- the round's hooks -------------------------------------------------------------------
    def take(self, r: int, counts: Counter) -> list[Group]:
        """Round `r`'s own groups (generated ahead, else now), without those too stale to learn."""
        ahead = self._ready.pop(r, None) or self._generate(r, self._prompts(r))
        kept, dropped = fresh_enough(ahead.groups, self.learner.policy_version, self.cfg.max_staleness)
        counts.update(ahead.counts)
        if dropped:
            log.warning("round %d: %d own groups more than %d versions old dropped", r, dropped,
                        self.cfg.max_staleness)
            counts["stale_dropped"] += dropped
        return kept

    def start(self, r: int) -> None:
        """Starts round `r + k`'s generation in the generator's thread (none past the last round)."""
        target = r + self.cfg.max_staleness
        if target <= self.cfg.rounds and target not in self._ready and self._future is None:
            # rendered here: the tokenizer stays on the main thread (a fast tokenizer is not shared across threads)
            self._future = self._pool.submit(self._generate, target, self._prompts(target))

    def finish(self) -> dict[str, float]:
        """After round r's update: waits for the generation in flight, then syncs the generator's weights.

        Returns the round record's `time_generate_ahead` (what that generation took, in its
        thread), `time_generate_wait` (how long the round waited for it) and `time_sync`.
        """
        t0 = time.perf_counter()
        ahead_s = 0.0
        if self._future is not None:
            future, self._future = self._future, None
            ahead = future.result()  # re-raises what the generation raised
            self._ready[ahead.round] = ahead
            ahead_s = ahead.seconds
        t1 = time.perf_counter()
        self._sync()
        check_versions(self.learner, self.backend)
        return {"time_generate_ahead": ahead_s, "time_generate_wait": t1 - t0, "time_sync": time.perf_counter() - t1}

    def _prompts(self, r: int) -> list[PromptRequest]:
        return render_prompts(self.task, self.tokenizer, round_items(self.task, self.cfg, r))

    def _generate(self, r: int, prompts: list[PromptRequest]) -> Ahead:
        counts: Counter = Counter()
        t0 = time.perf_counter()
        groups = generate_groups(self.backend, prompts, self.cfg.sampling.group_size, node_sampling(self.cfg), counts,
                                 r=r)
        return Ahead(r, groups, counts, time.perf_counter() - t0)

    # -- checkpoint --------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """The groups generated ahead, wire-encoded (base64) with their rounds and counts; between rounds only."""
        if self._future is not None:
            raise RuntimeError("a checkpoint while a generation is in flight would lose it")
        return {"rounds": [{"round": a.round, "counts": dict(a.counts), "seconds": a.seconds,
                            "groups": [base64.b64encode(encode_group(g)).decode("ascii") for g in a.groups]}
                           for a in sorted(self._ready.values(), key=lambda a: a.round)]}

    def load_state(self, state: dict[str, Any], *, limits: Optional[WireConfig] = None) -> None:
        """Restores `state()` after the learner's weights were restored; the generator then serves them.

        The generator's count of generate calls is the daemon's `rollout_calls` (`backend`). The
        groups are this node's own, read from its own checkpoint: they take its current peer id."""
        me = self.backend.header.sender  # a node without an identity file restarts under a new peer id
        self._ready = {}
        for a in state.get("rounds", []):
            groups = [decode_group(base64.b64decode(text), limits=limits) for text in a["groups"]]
            self._ready[int(a["round"])] = Ahead(int(a["round"]), [dataclasses.replace(g, sender=me) for g in groups],
                                                 Counter(a.get("counts", {})), float(a.get("seconds", 0.0)))
        self._sync()
        check_versions(self.learner, self.backend)

    def close(self) -> None:
        """Waits for a generation in flight (its groups are not needed any more), stops the thread and the
        generator's process, if it has one."""
        try:
            self._pool.shutdown(wait=True, cancel_futures=True)
        finally:
            if self._owned is not None:
                self._owned.close()
