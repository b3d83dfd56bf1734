"""`ftis-node bench resume`: a lone node SIGKILLed N times ends exactly where an uninterrupted run ends.

Two runs of the same `ftis-node join` command line (a lone node: no peers, fixed seeds,
one torch thread, a checkpoint every round): the reference runs to its last round
undisturbed; the other is SIGKILLed (the node and its p2pd, the whole process group) at
random moments and started again, `kills` times, then runs to the end. One kill in four
comes while the node loads (U(0, startup) seconds after its start); the others U(0, first
round + k rounds) seconds after the node says it starts its rounds (times of the reference
run; k = 2 x rounds left / kills left, at least 1, so the kills spread over the run; and
before 60% of the rest of the run, so a kill finds the node running), so they land mid-round, between a round's metrics line and its checkpoint,
and while a checkpoint is written; where each landed is counted from the run directory at
the moment of the kill. Then the two runs' last checkpoints (every weight tensor and
the optimiser's state, bit for bit), per-round logs (`metrics.jsonl` without its clock
fields `time` and `time_*`) and `consumed.jsonl` are compared. The node evaluates its
held-out set every `EVAL_EVERY` rounds and at round 0 (node/heldout.py), so kills land around
evaluations too, and their accuracies are part of the logs compared.

The default model is a tiny Qwen2 taught arith's answer form (`tiny_arith.py`), so every
round takes an optimiser step and the weights move; `--model smollm2-135m` runs the
embedded SmolLM2 (slow: a checkpoint of the full model and AdamW's state is 1.6 GB).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import random
import shutil
import signal
import statistics
import subprocess
import time
from pathlib import Path
from typing import Callable

import torch

from ftis_swarm.lab.bench.run_compare import (
    compare_logs,
    compare_tensors,
    flat_tensors,
    initial_weights,
    log_rows,
    tensor_files,
    trained_tensors,
)
from ftis_swarm.metrics import read_jsonl
from ftis_swarm.ops.testnet import NodeSpec, node_command, start_node

log = logging.getLogger(__name__)

LIFE_TIMEOUT = 1800.0
END_MARGIN = 0.6
"""A kill during the rounds comes before this share of the time the rest of the run took the reference."""
LOADING_KILLS = 0.25
"""Share of the kills that come while the node loads; the others come during its rounds."""
EVAL_EVERY = 2
"""Rounds between the node's held-out evaluations here (its default is rarer)."""


@dataclasses.dataclass(frozen=True)
class ResumeBench:
    model: str
    backend: str
    rounds: int
    kills_asked: int
    kills: int
    """Kills that happened (fewer than asked when the run reached its last round first)."""
    kill_phases: dict[str, int]
    """Where the kills landed: `loading` (before the node's first round of that life), `in_round`
    (mid-round, its last logged round checkpointed), `logged_not_saved` (after a round's metrics
    line, before its checkpoint completed; `before_first_checkpoint` when there was none yet)."""
    reference_s: float
    killed_s: float
    startup_s: float
    round_s: float
    """Median time between two metrics lines of the reference (a round and its checkpoint)."""
    tensors: int
    tensors_differing: int
    max_abs_diff: float
    tensors_trained: int
    """Weight tensors of the last checkpoint that differ from the model the runs started from: the
    updates moved the weights, so the comparison is not of untouched ones."""
    optimizer_tensors: int
    optimizer_differing: int
    rounds_compared: int
    rounds_differing: int
    keys_differing: list[str]
    max_rel_diff: float
    """Largest relative difference of a numeric field of the per-round log (0 when identical)."""
    consumed_same: bool

    @property
    def identical(self) -> bool:
        return (self.tensors_differing == 0 and self.optimizer_differing == 0 and self.rounds_differing == 0
                and self.consumed_same and self.tensors > 0 and self.rounds_compared == self.rounds)

    def as_dict(self) -> dict:
        return {"bench": "resume", **dataclasses.asdict(self), "identical": self.identical}


@dataclasses.dataclass(frozen=True)
class ResumeSetup:
    """The node's command line, but for its run directory."""

    model: str
    rounds: int
    seed: int
    backend: str
    flags: tuple[str, ...]

    def command(self, run_dir: Path) -> list[str]:
        flags = self.flags + ("--identity", str(run_dir / "identity.key"), "--backend", self.backend)
        return node_command(NodeSpec("resume", self.model), index=self.seed, run_dir=run_dir, peers=[],
                            run_id="bench-resume", rounds=self.rounds, flags=flags)


def _rounds_logged(run_dir: Path) -> int:
    path = run_dir / "metrics.jsonl"
    return max((int(r["round"]) for r in read_jsonl(path)), default=0) if path.exists() else 0


def _rounds_saved(run_dir: Path) -> int:
    """The latest checkpoint with its `COMPLETE` marker (not its hashes: a cheap look while the node runs)."""
    done = [int(p.parent.name.split("-")[1]) for p in (run_dir / "checkpoints").glob("ckpt-*/COMPLETE")]
    return max(done, default=0)


def _phase(run_dir: Path, life_log_start: int) -> str:
    text = (run_dir / "stdout.log").read_text(errors="replace")[life_log_start:]
    if "starting at round" not in text:
        return "loading"
    logged, saved = _rounds_logged(run_dir), _rounds_saved(run_dir)
    if logged > saved:
        return "logged_not_saved" if saved else "before_first_checkpoint"
    return "in_round"


@dataclasses.dataclass(frozen=True)
class Timeline:
    """The reference run's pace, which the kill moments follow."""

    wall_s: float
    startup_s: float
    """From the start of the process to its "starting at round" line."""
    first_round_s: float
    """From that line to round 1's metrics line (a first round also warms up)."""
    cycle_s: float
    """Median time between two metrics lines (a round and its checkpoint)."""


def _reference_run(setup: ResumeSetup, run_dir: Path) -> Timeline:
    t0, wall0 = time.perf_counter(), time.time()
    node = start_node(setup.command(run_dir), run_dir, NodeSpec("resume", setup.model))
    _started_rounds(node.proc, run_dir / "stdout.log", 0)
    started = time.time()
    code = node.proc.wait(timeout=LIFE_TIMEOUT)
    if code != 0:
        raise RuntimeError(f"the node exited with status {code}; see {run_dir / 'stdout.log'}")
    ends = [r["time"] for r in read_jsonl(run_dir / "metrics.jsonl") if r["round"]]  # round 0: the evaluation
    cycles = [b - a for a, b in zip(ends, ends[1:])]
    return Timeline(wall_s=time.perf_counter() - t0, startup_s=started - wall0, first_round_s=ends[0] - started,
                    cycle_s=statistics.median(cycles) if cycles else ends[0] - started)


def _started_rounds(proc: subprocess.Popen, stdout: Path, offset: int) -> bool:
    """Waits until this life says it starts its rounds; False when it ended first."""
    while proc.poll() is None:
        if "starting at round" in stdout.read_text(errors="replace")[offset:]:
            return True
        time.sleep(0.02)
    return False


def _killed_run(setup: ResumeSetup, run_dir: Path, *, kills: int, pace: Timeline, rng: random.Random,
                progress: Callable[[str], None]) -> tuple[int, dict[str, int]]:
    phases: dict[str, int] = {}
    done = 0
    stdout = run_dir / "stdout.log"
    while True:
        log_start = stdout.stat().st_size if stdout.exists() else 0
        node = start_node(setup.command(run_dir), run_dir, NodeSpec("resume", setup.model))
        if done >= kills:
            code = node.proc.wait(timeout=LIFE_TIMEOUT)
            if code != 0:
                raise RuntimeError(f"the node exited with status {code}; see {stdout}")
            return done, phases
        while_loading = rng.random() < LOADING_KILLS
        # during the rounds: about (rounds left) / (kills left) rounds a life, so the kills spread over the
        # run, and well before the end of the run at the reference's pace, so each kill finds the node running
        rounds_left = setup.rounds - _rounds_saved(run_dir)
        span = min(pace.first_round_s + max(1.0, 2.0 * rounds_left / (kills - done)) * pace.cycle_s,
                   END_MARGIN * (pace.first_round_s + (rounds_left - 1) * pace.cycle_s))
        delay = rng.uniform(0.0, pace.startup_s if while_loading else span)
        try:
            if while_loading or _started_rounds(node.proc, stdout, log_start):
                node.proc.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            os.killpg(node.proc.pid, signal.SIGKILL)  # the node and its p2pd: one process group
            node.proc.wait()
            phase = _phase(run_dir, log_start)
            phases[phase] = phases.get(phase, 0) + 1
            done += 1
            progress(f"kill {done}/{kills}: {phase} (round {_rounds_logged(run_dir)} logged, "
                     f"{_rounds_saved(run_dir)} saved)")
            continue
        if node.proc.returncode != 0:
            raise RuntimeError(f"the node exited with status {node.proc.returncode}; see {run_dir / 'stdout.log'}")
        return done, phases  # it reached its last round before the next kill


def run_resume_bench(*, workdir: Path, model: str = "tiny", rounds: int = 12, kills: int = 20, seed: int = 0,
                     backend: str = "transformers", prompts: int = 2, group_size: int = 8, max_new_tokens: int = 6,
                     lr: float = 1e-3, progress: Callable[[str], None] = lambda s: None,
                     extra: tuple[str, ...] = ()) -> ResumeBench:
    """Runs the reference, then the killed run, in `workdir` (emptied of earlier runs first); compares them."""
    workdir.mkdir(parents=True, exist_ok=True)
    if model == "tiny":
        from ftis_swarm.ops.taught import build_tiny_arith_model

        progress("teaching a tiny model arith's answer form")
        model_path = str(build_tiny_arith_model(workdir / "models" / "tiny-arith"))
    else:
        model_path = model
    flags = ("--task", "arith", "--prompts-per-round", str(prompts), "--group-size", str(group_size),
             "--max-new-tokens", str(max_new_tokens), "--temperature", "1.0", "--lr", str(lr),
             "--round-deadline", "0.05", "--checkpoint-every", "1", "--threads", "1",
             "--set", f"eval_every={EVAL_EVERY}") + tuple(extra)
    setup = ResumeSetup(model=model_path, rounds=rounds, seed=seed, backend=backend, flags=flags)
    ref, killed = workdir / "reference", workdir / "killed"
    for d in (ref, killed):
        shutil.rmtree(d, ignore_errors=True)
    progress(f"reference run: {rounds} rounds, undisturbed")
    pace = _reference_run(setup, ref)
    progress(f"killed run: {kills} kills, while loading (U(0, {pace.startup_s:.1f}) s) or during the rounds "
             f"(U(0, {pace.first_round_s:.2f} s + k x {pace.cycle_s:.2f} s) after they start)")
    t0 = time.perf_counter()
    done, phases = _killed_run(setup, killed, kills=kills, pace=pace, rng=random.Random(seed), progress=progress)
    killed_s = time.perf_counter() - t0
    last = f"checkpoints/ckpt-{rounds:08d}"
    final = tensor_files(ref / last)
    n, bad, worst = compare_tensors(final, tensor_files(killed / last))
    opt_a = flat_tensors(torch.load(ref / last / "optimizer.pt", weights_only=True))
    opt_b = flat_tensors(torch.load(killed / last / "optimizer.pt", weights_only=True))
    n_opt, bad_opt, _ = compare_tensors(opt_a, opt_b)
    rows_a, rows_b = log_rows(ref, "metrics.jsonl"), log_rows(killed, "metrics.jsonl")
    rows_bad, keys, rel = compare_logs(rows_a, rows_b)
    return ResumeBench(model=model, backend=backend, rounds=rounds, kills_asked=kills, kills=done,
                       kill_phases=phases, reference_s=pace.wall_s, killed_s=killed_s, startup_s=pace.startup_s,
                       round_s=pace.cycle_s,
                       tensors=n, tensors_differing=bad, max_abs_diff=worst,
                       tensors_trained=trained_tensors(final, initial_weights(model_path)), optimizer_tensors=n_opt,
                       optimizer_differing=bad_opt,
                       rounds_compared=min(sum(1 for r in rows if r["round"]) for rows in (rows_a, rows_b)),
                       rounds_differing=rows_bad, keys_differing=keys, max_rel_diff=rel,
                       consumed_same=log_rows(ref, "consumed.jsonl") == log_rows(killed, "consumed.jsonl"))


def format_resume(bench: ResumeBench) -> str:
    verdict = "IDENTICAL" if bench.identical else "DIFFERENT"
    phases = ", ".join(f"{k} {v}" for k, v in sorted(bench.kill_phases.items())) or "none"
    lines = [
        f"a lone node ({bench.model}, {bench.backend} backend), {bench.rounds} rounds, a checkpoint every round",
        f"  reference run: {bench.reference_s:.1f} s (start {bench.startup_s:.1f} s, then {bench.round_s:.2f} s a round "
        "with its checkpoint)",
        f"  killed run:    {bench.kills} of {bench.kills_asked} SIGKILLs, {bench.killed_s:.1f} s in all; "
        f"kills landed: {phases}",
        f"  weights:   {bench.tensors - bench.tensors_differing} of {bench.tensors} tensors bit-identical"
        + (f" (largest difference {bench.max_abs_diff:.3g})" if bench.tensors_differing else "")
        + f"; {bench.tensors_trained} moved by the updates",
        f"  optimiser: {bench.optimizer_tensors - bench.optimizer_differing} of {bench.optimizer_tensors} "
        "state tensors bit-identical",
        f"  per-round log: {bench.rounds_compared - bench.rounds_differing} of {bench.rounds} rounds identical "
        "(clock fields aside)" + (f"; differing keys {', '.join(bench.keys_differing[:8])}, largest relative "
                                  f"difference {bench.max_rel_diff:.3g}" if bench.rounds_differing else ""),
        f"  consumed.jsonl: {'same' if bench.consumed_same else 'different'}",
        f"  => {verdict}",
    ]
    return "\n".join(lines)

