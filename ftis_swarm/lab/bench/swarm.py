"""`ftis-node bench swarm`: publish-to-visible latency, throughput and traffic of N nodes on loopback.

For each swarm size N and transport (`gossip`: pointers pushed on the run's topic, the DHT
read every `dht_poll_interval` as the fallback; `poll`: gossip off, the DHT read every
`poll_interval`, the layout before push), N worker processes (`swarm_worker`) join through
the first one. After one unreported warm-up round (first connections between peers), each
size of group (32 KiB and 1 MiB) gets one round: every node publishes `groups` groups back
to back from a common start time while gathering. A group's latency is the time from the
start of its publish until the last other node accepted its body (checked and decoded);
groups/s is the number of groups that reached every peer over the time from the first
publish to the last arrival. Traffic is what each peer received over the round, which
lasts `round_seconds` at least: gossip messages and DHT calls, their bytes (records and
replies), and body bytes. All processes share this machine's clock and CPU cores.
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

from ftis_swarm.config import FetchConfig, GossipConfig, LedgerConfig, SwarmConfig, TransportConfig

logger = logging.getLogger(__name__)

GROUP_SIZES = {"32KiB": 32 * 1024, "1MiB": 1024 * 1024}
TRANSPORTS = ("gossip", "poll")
_WARMUP_SIZE = 4 * 1024


@dataclass(frozen=True)
class SwarmBenchRow:
    """The figures of one (swarm size, group size) round."""

    nodes: int
    transport: str
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
    messages_per_peer: float
    """Gossip messages and DHT calls one peer received or made in the round (mean over peers)."""
    kib_per_peer: float
    """KiB of gossip messages, DHT records and DHT replies per peer in the round."""
    body_mib_per_peer: float
    """MiB of bodies one peer fetched in the round."""


class JsonProcess:
    """A child process speaking JSON lines; killed with its children (its own process group) by `kill`."""

    def __init__(self, argv: list[str], *, log: Path, env: Optional[dict[str, str]] = None):
        self.log = log
        with open(log, "w") as stderr:
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                                         text=True, start_new_session=True, env=env)
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


def start_worker(cfg: SwarmConfig, *, log: Path, ledger: Optional[LedgerConfig] = None) -> JsonProcess:
    """A `swarm_worker` node process (call `.joined()` on it to wait for its hello); with `ledger`, it keeps one."""
    extra = [ledger.model_dump_json()] if ledger is not None else []
    return JsonProcess([sys.executable, "-m", "ftis_swarm.lab.bench.swarm_worker", cfg.model_dump_json(), *extra],
                       log=log)


def _start_swarm(n: int, base: SwarmConfig, logs: Path) -> list[JsonProcess]:
    workers = [start_worker(base, log=logs / "node0.log")]
    try:
        workers[0].joined()
        peers = workers[0].maddrs
        rest = [start_worker(base.replace(transport={"peers": peers}), log=logs / f"node{i}.log") for i in range(1, n)]
        workers.extend(rest)
        for worker in rest:
            worker.joined()
    except BaseException:
        for worker in workers:
            worker.kill()
        raise
    return workers


def _round(workers: list[JsonProcess], *, number: int, size: int, count: int, timeout: float,
           min_seconds: float) -> list[dict]:
    start_at = time.time() + 1.0
    expect = count * (len(workers) - 1)
    for worker in workers:
        worker.send({"op": "round", "round": number, "size": size, "count": count, "expect": expect,
                     "start_at": start_at, "timeout": timeout, "min_seconds": min_seconds})
    return [worker.read() for worker in workers]


def _figures(n: int, transport: str, label: str, answers: list[dict]) -> SwarmBenchRow:
    published, arrivals = [a["published"] for a in answers], [a["arrivals"] for a in answers]
    traffic = {name: float(np.mean([a["traffic"][name] for a in answers])) for name in answers[0]["traffic"]}
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
        nodes=n, transport=transport, group=label, published=ok, complete=len(latencies),
        publish_p50_s=float(np.percentile(publish_s, 50)) if publish_s else nan,
        p50_s=float(np.percentile(latencies, 50)) if latencies else nan,
        p95_s=float(np.percentile(latencies, 95)) if latencies else nan,
        groups_per_s=len(latencies) / (max(last_arrivals) - first_start) if latencies else 0.0,
        messages_per_peer=traffic["gossip_received"] + traffic["dht_requests"],
        kib_per_peer=(traffic["gossip_bytes"] + traffic["dht_bytes"]) / 1024,
        body_mib_per_peer=traffic["fetched_bytes"] / (1 << 20),
    )


def run_swarm_bench(node_counts: list[int], *, groups_per_node: int, poll_interval: float,
                    transports: tuple[str, ...] = TRANSPORTS, round_seconds: float = 5.0,
                    round_timeout: float = 120.0) -> list[SwarmBenchRow]:
    """Measures every (N, transport, group size); worker processes never outlive this call."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="ftis-bench-swarm-") as tmp:
        for n in node_counts:
            for transport in transports:
                rows += _measure(n, transport, Path(tmp), groups_per_node=groups_per_node,
                                 poll_interval=poll_interval, round_seconds=round_seconds,
                                 round_timeout=round_timeout)
    return rows


def _measure(n: int, transport: str, logs: Path, *, groups_per_node: int, poll_interval: float,
             round_seconds: float, round_timeout: float) -> list[SwarmBenchRow]:
    base = SwarmConfig(run_id=f"bench-{n}-{transport}", transport=TransportConfig(host="127.0.0.1"),
                       fetch=FetchConfig(poll_interval=poll_interval),
                       gossip=GossipConfig(enabled=transport == "gossip"))
    workers = _start_swarm(n, base, logs)
    rows = []
    try:
        _round(workers, number=0, size=_WARMUP_SIZE, count=1, timeout=round_timeout, min_seconds=0.0)
        for number, (label, size) in enumerate(GROUP_SIZES.items(), start=1):
            answers = _round(workers, number=number, size=size, count=groups_per_node, timeout=round_timeout,
                             min_seconds=round_seconds)
            rows.append(_figures(n, transport, label, answers))
            logger.info("N=%d %s %s: %s", n, transport, label, rows[-1])
        for worker in workers:
            worker.send({"op": "quit"})
        for worker in workers:
            worker.read()
    finally:
        for worker in workers:
            worker.kill()
    return rows


def format_table(rows: list[SwarmBenchRow], *, poll_interval: float, round_seconds: float) -> str:
    """One line per row; `vs poll` is the visible p50 over the poll row of the same nodes and group."""
    poll = {(r.nodes, r.group): r.p50_s for r in rows if r.transport == "poll"}
    lines = [
        f"swarm on 127.0.0.1: publish-to-visible at every peer (ms); per peer per round of {round_seconds:g} s "
        f"(poll interval {poll_interval:g} s; gossip reads the DHT every {FetchConfig().dht_poll_interval:g} s)",
        f"{'nodes':>5} {'transport':>9} {'group':>6} {'published':>9} {'complete':>8} {'publish p50':>11} "
        f"{'visible p50':>11} {'visible p95':>11} {'vs poll':>7} {'groups/s':>8} {'msgs':>6} {'KiB':>7} "
        f"{'body MiB':>8}",
    ]
    for r in rows:
        ratio = r.p50_s / poll[(r.nodes, r.group)] if (r.nodes, r.group) in poll else float("nan")
        lines.append(f"{r.nodes:>5} {r.transport:>9} {r.group:>6} {r.published:>9} {r.complete:>8} "
                     f"{1e3 * r.publish_p50_s:>11.1f} {1e3 * r.p50_s:>11.1f} {1e3 * r.p95_s:>11.1f} {ratio:>7.3f} "
                     f"{r.groups_per_s:>8.1f} {r.messages_per_peer:>6.0f} {r.kib_per_peer:>7.1f} "
                     f"{r.body_mib_per_peer:>8.2f}")
    return "\n".join(lines)


def rows_as_json(rows: list[SwarmBenchRow], *, poll_interval: float, groups_per_node: int, round_seconds: float,
                 extra: Optional[dict] = None) -> str:
    return json.dumps({"bench": "swarm", "poll_interval": poll_interval, "groups_per_node": groups_per_node,
                       "round_seconds": round_seconds, "rows": [asdict(r) for r in rows], **(extra or {})}, indent=2)
