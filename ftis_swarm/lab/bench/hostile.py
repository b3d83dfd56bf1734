"""`ftis-node bench hostile`: a 3-node testnet under each attack of the hostile peer, one phase at a time.

A bootstrap peer (`ftis-node bootstrap`), three `swarm_worker` nodes and the hostile peer
(`ftis_swarm.lab.hostile.peer`: its own identity, identities that only sign, four bad body
servers) run as separate processes on loopback, the nodes and the hostile peer each on an
address of its own (127.0.N.1: its own network origin). Phase by phase (first a baseline with
no attack, then each attack alone) every node runs rounds of "publish k groups, gather
once with the deadline" in step, for at least `rounds` rounds and until the attack has
finished, then one more gather. Per phase: what the hostile peer sent and got stored, how
many of the honest groups published in the phase reached both other nodes, the groups
accepted from the attacker, rounds over twice the deadline, and each process's peak
resident memory (`VmHWM`, reset at the start of the phase) against its resident memory
at the end of the baseline. All processes share this machine's cores and clock.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from ftis_swarm.metrics.procstat import reset_peaks, status_mb, with_children
from ftis_swarm.lab.bench.swarm import JsonProcess, start_worker
from ftis_swarm.lab.bench.swarm_worker import TOKENIZER_FP, VOCAB_SIZE
from ftis_swarm.config import SwarmConfig

logger = logging.getLogger(__name__)

_GROUP_BYTES = 32 * 1024
_MAX_ROUNDS_FACTOR = 6


@dataclasses.dataclass(frozen=True)
class PhaseRow:
    """The figures of one phase (one attack, or the baseline)."""

    attack: str
    sent: int
    """Records (or stores) the hostile peer sent to each honest peer."""
    stored: int
    """The most of them one honest peer kept."""
    from_attacker: int
    """Groups any honest node gathered from the attacker's identities."""
    honest_published: int
    honest_delivered: int
    """Honest groups of the phase that reached both other nodes by its end."""
    rounds: int
    over_2x: int
    """Rounds (publish + gather) that took more than twice the deadline."""
    max_round_s: float
    max_gather_over_s: float
    """The most any gather ran past its deadline."""
    peak_mb: dict[str, float]
    """Each process's peak resident memory during the phase, MB."""


@dataclasses.dataclass(frozen=True)
class HostileBench:
    deadline: float
    groups: int
    baseline_mb: dict[str, float]
    """Each process's resident memory at the end of the baseline, MB."""
    phases: list[PhaseRow]

    def as_dict(self) -> dict:
        return {"bench": "hostile", **dataclasses.asdict(self)}


def _processes(roles: dict[str, JsonProcess]) -> dict[str, int]:
    """{name: pid} for every role's process and its children (its p2pd daemons)."""
    return with_children({role: proc.proc.pid for role, proc in roles.items()})


def _start(tmp: Path, *, ttl: float, identities: int) -> dict[str, JsonProcess]:
    maddrs_file = tmp / "bootstrap.maddrs"
    roles = {"bootstrap": JsonProcess([sys.executable, "-m", "ftis_swarm.cli", "bootstrap", "--host", "127.0.0.1",
                                       "--maddrs-file", str(maddrs_file), "--ttl", str(ttl)],
                                      log=tmp / "bootstrap.log")}
    try:
        stop_at = time.monotonic() + 120.0
        while not maddrs_file.exists():
            if time.monotonic() > stop_at or roles["bootstrap"].proc.poll() is not None:
                raise RuntimeError(f"the bootstrap peer did not start: {roles['bootstrap'].log.read_text()[-2000:]}")
            time.sleep(0.1)
        cfg = SwarmConfig(host="127.0.0.1", peers=maddrs_file.read_text().split(), run_id="bench-hostile", ttl=ttl,
                          poll_interval=0.5)
        for i in range(3):  # each node, and the hostile peer, on an address (an origin) of its own
            roles[f"node{i}"] = start_worker(cfg.model_copy(update={"host": f"127.0.{i + 2}.1"}),
                                             log=tmp / f"node{i}.log")
        settings = dict(peers=cfg.peers, run_id=cfg.run_id, ttl=cfg.ttl, max_clock_skew=cfg.max_clock_skew,
                        window=cfg.window, member_shards=cfg.member_shards, max_bytes=cfg.wire.max_bytes,
                        tokenizer_fp=TOKENIZER_FP, vocab_size=VOCAB_SIZE, identities=identities,
                        puzzle=cfg.puzzle.model_dump(), host="127.0.9.1")
        roles["hostile"] = JsonProcess([sys.executable, "-m", "ftis_swarm.lab.hostile.peer", json.dumps(settings)],
                                       log=tmp / "hostile.log")
        for role in ("node0", "node1", "node2", "hostile"):
            roles[role].joined()
    except BaseException:
        for proc in roles.values():
            proc.kill()
        raise
    return roles


class _Ledger:
    """Who published which group, and who received it."""

    def __init__(self, nodes: list[JsonProcess]):
        self.nodes = nodes
        self.honest = {node.peer_id for node in nodes}
        self.published: dict[str, int] = {}
        self.received: dict[str, set[int]] = {}
        self.from_attacker = 0

    def exchange(self, *, count: int, deadline: float) -> list[dict]:
        for node in self.nodes:
            node.send({"op": "exchange", "size": _GROUP_BYTES, "count": count, "deadline": deadline})
        answers = [node.read() for node in self.nodes]
        for i, answer in enumerate(answers):
            self.published.update({gid: i for gid, ok in answer["published"] if ok})
            for gid, sender in answer["received"]:
                if sender in self.honest:
                    self.received.setdefault(gid, set()).add(i)
                else:
                    self.from_attacker += 1
        return answers

    def delivered(self, groups: set[str]) -> int:
        return sum(len(self.received.get(gid, set()) - {self.published[gid]}) == len(self.nodes) - 1
                   for gid in groups)


def _phase(name: str, n: int, roles: dict[str, JsonProcess], ledger: _Ledger, *, rounds: int, groups: int,
           deadline: float) -> PhaseRow:
    hostile = roles["hostile"]
    pids = _processes(roles)
    reset_peaks(pids)
    before, attacker_before = set(ledger.published), ledger.from_attacker
    sent, stored = 0, 0
    if name == "records":
        victim = ledger.nodes[0]
        target = next(gid for gid, i in reversed(list(ledger.published.items())) if i == 0)
        answer = hostile.request({"op": "attack_records", "victim": victim.peer_id, "group_id": target})
        answer["answers"].pop("valid_control")
        sent = len(answer["answers"])
        stored = max(sum(bool(per_peer[j] and per_peer[j][0]) for per_peer in answer["answers"].values())
                     for j in range(len(answer["asked"])))
    elif name == "gossip":
        targets = [node.peer_id for node in ledger.nodes]
        hostile.request({"op": "flood", "attack": name, "n": n,
                         "params": {"burst": SwarmConfig().gossip_burst, "targets": targets}})
    elif name != "baseline":
        hostile.request({"op": "flood", "attack": name, "n": n})
    times, overruns = [], []
    while len(times) < rounds or (name not in ("baseline", "records") and not hostile.request({"op": "done"})["done"]):
        if len(times) >= rounds * _MAX_ROUNDS_FACTOR:
            logger.warning("the %s attack still runs after %d rounds; waiting for it without rounds", name, len(times))
            break
        for answer in ledger.exchange(count=groups, deadline=deadline):
            times.append(answer["round_s"])
            overruns.append(answer["gather_s"] - deadline)
    ledger.exchange(count=0, deadline=deadline)  # a last gather for what is still on its way
    if name not in ("baseline", "records"):
        result = hostile.request({"op": "results"})[name]
        sent = result.get("sent", 0)
        if name == "gossip":  # messages written to each node; gossip stores nothing
            sent = max(sum(per_target.values()) for per_target in sent.values())
        stored = max(result.get("accepted", {0: 0}).values(), default=0)
    new = set(ledger.published) - before
    return PhaseRow(attack=name, sent=sent, stored=stored, from_attacker=ledger.from_attacker - attacker_before,
                    honest_published=len(new), honest_delivered=ledger.delivered(new), rounds=len(times),
                    over_2x=sum(t > 2 * deadline for t in times), max_round_s=max(times),
                    max_gather_over_s=max(overruns),
                    peak_mb={role: status_mb(pid, "VmHWM") for role, pid in pids.items()})


ATTACKS = ("records", "bodies", "dictionary", "random_keys", "replays", "gossip", "pointers")
"""In this order: the pointer flood last, as its records fill the attacker's quota on every peer for a TTL."""


def run_hostile_bench(*, rounds: int, groups: int, deadline: float, identities: int, pointers: int,
                      random_keys: int, dictionary_items: int, bad_bodies: int,
                      progress: Callable[[str], None] = lambda s: None) -> HostileBench:
    """Runs the baseline and every attack in turn; no process outlives this call."""
    sizes = {"pointers": pointers, "random_keys": random_keys, "dictionary": dictionary_items,
             "bodies": bad_bodies, "replays": 3, "records": 0, "gossip": 4}
    with tempfile.TemporaryDirectory(prefix="ftis-bench-hostile-") as tmp:
        roles = _start(Path(tmp), ttl=600.0, identities=identities)
        try:
            ledger = _Ledger([roles[f"node{i}"] for i in range(3)])
            phases = [_phase("baseline", 0, roles, ledger, rounds=rounds, groups=groups, deadline=deadline)]
            baseline = {role: status_mb(pid, "VmRSS") for role, pid in _processes(roles).items()}
            for name in ATTACKS:
                progress(f"{name} attack")
                phases.append(_phase(name, sizes[name], roles, ledger, rounds=rounds, groups=groups,
                                     deadline=deadline))
                logger.info("%s", phases[-1])
        finally:
            for proc in roles.values():
                proc.kill()
    return HostileBench(deadline=deadline, groups=groups, baseline_mb=baseline, phases=phases)


def format_hostile(bench: HostileBench) -> str:
    lines = [
        f"3 nodes on loopback under attack, {bench.groups} group(s) of 32 KiB per node per round, "
        f"deadline {bench.deadline:g} s",
        f"{'attack':>12} {'sent':>7} {'stored':>7} {'accepted':>8} {'honest':>9} {'rounds':>6} {'>2x':>4} "
        f"{'max round s':>11} {'max over s':>10} {'worst RSS +MB':>22}",
    ]
    for row in bench.phases:
        growth = {role: peak - bench.baseline_mb.get(role, peak) for role, peak in row.peak_mb.items()
                  if not role.startswith("hostile")}
        worst = max(growth, key=growth.get) if growth else "-"
        lines.append(
            f"{row.attack:>12} {row.sent:>7} {row.stored:>7} {row.from_attacker:>8} "
            f"{row.honest_delivered:>4}/{row.honest_published:<4} {row.rounds:>6} {row.over_2x:>4} "
            f"{row.max_round_s:>11.2f} {row.max_gather_over_s:>10.2f} {growth.get(worst, 0.0):>+9.1f} {worst:>12}")
    lines.append("peak RSS MB (baseline end -> highest peak of any attack phase):")
    for role, base in bench.baseline_mb.items():
        peak = max(row.peak_mb.get(role, 0.0) for row in bench.phases[1:])
        lines.append(f"  {role:>16} {base:8.1f} -> {peak:8.1f}  ({peak - base:+.1f})")
    return "\n".join(lines)
