"""`ftis-node bench e2e`: what joining a swarm costs a node, against the same node alone.

Two runs of the real `ftis-node join` processes on 127.0.0.1:

- **solo**: one node pinned to one core, no peers, generating `2P` groups a round and
  training on all of them;
- **swarm**: a bootstrap peer and two nodes, each pinned to its own core, each generating `P`
  groups a round and training on its own `P` plus the peer's (up to `P`).

Both nodes of the swarm thus train on as many groups as the solo node. The figure is the
ratio of median round times (the first round, with its one-off costs, left out), and the
bytes each swarm node sends (bodies served) and receives (bodies fetched) per round.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ftis_swarm.metrics import read_jsonl
from ftis_swarm.ops.testnet import NodeSpec, node_command, start_bootstrap, start_node, stop


@dataclass
class E2EFigures:
    model: str
    rounds: int
    groups_per_node: int
    group_size: int
    solo_round_s: float = 0.0
    swarm_round_s: list[float] = field(default_factory=list)
    ratio: float = 0.0
    solo_split: dict[str, float] = field(default_factory=dict)
    swarm_split: list[dict[str, float]] = field(default_factory=list)
    sent_bytes_per_round: list[float] = field(default_factory=list)
    received_bytes_per_round: list[float] = field(default_factory=list)
    peer_groups_per_round: list[float] = field(default_factory=list)

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def _median(rows: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rows[1:])


def _per_round(rows: list[dict], key: str) -> float:
    vals = [r.get(key, 0) for r in rows]
    return (vals[-1] - vals[0]) / max(1, len(vals) - 1)


def _flags(model: str, *, prompts: int, G: int, tokens: int, rounds: int, deadline: float) -> list[str]:
    return ["--task", "arith", "--prompts-per-round", str(prompts), "--group-size", str(G), "--max-new-tokens",
            str(tokens), "--temperature", "0.7", "--round-deadline", str(deadline), "--checkpoint-every",
            str(rounds), "--threads", "1", "--lr", "1e-6",
            "--set", "eval_every=0"]  # the round's cost alone: no held-out evaluation, no round-0 line


def _wait(procs: list, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for p in procs:
        p.proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        if p.proc.returncode != 0:
            raise RuntimeError(f"node in {p.run_dir} exited with status {p.proc.returncode}; see its node.log")


def run_e2e(*, workdir: Path, model: str = "smollm2-135m", prompts: int = 2, G: int = 4, tokens: int = 24,
            rounds: int = 4, deadline: float = 1.0, timeout: float = 3600.0,
            progress: Callable[[str], None] = lambda s: None) -> E2EFigures:
    if rounds < 2:
        raise ValueError("the e2e bench needs at least 2 rounds (the first is left out)")
    fig = E2EFigures(model=model, rounds=rounds, groups_per_node=prompts, group_size=G)
    spec = NodeSpec("e2e", model)

    progress("solo: one node on core 0, 2P groups a round")
    solo_dir = workdir / "solo"
    # Alone, a node has nobody to wait for: its gather deadline is next to nothing.
    flags = _flags(model, prompts=2 * prompts, G=G, tokens=tokens, rounds=rounds, deadline=0.01)
    cmd = node_command(spec, index=0, run_dir=solo_dir, peers=[], run_id="e2e-solo", rounds=rounds,
                       flags=tuple(flags))
    solo = start_node(cmd, solo_dir, spec, cpus={0})
    try:
        _wait([solo], timeout)
    finally:
        stop(solo.proc)
    rows = list(read_jsonl(solo_dir / "metrics.jsonl"))
    fig.solo_round_s = _median(rows, "time_round")
    fig.solo_split = {k: _median(rows, k) for k in ("time_generate", "time_gather", "time_learn")}

    progress("swarm: bootstrap + two nodes on cores 0 and 1, P groups a round each")
    boot, maddrs = start_bootstrap(workdir)
    procs = []
    try:
        flags = _flags(model, prompts=prompts, G=G, tokens=tokens, rounds=rounds, deadline=deadline)
        for i in range(2):
            d = workdir / f"swarm-{i}"
            cmd = node_command(spec, index=i, run_dir=d, peers=maddrs, run_id="e2e-swarm", rounds=rounds,
                               flags=tuple(flags))
            procs.append(start_node(cmd, d, spec, cpus={i}))
        _wait(procs, timeout)
    finally:
        for p in procs:
            stop(p.proc)
        stop(boot)
    for p in procs:
        rows = list(read_jsonl(p.run_dir / "metrics.jsonl"))
        fig.swarm_round_s.append(_median(rows, "time_round"))
        fig.swarm_split.append({k: _median(rows, k) for k in ("time_generate", "time_gather", "time_learn")})
        fig.sent_bytes_per_round.append(_per_round(rows, "swarm_served_bytes"))
        fig.received_bytes_per_round.append(_per_round(rows, "swarm_fetched_bytes"))
        fig.peer_groups_per_round.append(statistics.mean(r.get("peer_groups", 0) for r in rows[1:]))
    fig.ratio = statistics.mean(fig.swarm_round_s) / fig.solo_round_s
    return fig


def format_e2e(f: E2EFigures) -> str:
    lines = [f"model {f.model}; {f.rounds} rounds (median of rounds 2..{f.rounds}); G = {f.group_size}",
             f"solo  (2x{f.groups_per_node} own groups, 1 core)  round {f.solo_round_s:.2f} s   "
             f"gen/gather/learn {_split(f.solo_split)}"]
    for i, (t, split) in enumerate(zip(f.swarm_round_s, f.swarm_split)):
        lines.append(f"swarm node {i} ({f.groups_per_node} own + peer's, 1 core)  round {t:.2f} s   "
                     f"gen/gather/learn {_split(split)}   peer groups/round {f.peer_groups_per_round[i]:.2f}   "
                     f"sent {f.sent_bytes_per_round[i] / 1024:.1f} KiB/round, received "
                     f"{f.received_bytes_per_round[i] / 1024:.1f} KiB/round")
    lines.append(f"swarm / solo round time: {f.ratio:.3f}")
    return "\n".join(lines)


def _split(d: dict[str, float]) -> str:
    return "/".join(f"{d[k]:.2f}" for k in ("time_generate", "time_gather", "time_learn"))
