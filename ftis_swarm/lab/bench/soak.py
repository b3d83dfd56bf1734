"""`ftis-node bench soak`: does any process of a running testnet grow? RSS and open files over 200+ rounds.

The local testnet's tiny preset (a bootstrap peer and three `ftis-node join` processes,
each with its p2pd) runs `rounds` rounds with a short record TTL and round deadline, so
records and bodies expire and are replaced many times over. Every `interval` seconds each
process's resident memory (`VmRSS`) and open file descriptors are read from /proc.

The warm-up lasts one TTL from the nodes' first round (by then every kind of record and
body has lived and expired once) and, if later, until every node that updates at all has
taken its first optimiser step: AdamW allocates its two fp32 moments at that step, and
the first backward its buffers, a one-time rise of 2 to 4 times the trainable bytes that
the learner's memory plan counts as steady state (+77 MB for tiny-full's 19 MB, +120 MB
for tiny-large's 37 MB, +10 MB for the LoRA node). The tiny random models earn their
first nonzero advantage late (with the preset's seeds: tiny-large's own group of its round
171, which the others gather in the same round; 255 s into a run here, later on a slower
machine), and a TTL-only warm-up read that one step as +22% and +27% "growth" of the two
full fine-tunes. After the warm-up a straight line is fitted to each process's samples;
its growth is the line's rise over the rest of the run, as a share of its value at the
warm-up's end. A leak (a cache without eviction, a socket per round) shows as growth that
goes on for the whole run; the goal is below 5% for every process.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path
from typing import Callable, Sequence

from ftis_swarm.metrics import read_jsonl
from ftis_swarm.metrics.procstat import open_fds, status_mb, with_children
from ftis_swarm.ops.testnet import node_command, preset, start_bootstrap, start_node, stop

log = logging.getLogger(__name__)

GOAL = 0.05
"""Largest fitted growth after the warm-up, as a share of the value at its end."""


MIN_SAMPLES = 10
"""Fewest samples after the warm-up that the growth is fitted to."""


@dataclasses.dataclass(frozen=True)
class Series:
    """One quantity of one process over the run, and its fitted growth after the warm-up."""

    first: float
    """At the end of the warm-up (the fitted line's value there)."""
    last: float
    """At the end of the run (the fitted line's value there)."""
    peak: float
    growth: float
    """(last - first) / first."""


@dataclasses.dataclass(frozen=True)
class SoakBench:
    rounds: int
    ttl: float
    deadline: float
    seconds: float
    warmup_s: float
    samples: int
    rounds_done: dict[str, int]
    rss_mb: dict[str, Series]
    fds: dict[str, Series]
    samples_by_process: dict[str, list[tuple[float, float, float]]]
    """Every sample: (seconds since the start, RSS MB, open files), for plots and other fits."""

    @property
    def worst_growth(self) -> float:
        return max(s.growth for table in (self.rss_mb, self.fds) for s in table.values())

    @property
    def within_goal(self) -> bool:
        return self.worst_growth < GOAL and all(n >= self.rounds for n in self.rounds_done.values())

    def as_dict(self) -> dict:
        return {"bench": "soak", **dataclasses.asdict(self), "worst_growth": self.worst_growth,
                "within_goal": self.within_goal}


def fitted_growth(times: Sequence[float], values: Sequence[float], *, since: float) -> Series:
    """The least-squares line through the samples at `since` or later, and its rise over them."""
    pts = [(t, v) for t, v in zip(times, values) if t >= since]
    if len(pts) < 2:
        raise ValueError(f"{len(pts)} samples after the warm-up: too few to fit a line")
    n = len(pts)
    mt, mv = sum(t for t, _ in pts) / n, sum(v for _, v in pts) / n
    var = sum((t - mt) ** 2 for t, _ in pts)
    slope = sum((t - mt) * (v - mv) for t, v in pts) / var if var else 0.0
    t0, t1 = pts[0][0], pts[-1][0]
    first, last = mv + slope * (t0 - mt), mv + slope * (t1 - mt)
    return Series(first=first, last=last, peak=max(v for _, v in pts),
                  growth=(last - first) / first if first > 0 else 0.0)


def warm_up_end(rounds_by_node: Sequence[Sequence[dict]], ttl: float) -> float:
    """When the warm-up ends: one TTL after the first node's first round, or every node's first update if later.

    A node's first update is its first metrics row with `policy_version` >= 1; a node that never
    updated (no nonzero advantage in the whole run) has no such step to wait for.
    """
    end = min(rows[0]["time"] for rows in rounds_by_node) + ttl
    for rows in rounds_by_node:
        first_update = next((r["time"] for r in rows if r.get("policy_version", 0) >= 1), None)
        if first_update is not None:
            end = max(end, first_update)
    return end


def _rounds(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    return list(read_jsonl(path)) if path.exists() else []


def run_soak_bench(*, workdir: Path, rounds: int = 300, ttl: float = 30.0, deadline: float = 0.5,
                   interval: float = 2.0, progress: Callable[[str], None] = lambda s: None) -> SoakBench:
    """Runs the testnet to its last round while sampling every process; no process outlives this call."""
    workdir.mkdir(parents=True, exist_ok=True)
    pre = preset("tiny", workdir)
    flags = pre.flags + ("--round-deadline", str(deadline), "--checkpoint-every", "10",
                         "--set", f"swarm.records.ttl={ttl}",
                         "--set", f"swarm.records.max_clock_skew={min(5.0, ttl / 4)}",
                         "--set", "swarm.fetch.poll_interval=0.5")
    boot, maddrs = start_bootstrap(workdir)
    nodes = []
    t0 = time.time()
    rss: dict[str, list[tuple[float, float]]] = {}  # process -> (time, value) samples
    fds: dict[str, list[tuple[float, float]]] = {}
    samples = 0
    try:
        for i, spec in enumerate(pre.specs):
            run_dir = workdir / f"node-{i}-{spec.name}"
            cmd = node_command(spec, index=i, run_dir=run_dir, peers=maddrs, run_id=f"soak-{int(t0)}", rounds=rounds,
                               flags=flags)
            nodes.append(start_node(cmd, run_dir, spec))
        last_report = 0.0
        while any(n.proc.poll() is None for n in nodes):
            now = time.time()
            if all(n.proc.poll() is None for n in nodes):  # until the first node ends its last round
                samples += 1
                pids = with_children({"bootstrap": boot.pid, **{f"node{i}": n.proc.pid for i, n in enumerate(nodes)}})
                for name, pid in pids.items():
                    rss.setdefault(name, []).append((now, status_mb(pid, "VmRSS")))
                    fds.setdefault(name, []).append((now, float(open_fds(pid))))
            if now - last_report > 60:
                last_report = now
                progress(f"{now - t0:.0f} s: rounds {[len(_rounds(n.run_dir)) for n in nodes]}")
            time.sleep(interval)
        codes = [n.proc.wait() for n in nodes]
    finally:
        for n in nodes:
            stop(n.proc)
        stop(boot)
    if any(codes):
        raise RuntimeError(f"a node exited with status {codes}; see {workdir}/node-*/stdout.log")
    since = warm_up_end([_rounds(n.run_dir) for n in nodes], ttl)
    after = sum(t >= since for t, _ in next(iter(rss.values()), []))
    if after < MIN_SAMPLES:
        raise RuntimeError(f"only {after} samples after the warm-up ({since - t0:.0f} s: one TTL or the nodes' first "
                           f"optimiser step) of a {time.time() - t0:.0f} s run, too few to fit growth; run more rounds")
    return SoakBench(
        rounds=rounds, ttl=ttl, deadline=deadline, seconds=time.time() - t0, warmup_s=since - t0, samples=samples,
        rounds_done={n.spec.name: len(_rounds(n.run_dir)) for n in nodes},
        rss_mb={name: fitted_growth(*zip(*series), since=since) for name, series in sorted(rss.items())},
        fds={name: fitted_growth(*zip(*series), since=since) for name, series in sorted(fds.items())},
        samples_by_process={name: [(t - t0, mb, n) for (t, mb), (_, n) in zip(rss[name], fds[name])]
                            for name in sorted(rss)},
    )


def format_soak(bench: SoakBench) -> str:
    lines = [
        f"3 tiny nodes and a bootstrap peer on 127.0.0.1: {bench.rounds} rounds, record TTL {bench.ttl:g} s, "
        f"deadline {bench.deadline:g} s; {bench.seconds:.0f} s, {bench.samples} samples, growth fitted after a "
        f"warm-up of {bench.warmup_s:.0f} s (one TTL, or every node's first optimiser step if later)",
        f"{'process':>16} {'RSS MB':>8} {'->':>2} {'':>8} {'growth':>7} {'peak':>8}   {'fds':>5} {'->':>2} {'':>5} "
        f"{'growth':>7}",
    ]
    for name, mem in bench.rss_mb.items():
        fd = bench.fds[name]
        lines.append(f"{name:>16} {mem.first:8.1f} -> {mem.last:8.1f} {100 * mem.growth:+6.1f}% {mem.peak:8.1f}   "
                     f"{fd.first:5.0f} -> {fd.last:5.0f} {100 * fd.growth:+6.1f}%")
    verdict = "within" if bench.within_goal else "NOT within"
    lines.append(f"worst fitted growth {100 * bench.worst_growth:+.1f}% ({verdict} the goal of {100 * GOAL:.0f}%); "
                 f"rounds done: {bench.rounds_done}")
    return "\n".join(lines)
