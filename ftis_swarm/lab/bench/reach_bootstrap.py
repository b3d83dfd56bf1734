"""`ftis-node bench reach --phase bootstrap`: no single point, on loopback (no root needed).

`nodes` workers (`swarm_worker`, each on its own 127.0.N.1) start at once and join through
one bootstrap (the real `ftis-node bootstrap` CLI). Round 0 measures whether they formed
one swarm: for each node, the seconds from the round's start until it had every other
node's groups (None: it never had them all within `timeout`). The bootstrap is then
SIGKILLed and `rounds` more rounds run: per node, the rounds in which every other node's
groups arrived. Two newcomers join after that, one through a live node's address alone,
one with the dead bootstrap first in its `peers` and a live node second; a last round
counts, per node of all of them, whether every other's groups arrived.
"""

from __future__ import annotations

import dataclasses
import logging
import tempfile
import time
from pathlib import Path
from typing import Callable, Optional

from ftis_swarm.config import SwarmConfig
from ftis_swarm.lab.bench.swarm import JsonProcess, start_worker
from ftis_swarm.ops.testnet import loopback_host, start_bootstrap

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class BootstrapPhase:
    nodes: int
    rounds: int
    joined_s: float
    """Seconds from starting the nodes (all at once) until the last said it joined."""
    see_all_s: list[Optional[float]]
    """Per node: seconds from round 0's start until every other node's groups arrived (None: never)."""
    rounds_after_kill: list[int]
    """Per node: rounds after the bootstrap's SIGKILL in which every other node's groups arrived."""
    newcomer_joined_s: dict[str, float]
    """{"through a live node" | "dead bootstrap first": seconds from its start to its hello}."""
    last_round_complete: list[bool]
    """Per node, newcomers last: whether every other node's groups arrived in the round after they joined."""

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def _round(workers: list[JsonProcess], number: int, *, groups: int, size: int, timeout: float) -> list[Optional[float]]:
    """Per worker: seconds from the round's start until every other worker's groups arrived (None: not all
    within `timeout`).

    Each worker gathers for the whole `timeout`: a worker stops early once it has `expect` groups,
    and a newcomer's first gathers also hand it the groups published before it joined (still in
    their window), which would end its round before this round's groups came.
    """
    start_at = time.time() + 0.5
    expect = groups * (len(workers) - 1)
    for worker in workers:
        worker.send({"op": "round", "round": number, "size": size, "count": groups, "expect": 1 << 30,
                     "start_at": start_at, "timeout": timeout, "min_seconds": 0.0})
    answers = [worker.read() for worker in workers]
    sent = [{gid for gid, _, ok, *_ in a["published"] if ok} for a in answers]
    seen: list[Optional[float]] = []
    for i, answer in enumerate(answers):
        wanted = set().union(*(s for j, s in enumerate(sent) if j != i))
        arrived = answer["arrivals"]
        complete = len(wanted) == expect and wanted <= arrived.keys()
        seen.append(max(arrived[g] for g in wanted) - start_at if complete else None)
        if not complete:
            missing = [j for j, s in enumerate(sent) if j != i and not s <= arrived.keys()]
            logger.warning("round %d: node %d lacks the groups of nodes %s (published %s)", number, i, missing,
                           [len(s) for s in sent])
    return seen


def run_bootstrap_phase(*, nodes: int, rounds: int, groups: int, size: int, timeout: float,
                        progress: Callable[[str], None]) -> BootstrapPhase:
    with tempfile.TemporaryDirectory(prefix="ftis-reach-boot-") as tmp:
        return _run(Path(tmp), nodes=nodes, rounds=rounds, groups=groups, size=size, timeout=timeout,
                    progress=progress)


def _run(logs: Path, *, nodes: int, rounds: int, groups: int, size: int, timeout: float,
         progress: Callable[[str], None]) -> BootstrapPhase:
    boot, peers = start_bootstrap(logs, timeout=90.0)
    workers: list[JsonProcess] = []
    try:
        started = time.monotonic()
        base = SwarmConfig.model_validate({"run_id": "reach-boot", "transport": {"peers": peers},
                                           "records": {"window": 5.0}, "fetch": {"poll_interval": 0.25}})
        workers = [start_worker(base.replace(transport={"host": loopback_host(i)}), log=logs / f"node{i}.log")
                   for i in range(nodes)]
        for worker in workers:
            worker.joined()
        joined_s = time.monotonic() - started
        progress(f"{nodes} nodes joined through one bootstrap in {joined_s:.1f} s; round 0")
        see_all = _round(workers, 0, groups=groups, size=size, timeout=timeout)
        boot.kill()
        boot.wait()
        progress(f"bootstrap killed; {rounds} rounds without it")
        after = [0] * nodes
        for number in range(1, rounds + 1):
            for i, seen in enumerate(_round(workers, number, groups=groups, size=size, timeout=timeout)):
                after[i] += seen is not None
        newcomer_peers = {"through a live node": workers[1].maddrs[:1],
                          "dead bootstrap first": [*peers, *workers[2].maddrs[:1]]}
        newcomer_s = {}
        for k, (label, first) in enumerate(newcomer_peers.items()):
            began = time.monotonic()
            cfg = base.replace(transport={"peers": first, "host": loopback_host(nodes + k)})
            workers.append(start_worker(cfg, log=logs / f"newcomer{k}.log").joined())
            newcomer_s[label] = time.monotonic() - began
        progress("newcomers joined; the last round")
        last = _round(workers, rounds + 1, groups=groups, size=size, timeout=timeout)
    finally:
        for worker in workers:
            worker.kill()
        boot.kill()
        boot.wait()
    return BootstrapPhase(nodes=nodes, rounds=rounds, joined_s=joined_s, see_all_s=see_all, rounds_after_kill=after,
                          newcomer_joined_s=newcomer_s, last_round_complete=[s is not None for s in last])


def format_bootstrap_phase(phase: BootstrapPhase) -> str:
    seen = ", ".join(f"{s:.2f}" if s is not None else "never" for s in phase.see_all_s)
    lines = [f"no single point, on loopback: {phase.nodes} nodes started at once through one bootstrap",
             f"joined (all)           {phase.joined_s:.1f} s",
             f"saw every other, s     {seen}  (from round 0's start; one swarm when none is never)",
             f"bootstrap SIGKILLed; rounds with every other node's groups, per node: "
             f"{phase.rounds_after_kill} of {phase.rounds}"]
    for label, seconds in phase.newcomer_joined_s.items():
        lines.append(f"newcomer, {label:<22} joined in {seconds:.1f} s")
    lines.append(f"round after they joined: {sum(phase.last_round_complete)} of {len(phase.last_round_complete)} "
                 f"nodes had every other node's groups")
    return "\n".join(lines)
