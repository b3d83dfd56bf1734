"""`ftis-node bench hostile --phase identities`: what identities cost, and a crowd of them from one origin.

Two figures, both at the run's puzzle (the default `PuzzleConfig()` unless the environment
sets `FTIS_SWARM__PUZZLE__*`, as the tests do), in one run:

1. Cost: the hostile peer makes `crowd` identities, each an RSA key (the baseline: what an
   identity cost before the puzzle) and its puzzle, and reports the CPU seconds of each
   (`time.process_time` of its process, on this machine's shared cores); the bench prints
   the mean, the slowest, the ratio to the RSA key, and the mean times 1,000.
2. Crowd: a bootstrap peer and `honest` swarm workers, each on a loopback address of its own
   (127.0.1.1, 127.0.2.1, ...: separate origins), and the crowd on 127.0.9.1 (one origin):
   `processes` hostile peers (each a requesting peer of its own, its share of the
   identities with it). The crowd floods `pointers` pointers spread over its identities
   (valid records, puzzles solved, bodies never served) while the honest nodes exchange
   groups; then each honest node reports the records it holds for others, by origin. The
   crowd's share of a node's storage is held_from_crowd / max_stored_records (and of what
   it holds, / held); the quota it should stay within is `max_records_per_origin /
   max_stored_records`, against what the per-identity quotas alone would let it store
   (`max_records_per_peer` per requesting peer and per identity, at most the storage).

The crowd's share of updates (the strangers' draw by origin, `peers/draw.py`) is measured by
`bench attacks`, its standing part (a crowd of one origin against a newcomer of another);
this phase does not report it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable

from ftis_swarm.config import PuzzleConfig, SwarmConfig
from ftis_swarm.lab.bench.hostile import _Ledger
from ftis_swarm.lab.bench.swarm import JsonProcess, start_worker
from ftis_swarm.lab.bench.swarm_worker import TOKENIZER_FP, VOCAB_SIZE
from ftis_swarm.ops.testnet import start_bootstrap, stop

CROWD_HOST = "127.0.9.1"
CROWD_ORIGIN = "127.0.9.0/24"


@dataclasses.dataclass(frozen=True)
class IdentityBench:
    puzzle: dict
    """The puzzle settings (the default's)."""
    rsa_cpu_s: list[float]
    """CPU seconds of each crowd identity's RSA key (the baseline)."""
    puzzle_cpu_s: list[float]
    """CPU seconds of each crowd identity's puzzle."""
    tries: list[int]
    crowd: int
    processes: int
    """Requesting peers (hostile processes) the crowd's identities are spread over."""
    honest: int
    pointers_sent: int
    held: list[int]
    """Records each honest node held for others at the end."""
    held_from_crowd: list[int]
    max_records_per_origin: int
    max_records_per_peer: int
    max_stored_records: int
    honest_published: int
    honest_delivered: int
    """Honest groups of the crowd phase that reached every other honest node."""
    rounds: int

    def as_dict(self) -> dict:
        return {"bench": "hostile-identities", **dataclasses.asdict(self)}


def _start(tmp: Path, cfg: SwarmConfig, *, honest: int, crowd: int,
           processes: int) -> tuple[subprocess.Popen, dict[str, JsonProcess], str]:
    puzzle_env = {f"FTIS_SWARM__PUZZLE__{k.upper()}": str(v) for k, v in cfg.puzzle.model_dump().items()}
    boot, maddrs = start_bootstrap(tmp, env=dict(os.environ, **puzzle_env))  # on 127.0.1.1
    cfg = cfg.replace(transport={"peers": maddrs})
    roles: dict[str, JsonProcess] = {}
    try:
        for i in range(honest):
            roles[f"node{i}"] = start_worker(cfg.replace(transport={"host": f"127.0.{i + 2}.1"}),
                                             log=tmp / f"node{i}.log")
        for j in range(processes):
            records = cfg.records
            settings = dict(peers=cfg.transport.peers, run_id=cfg.run_id, ttl=records.ttl,
                            max_clock_skew=records.max_clock_skew, window=records.window,
                            member_shards=records.member_shards, max_bytes=cfg.wire.max_bytes,
                            tokenizer_fp=TOKENIZER_FP, vocab_size=VOCAB_SIZE, identities=_share(crowd, processes, j),
                            puzzle=cfg.puzzle.model_dump(), host=CROWD_HOST)
            roles[f"crowd{j}"] = JsonProcess([sys.executable, "-m", "ftis_swarm.lab.hostile.peer",
                                              json.dumps(settings)], log=tmp / f"crowd{j}.log")
        for role in [f"node{i}" for i in range(honest)] + [f"crowd{j}" for j in range(processes)]:
            roles[role].joined()
    except BaseException:
        for proc in roles.values():
            proc.kill()
        stop(boot)
        raise
    return boot, roles, maddrs[0].rsplit("/p2p/", 1)[-1]


def _share(total: int, parts: int, j: int) -> int:
    return total // parts + (j < total % parts)


def run_identity_bench(*, swarm: SwarmConfig, crowd: int, processes: int, honest: int, pointers: int, rounds: int,
                       deadline: float, progress: Callable[[str], None] = lambda s: None) -> IdentityBench:
    """Makes the crowd (its puzzles at `swarm.puzzle`), then floods; no process outlives this call."""
    cfg = swarm.replace(records={"ttl": 600.0}, fetch={"poll_interval": 0.5}).model_copy(
        update={"run_id": "bench-identities"})
    with tempfile.TemporaryDirectory(prefix="ftis-bench-identities-") as tmp:
        progress(f"{crowd} identities at the run's puzzle (the crowd), {honest} honest nodes")
        boot, roles, boot_id = _start(Path(tmp), cfg, honest=honest, crowd=crowd, processes=processes)
        try:
            crowds = [roles[f"crowd{j}"] for j in range(processes)]
            costs = [c for proc in crowds for c in proc.hello["identity_costs"]]
            ledger = _Ledger([roles[f"node{i}"] for i in range(honest)], bootstrap=boot_id)
            progress(f"the crowd floods {pointers} pointers from {processes} requesting peers")
            for j, proc in enumerate(crowds):
                proc.request({"op": "flood", "attack": "pointers", "n": _share(pointers, processes, j)})
            n = 0
            while n < rounds or not all(proc.request({"op": "done"})["done"] for proc in crowds):
                ledger.exchange(count=2, deadline=deadline)
                n += 1
                if n >= 10 * rounds:
                    break
            ledger.exchange(count=0, deadline=deadline)
            sent = sum(proc.request({"op": "results"})["pointers"].get("sent", 0) for proc in crowds)
            stored = [roles[f"node{i}"].request({"op": "stored"}) for i in range(honest)]
        finally:
            for proc in roles.values():
                proc.kill()
            stop(boot)
    return IdentityBench(
        puzzle=cfg.puzzle.model_dump(), rsa_cpu_s=[c["rsa_cpu_s"] for c in costs],
        puzzle_cpu_s=[c["puzzle_cpu_s"] for c in costs], tries=[c["tries"] for c in costs], crowd=crowd,
        processes=processes,
        honest=honest, pointers_sent=sent, held=[s["held"] for s in stored],
        held_from_crowd=[s["by_origin"].get(CROWD_ORIGIN, 0) for s in stored],
        max_records_per_origin=cfg.records.max_records_per_origin,
        max_records_per_peer=cfg.records.max_records_per_peer,
        max_stored_records=cfg.records.max_stored_records, honest_published=len(ledger.published),
        honest_delivered=ledger.delivered(set(ledger.published)), rounds=n)


def format_identities(bench: IdentityBench) -> str:
    p = PuzzleConfig(**bench.puzzle)
    mean_puzzle, mean_rsa = statistics.fmean(bench.puzzle_cpu_s), statistics.fmean(bench.rsa_cpu_s)
    per_try = sum(bench.puzzle_cpu_s) / sum(bench.tries)
    quota = bench.max_records_per_origin / bench.max_stored_records
    by_identity = min(1.0, bench.processes * bench.max_records_per_peer / bench.max_stored_records)
    lines = [
        f"identities at the run's puzzle (scrypt N=2^{p.log2_n}, r={p.r}, {p.bits} bits), "
        f"{len(bench.puzzle_cpu_s)} made, CPU s on this machine:",
        f"  RSA key (the baseline)  mean {mean_rsa:7.3f}",
        f"  puzzle                  mean {mean_puzzle:7.3f}  slowest {max(bench.puzzle_cpu_s):7.3f}  "
        f"({statistics.fmean(bench.tries):.0f} tries on average, {per_try * 1000:.0f} ms a try = one verification)",
        f"  identity / RSA key      {(mean_puzzle + mean_rsa) / mean_rsa:7.0f}x",
        f"  {len(bench.puzzle_cpu_s)} identities           {sum(bench.puzzle_cpu_s) + sum(bench.rsa_cpu_s):7.1f}",
        f"  1,000 (extrapolated)    {1000 * (mean_puzzle + mean_rsa):7.0f}  "
        f"(= {1000 * (mean_puzzle + mean_rsa) / 3600:.1f} core-hours)",
        f"a crowd of {bench.crowd} identities from one origin ({CROWD_ORIGIN}), {bench.processes} requesting peers, "
        f"against {bench.honest} honest nodes of their own origins: {bench.pointers_sent} records sent",
    ]
    for i, (held, crowd) in enumerate(zip(bench.held, bench.held_from_crowd)):
        lines.append(f"  node{i}: holds {held} records (its own among them), {crowd} of them the crowd's: "
                     f"{crowd / bench.max_stored_records:.1%} of its storage, "
                     f"{crowd / max(held, 1):.1%} of what it holds")
    lines += [
        f"  one origin's quota: {bench.max_records_per_origin}/{bench.max_stored_records} = {quota:.1%} of storage; "
        f"the per-peer quotas alone would allow {by_identity:.1%}",
        f"  honest groups delivered to every other honest node meanwhile: "
        f"{bench.honest_delivered}/{bench.honest_published} in {bench.rounds} rounds",
        "  the crowd's share of updates: see `bench attacks` (its standing part, by origin)",
    ]
    return "\n".join(lines)
