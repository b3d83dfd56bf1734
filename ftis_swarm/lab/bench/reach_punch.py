"""`ftis-node bench reach --phase punch`: whether two relayed homes end up connected directly, per testbed variant.

Every node of ours runs libp2p's hole punching (DCUtR): hivemind starts p2pd with `-autonat`,
which turns on both the AutoNAT service and hole punching. When one home opens a relayed
connection to the other (a fetch through the bootstrap's relay), the home that received it
asks the other, over the relay, to dial each other's public address at the same moment.
Two conditions decide whether that can work (go-libp2p 0.32, the daemon's):

- each home must know its own public address: identify trusts an address peers say they
  see only once 4 distinct IPs reported the same one (`ActivationThresh`); until then the
  home neither answers nor starts a hole punch. With the bootstrap and P as the only public
  peers it never learns it; behind `--random-fully` every peer sees another port, so no
  address is ever confirmed either.
- the two SYNs sent at once must cross both NATs: where the router's own TCP stack answers a
  SYN of no known mapping with a reset (a bare Linux router, the testbed's default) all three
  tries fail, most likely because that answered SYN's conntrack entry takes the very port
  the home behind it needs for its own SYN; a router that drops it in its firewall (a
  stateful firewall's default) lets the next SYN through.

`VARIANTS` are NatTestbed options. Every node (P, pub2.., the homes relayed) runs a
`swarm_worker`; each round every node publishes and gathers, as in the nat phase. After each
round both homes list their connections to the other (p2pd's, `SwarmClient.connections`):
the pair is direct when one of them is not a `/p2p-circuit`. Bytes that r1 forwarded to or
from r2's public address (iptables counters) travel on a direct path between the homes and
never cross the relay; the bootstrap's interface carries the relayed bodies and DHT traffic.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path
from typing import Callable, Optional

from ftis_swarm.config import SwarmConfig
from ftis_swarm.lab.bench.nat_testbed import NatTestbed
from ftis_swarm.lab.bench.reach import NAT_HOMES, home_pair_direct, iface_bytes, log_folder, run_rounds, start_bootstrap
from ftis_swarm.lab.bench.swarm import JsonProcess

VARIANTS: dict[str, dict] = {
    "as-built": {},
    "observers": dict(random_fully=False, extra_public=3),
    "drop": dict(random_fully=False, drop_unsolicited=True),
    "observers+drop": dict(random_fully=False, extra_public=3, drop_unsolicited=True),
}
"""as-built: r2 --random-fully, boot and P the only public peers, routers reset; the others keep r2's ports
(plain MASQUERADE on both), add pub2..pub4 (5 public IPs observe each home) and/or drop unsolicited SYNs."""


@dataclasses.dataclass
class PunchRun:
    variant: str
    direct_after: list[bool]
    """Per round: whether the homes held a direct connection to each other after it."""
    share: float
    """Share of each home's groups the other home accepted within the round deadline (both directions)."""
    direct_kib_per_round: float
    """KiB r1 forwarded to or from r2's public address per round: the homes' direct traffic."""
    boot_kib_per_round: float
    """KiB in and out of the bootstrap's interface per round: relayed bodies and DHT traffic."""
    connections: dict[str, list[str]]
    """{home: the remote multiaddrs of its connections to the other home, after the last round}."""


@dataclasses.dataclass
class PunchBench:
    rounds: int
    groups: int
    size: int
    runs: list[PunchRun]

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def _run(variant: str, *, rounds: int, groups: int, size: int, deadline: float, logs: Path) -> PunchRun:
    with NatTestbed.create(**VARIANTS[variant]) as bed:
        bed.count_direct("home1", "home2")
        boot, peers = start_bootstrap(bed, logs, name="punch-boot")
        workers: dict[str, JsonProcess] = {}
        try:
            roles = [r for r in bed.public_hosts if r != "boot"] + list(NAT_HOMES)
            for role in roles:  # P first, as in the nat phase (reach.PUBLIC_FIRST)
                cfg = SwarmConfig.model_validate({
                    "run_id": "punch", "records": {"window": 5.0}, "fetch": {"poll_interval": 0.25},
                    "transport": {"peers": peers, "host": bed.addr(role),
                                  "reachability": "relayed" if role in NAT_HOMES else "public"}})
                workers[role] = JsonProcess(bed.wrap(role, [sys.executable, "-m", "ftis_swarm.lab.bench.swarm_worker",
                                                            cfg.model_dump_json()]), log=logs / f"punch-{role}.log")
                if role == "pub":
                    workers[role].joined()
            for role, worker in workers.items():
                if role != "pub":
                    worker.joined()
            before = (bed.direct_bytes("home1"), iface_bytes(bed, "boot"))
            direct_after, received, sent = [], 0, 0
            for number in range(rounds):
                answer = run_rounds(workers, number, 1, groups=groups, size=size, deadline=deadline)[0]
                for pub, con in (NAT_HOMES, NAT_HOMES[::-1]):
                    ids = [gid for gid, _, ok, *_ in answer[pub]["published"] if ok]
                    sent += len(ids)
                    received += sum(gid in answer[con]["arrivals"] for gid in ids)
                time.sleep(0.5)  # the gatherer's next read of p2pd's connections
                direct, connections = home_pair_direct(workers)
                direct_after.append(direct)
            after = (bed.direct_bytes("home1"), iface_bytes(bed, "boot"))
        finally:
            for worker in workers.values():
                worker.kill()
            boot.kill()
            boot.wait()
    return PunchRun(variant=variant, direct_after=direct_after, share=received / max(1, sent),
                    direct_kib_per_round=(after[0] - before[0]) / rounds / 1024,
                    boot_kib_per_round=(after[1] - before[1]) / rounds / 1024, connections=connections)


def run_punch_phase(*, variants: list[str], runs: int, rounds: int, groups: int, size: int, deadline: float,
                    progress: Callable[[str], None], logs: Optional[Path] = None) -> PunchBench:
    done = []
    with log_folder(logs, prefix="ftis-reach-punch-") as folder:
        for variant in variants:
            for number in range(runs):
                progress(f"{variant}: run {number + 1} of {runs}, {rounds} rounds")
                run_logs = folder / f"{variant}-{number + 1}"
                run_logs.mkdir()
                done.append(_run(variant, rounds=rounds, groups=groups, size=size, deadline=deadline, logs=run_logs))
    return PunchBench(rounds=rounds, groups=groups, size=size, runs=done)


def _first(run: PunchRun) -> Optional[int]:
    return next((i for i, direct in enumerate(run.direct_after) if direct), None)


def format_punch_phase(bench: PunchBench) -> str:
    lines = [f"hole punching between two relayed homes: {bench.rounds} rounds, {bench.groups} groups of "
             f"{bench.size // 1024} KiB per node per round; direct = home pairs with a direct connection at the end",
             f"{'variant':<18}{'run':>4}{'direct':>8}{'from round':>11}{'share':>7}{'direct KiB/r':>13}"
             f"{'boot KiB/r':>11}"]
    for variant in dict.fromkeys(run.variant for run in bench.runs):
        runs = [run for run in bench.runs if run.variant == variant]
        for number, run in enumerate(runs):
            first = _first(run)
            lines.append(f"{variant:<18}{number + 1:>4}{int(run.direct_after[-1]):>6}/1"
                         f"{first if first is not None else '-':>11}{run.share:>7.0%}"
                         f"{run.direct_kib_per_round:>13.0f}{run.boot_kib_per_round:>11.0f}")
        lines.append(f"{variant + ': direct':<18}{sum(r.direct_after[-1] for r in runs):>10}/{len(runs)} home pairs")
    return "\n".join(lines)
