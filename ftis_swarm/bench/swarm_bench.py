"""`ftis-node bench swarm`: publish-to-visible latency and throughput of N nodes on loopback.

For each swarm size N, N worker processes (`swarm_worker`) join through the first one.
After one unreported warm-up round (first connections between peers), each size of group
(32 KiB and 1 MiB) gets one round: every node publishes `groups` groups back to back from
a common start time while gathering every 20 ms. A group's latency is the time from the
start of its publish until the last other node has it (gathered, checked and decoded);
groups/s is the number of groups that reached every peer over the time from the first
publish to the last arrival. All processes share this machine's clock and CPU cores.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Optional

import numpy as np

from ftis_swarm.config import SwarmConfig

logger = logging.getLogger(__name__)

GROUP_SIZES = {"32KiB": 32 * 1024, "1MiB": 1024 * 1024}
_WARMUP_SIZE = 4 * 1024


@dataclass(frozen=True)
class SwarmBenchRow:
    """The figures of one (swarm size, group size) round."""

    nodes: int
    group: str
    published: int
    """Groups published successfully."""
    complete: int
    """Groups that reached every other node within the round's timeout."""
    publish_p50_s: float
    """Median time of one publish call (pointer stored on its replicas)."""
    p50_s: float
    p95_s: float
    groups_per_s: float


class JsonProcess:
    """A child process speaking JSON lines; killed with its children (its own process group) by `kill`."""

    def __init__(self, argv: list[str], *, log: Path):
        self.log = log
        with open(log, "w") as stderr:
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                                         text=True, start_new_session=True)
        self.peer_id = ""
        self.maddrs: list[str] = []

    def joined(self) -> "JsonProcess":
        hello = self.read()
        self.peer_id, self.maddrs = hello["peer_id"], hello["maddrs"]
        self.hello = hello
        return self

    def send(self, obj: dict) -> None:
        stdin: IO[str] = self.proc.stdin  # type: ignore[assignment]
        stdin.write(json.dumps(obj) + "\n")
        stdin.flush()

    def read(self) -> dict:
        line = self.proc.stdout.readline()  # type: ignore[union-attr]
        if not line:
            tail = self.log.read_text()[-2000:]
            raise RuntimeError(f"bench process {self.proc.pid} exited with status {self.proc.wait()}:\n{tail}")
        return json.loads(line)

    def request(self, obj: dict) -> dict:
        self.send(obj)
        return self.read()

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # already gone with its whole group
        self.proc.wait()


def start_worker(cfg: SwarmConfig, *, log: Path) -> JsonProcess:
    """A `swarm_worker` node process (call `.joined()` on it to wait for its hello)."""
    return JsonProcess([sys.executable, "-m", "ftis_swarm.bench.swarm_worker", cfg.model_dump_json()], log=log)


def _start_swarm(n: int, base: SwarmConfig, logs: Path) -> list[JsonProcess]:
    workers = [start_worker(base, log=logs / "node0.log")]
    try:
        workers[0].joined()
        peers = workers[0].maddrs
        rest = [start_worker(base.model_copy(update={"peers": peers}), log=logs / f"node{i}.log") for i in range(1, n)]
        workers.extend(rest)
        for worker in rest:
            worker.joined()
    except BaseException:
        for worker in workers:
            worker.kill()
        raise
    return workers


def _round(workers: list[JsonProcess], *, size: int, count: int, timeout: float) -> tuple[list, list[dict]]:
    start_at = time.time() + 1.0
    expect = count * (len(workers) - 1)
    for worker in workers:
        worker.send({"op": "round", "size": size, "count": count, "expect": expect, "start_at": start_at,
                     "timeout": timeout})
    answers = [worker.read() for worker in workers]
    return [a["published"] for a in answers], [a["arrivals"] for a in answers]


def _figures(n: int, label: str, published: list, arrivals: list[dict]) -> SwarmBenchRow:
    latencies, last_arrivals, publish_s, first_start, ok = [], [], [], float("inf"), 0
    for publisher, items in enumerate(published):
        for group_id, started, success, seconds, reason in items:
            if not success:
                logger.warning("a publish failed: %s", reason)
                continue
            ok += 1
            publish_s.append(seconds)
            first_start = min(first_start, started)
            seen = [arrivals[j].get(group_id) for j in range(n) if j != publisher]
            if all(t is not None for t in seen):
                latencies.append(max(seen) - started)
                last_arrivals.append(max(seen))
    nan = float("nan")
    return SwarmBenchRow(
        nodes=n, group=label, published=ok, complete=len(latencies),
        publish_p50_s=float(np.percentile(publish_s, 50)) if publish_s else nan,
        p50_s=float(np.percentile(latencies, 50)) if latencies else nan,
        p95_s=float(np.percentile(latencies, 95)) if latencies else nan,
        groups_per_s=len(latencies) / (max(last_arrivals) - first_start) if latencies else 0.0,
    )


def run_swarm_bench(node_counts: list[int], *, groups_per_node: int, poll_interval: float,
                    round_timeout: float = 120.0) -> list[SwarmBenchRow]:
    """Measures every (N, group size) pair; worker processes never outlive this call."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="ftis-bench-swarm-") as tmp:
        for n in node_counts:
            base = SwarmConfig(host="127.0.0.1", run_id=f"bench-{n}", poll_interval=poll_interval)
            workers = _start_swarm(n, base, Path(tmp))
            try:
                _round(workers, size=_WARMUP_SIZE, count=1, timeout=round_timeout)
                for label, size in GROUP_SIZES.items():
                    published, arrivals = _round(workers, size=size, count=groups_per_node, timeout=round_timeout)
                    rows.append(_figures(n, label, published, arrivals))
                    logger.info("N=%d %s: %s", n, label, rows[-1])
                for worker in workers:
                    worker.send({"op": "quit"})
                for worker in workers:
                    worker.read()
            finally:
                for worker in workers:
                    worker.kill()
    return rows


def format_table(rows: list[SwarmBenchRow], *, poll_interval: float) -> str:
    lines = [
        f"swarm on 127.0.0.1, publish-to-visible-at-every-peer (poll interval {poll_interval:g} s)",
        f"{'nodes':>5} {'group':>6} {'published':>9} {'complete':>8} {'publish p50 s':>13} "
        f"{'visible p50 s':>13} {'visible p95 s':>13} {'groups/s':>9}",
    ]
    for r in rows:
        lines.append(f"{r.nodes:>5} {r.group:>6} {r.published:>9} {r.complete:>8} {r.publish_p50_s:>13.2f} "
                     f"{r.p50_s:>13.2f} {r.p95_s:>13.2f} {r.groups_per_s:>9.1f}")
    return "\n".join(lines)


def rows_as_json(rows: list[SwarmBenchRow], *, poll_interval: float, groups_per_node: int,
                 extra: Optional[dict] = None) -> str:
    return json.dumps({"bench": "swarm", "poll_interval": poll_interval, "groups_per_node": groups_per_node,
                       "rows": [asdict(r) for r in rows], **(extra or {})}, indent=2)
