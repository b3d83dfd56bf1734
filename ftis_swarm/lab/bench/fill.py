"""A storage fill by many origins: honest publishes, storage held and resident memory before, during and after.

`run_fill` starts a bootstrap peer (`ftis-node bootstrap`), `nodes` honest `swarm_worker`
nodes and `fillers` hostile processes (`ftis_swarm.lab.hostile.peer`), each on a loopback
address of its own (127.0.N.1: its own network origin, as p2pd reports it). The fillers
are DHT peers that hold nobody's records (`holds_nothing`), so an honest publish succeeds
only when the honest peers took it: every node asks every peer (`num_replicas` 64) and
needs every other node (`min_replicas`; the bootstrap holds records too, but is not counted on). Phases, each
of "publish one group, gather once" rounds on every node in step:

- `before`: `rounds` rounds, no attack (the node's no-attack figures);
- `fill`: every filler stores `per_filler` valid pointers of its own identity (and the
  membership records claiming them) on every peer it finds (`Floods.fill`: owner =
  requester, the rank of an honest peer storing its own), for `rounds` rounds at least and
  until every filler is done;
- `after`: `rounds` more rounds, the fill's records still held until they expire.

Per phase: honest publishes and how many succeeded (with the failures' reasons), the most
records and bytes any honest node (and the bootstrap) held for others and the most one
filler origin held there, and each process's resident memory (peak during the phase,
`VmHWM`, and at its end) against its memory at the end of `before`.

`python -m ftis_swarm.lab.bench.fill [fillers] [per_filler] [log dir]` runs it at the defaults
(those of a node's `records` section) and prints the figures (`docs/benchmarks.md`); the
processes' logs stay in the log directory (a new temporary one by default).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

from ftis_swarm.config import FetchConfig, RecordsConfig, SwarmConfig, TransportConfig
from ftis_swarm.lab.bench.swarm import JsonProcess, start_worker
from ftis_swarm.lab.bench.swarm_worker import TOKENIZER_FP, VOCAB_SIZE
from ftis_swarm.metrics.procstat import reset_peaks, status_mb

GROUP_BYTES = 8 * 1024
_REFUSALS = {"storage_full", "key_full", "owner_quota", "requester_quota", "origin_quota", "puzzle_busy"}


@dataclasses.dataclass(frozen=True)
class FillPhase:
    """The figures of one phase."""

    name: str
    rounds: int
    publishes: int
    """Honest publishes (one a node a round)."""
    ok: int
    """Of them, those that every other node took (pointer and membership record)."""
    failures: dict[str, int]
    """Failed publishes by the start of their reason."""
    held_max: int
    """The most records an honest process (node or bootstrap) held for others at the phase's end."""
    held_bytes_max: int
    """The most bytes such a process's stored records were charged at the phase's end."""
    crowd_origin_max: int
    """The most records one filler origin had stored on one honest node at the phase's end."""
    refusals: dict[str, int]
    """The nodes' storage refusals and `puzzle_busy` so far (cumulative, all nodes together, any requester)."""
    peak_mb: dict[str, float]
    """Each honest process's peak resident memory during the phase, MB (`VmHWM`)."""
    end_mb: dict[str, float]
    """Each honest process's resident memory at the phase's end, MB."""

    @property
    def ok_share(self) -> float:
        return self.ok / self.publishes if self.publishes else 0.0


@dataclasses.dataclass(frozen=True)
class FillBench:
    nodes: int
    fillers: int
    per_filler: int
    records: dict
    """The honest nodes' `records` section."""
    accepted: dict[str, int]
    """Fill records each honest node took, all fillers together."""
    phases: list[FillPhase]

    def as_dict(self) -> dict:
        return {"bench": "fill", **dataclasses.asdict(self)}


def fill_config(base: SwarmConfig, bootstrap: list[str], nodes: int) -> SwarmConfig:
    """The honest nodes' config: `base` asking every peer and needing every other node (the module docstring)."""
    return base.replace(transport={"peers": bootstrap}, records={"num_replicas": 64, "min_replicas": nodes - 1})


def run_fill(base: SwarmConfig, *, logs: Path, nodes: int = 3, fillers: int = 10, per_filler: int = 1900,
             rounds: int = 6, deadline: float = 2.0) -> FillBench:
    """Runs the bench (see the module docstring); `base` gives the run, the puzzle and the `records` section."""
    procs: dict[str, JsonProcess] = {}
    try:
        bootstrap = _bootstrap(base, logs, procs)
        cfg = fill_config(base, bootstrap, nodes)
        for i in range(nodes):
            procs[f"node{i}"] = start_worker(cfg.replace(transport={"host": f"127.0.{i + 2}.1"}),
                                             log=logs / f"node{i}.log")
        for i in range(nodes):
            procs[f"node{i}"].joined()
        crowd = _fillers(cfg, logs, fillers)
        procs.update({f"filler{i}": f for i, f in enumerate(crowd)})
        honest = {name: p.proc.pid for name, p in procs.items() if not name.startswith("filler")}
        workers = [procs[f"node{i}"] for i in range(nodes)]
        phases = [_phase("before", workers, crowd, honest, rounds=rounds, deadline=deadline)]
        for filler in crowd:
            answer = filler.request({"op": "flood", "attack": "fill", "n": per_filler})
            if answer != {"started": "fill"}:
                raise RuntimeError(f"a filler did not start its fill: {answer}")
        phases.append(_phase("fill", workers, crowd, honest, rounds=rounds, deadline=deadline, attack=True))
        accepted: dict[str, int] = {}
        for filler in crowd:
            for peer, n in filler.request({"op": "results"})["fill"]["accepted"].items():
                accepted[peer] = accepted.get(peer, 0) + n
        phases.append(_phase("after", workers, crowd, honest, rounds=rounds, deadline=deadline))
        names = {w.peer_id: f"node{i}" for i, w in enumerate(workers)}
        return FillBench(nodes=nodes, fillers=fillers, per_filler=per_filler, records=cfg.records.model_dump(),
                         accepted={names[p]: n for p, n in accepted.items() if p in names}, phases=phases)
    finally:
        for proc in procs.values():
            proc.kill()


def _bootstrap(base: SwarmConfig, logs: Path, procs: dict[str, JsonProcess]) -> list[str]:
    maddrs_file = logs / "bootstrap.maddrs"
    procs["bootstrap"] = JsonProcess([sys.executable, "-m", "ftis_swarm.cli", "bootstrap", "--host", "127.0.1.1",
                                      "--maddrs-file", str(maddrs_file), "--ttl", str(base.records.ttl),
                                      "--max-clock-skew", str(base.records.max_clock_skew)],
                                     log=logs / "bootstrap.log")
    stop_at = time.monotonic() + 120.0
    while not maddrs_file.exists():
        if time.monotonic() > stop_at or procs["bootstrap"].proc.poll() is not None:
            raise RuntimeError(f"the bootstrap peer did not start: {procs['bootstrap'].log.read_text()[-2000:]}")
        time.sleep(0.1)
    return maddrs_file.read_text().split()


def _fillers(cfg: SwarmConfig, logs: Path, n: int) -> list[JsonProcess]:
    records = cfg.records
    settings = dict(peers=cfg.transport.peers, run_id=cfg.run_id, ttl=records.ttl,
                    max_clock_skew=records.max_clock_skew, window=records.window, member_shards=records.member_shards,
                    max_bytes=cfg.wire.max_bytes, tokenizer_fp=TOKENIZER_FP, vocab_size=VOCAB_SIZE, identities=0,
                    body_servers=False, holds_nothing=True, puzzle=cfg.puzzle.model_dump())
    crowd = [JsonProcess([sys.executable, "-m", "ftis_swarm.lab.hostile.peer",
                          json.dumps({**settings, "host": f"127.0.{20 + i}.1"})], log=logs / f"filler{i}.log")
             for i in range(n)]
    for filler in crowd:
        filler.joined()
    return crowd


def _phase(name: str, workers: list[JsonProcess], crowd: list[JsonProcess], honest: dict[str, int], *,
           rounds: int, deadline: float, attack: bool = False) -> FillPhase:
    reset_peaks(honest)
    done, publishes, ok, failures = 0, 0, 0, {}
    while done < rounds or (attack and not all(f.request({"op": "done"})["done"] for f in crowd)):
        for worker in workers:
            worker.send({"op": "exchange", "size": GROUP_BYTES, "count": 1, "deadline": deadline})
        for worker in workers:
            for _, success, reason in worker.read()["published"]:
                publishes, ok = publishes + 1, ok + bool(success)
                if not success:
                    why = reason.split(",")[0][:60]
                    failures[why] = failures.get(why, 0) + 1
        done += 1
    crowd_ids = {f"127.0.{20 + i}.0/24" for i in range(len(crowd))}
    stored = [w.request({"op": "stored"}) for w in workers]
    counters = [w.request({"op": "counters"}) for w in workers]
    held = [(c["stored_records"], c["stored_bytes"]) for c in counters]
    refusals: dict[str, int] = {}
    for c in counters:
        for reason, n in [*c["faults"].items(), ("puzzle_busy", c.get("puzzle_busy", 0))]:
            if reason in _REFUSALS and n:
                refusals[reason] = refusals.get(reason, 0) + n
    return FillPhase(name=name, rounds=done, publishes=publishes, ok=ok, failures=failures, refusals=refusals,
                     held_max=max(h for h, _ in held), held_bytes_max=max(b for _, b in held),
                     crowd_origin_max=max([n for s in stored for o, n in s["by_origin"].items() if o in crowd_ids],
                                          default=0),
                     peak_mb={r: round(status_mb(pid, "VmHWM"), 1) for r, pid in honest.items()},
                     end_mb={r: round(status_mb(pid, "VmRSS"), 1) for r, pid in honest.items()})


def format_fill(bench: FillBench) -> str:
    """The bench's figures as a table, one line a phase."""
    r = bench.records
    lines = [f"fill: {bench.fillers} fillers (own origins) x {bench.per_filler} pointers against {bench.nodes} nodes; "
             f"max_stored_records={r['max_stored_records']} max_stored_bytes={r['max_stored_bytes']} "
             f"max_records_per_origin={r['max_records_per_origin']} storage_reserve={r['storage_reserve']}",
             f"fill records taken per node: {bench.accepted}",
             "phase   rounds  publishes ok     held  held MB  crowd/origin  peak MB (rss at end - before's)"]
    before = bench.phases[0].end_mb
    for p in bench.phases:
        mem = ", ".join(f"{k} {p.peak_mb[k]:.0f} ({p.end_mb[k] - before[k]:+.0f})" for k in p.peak_mb)
        lines.append(f"{p.name:<7} {p.rounds:>6}  {p.publishes:>9} {p.ok_share:>6.1%} {p.held_max:>6} "
                     f"{p.held_bytes_max / 2**20:>8.1f}  {p.crowd_origin_max:>12}  {mem}")
        if p.failures:
            lines.append(f"        failures: {p.failures}")
        lines.append(f"        refusals so far: {p.refusals}")
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    fillers, per_filler = (int(args[0]) if args else 10), (int(args[1]) if len(args) > 1 else 1900)
    base = SwarmConfig(run_id="bench-fill", transport=TransportConfig(host="127.0.0.1"),
                       records=RecordsConfig(ttl=120.0), fetch=FetchConfig(poll_interval=0.5))
    logs = Path(args[2]) if len(args) > 2 else Path(tempfile.mkdtemp(prefix="bench-fill-"))
    logs.mkdir(parents=True, exist_ok=True)
    bench = run_fill(base, logs=logs, fillers=fillers, per_filler=per_filler)
    sys.stdout.write(format_fill(bench) + "\n" + json.dumps(bench.as_dict()) + "\n")


if __name__ == "__main__":
    main()
