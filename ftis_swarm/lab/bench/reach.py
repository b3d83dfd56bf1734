"""`ftis-node bench reach`: groups between home nodes behind real NAT, relayed against client mode.

On the NAT testbed (nat_testbed.py: the bootstrap and a public node P on a public segment,
home1 and home2 each behind its own MASQUERADE router), every node runs a `swarm_worker`
and publishes `groups` synthetic groups per round for `rounds` rounds. Three arms in the
same run: the baseline `client` (home nodes accept no connection and hold no relay slot:
what `--client-mode` did before), `relayed` (a slot on the bootstrap's relay), and `auto`
(every node decides by dial-back, and the control home3, whose router forwards its port,
joins too: `modes` says what each chose; right is public for P and home3, relayed for
home1 and home2). Other phases: reach_bootstrap.py, reach_relay.py, reach_punch.py.

Figures per arm: for each (publisher, consumer) pair the share of the publisher's groups
that reached the consumer within the round's deadline; publish-to-visible p50 per pair
kind; the seconds from a home node's start to the first of its groups accepted by the
other home node; and the bytes the bootstrap's interface carried per round (its DHT
traffic plus the relayed bodies) against P's (the DHT traffic alone, no relay clients).

P starts, and says hello, before the home nodes (`PUBLIC_FIRST`). Started all at once, the
relay answered home-to-home dials with NO_RESERVATION (204) in 4 of 7 relayed runs, those
in which P joined last. Why (the bootstrap's p2pd logs): its daemon runs a relay with
libp2p's default limits from the start, where the homes reserve; once P's AutoNAT dial-back
confirms the bootstrap public, libp2p starts the relay with our limits, which takes over
the relay protocol with no reservations (docs/deploy.md, Known gap).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator, Optional

import numpy as np

from ftis_swarm.config import SwarmConfig
from ftis_swarm.lab.bench.nat_testbed import NatTestbed
from ftis_swarm.lab.bench.swarm import JsonProcess
from ftis_swarm.swarm.peer.reach import CIRCUIT

ROLES = ("pub", "home1", "home2")
ARMS = ("client", "relayed", "auto")
"""Home nodes' reachability in each arm; P is public in the first two. `client` is the baseline. In `auto`
every node decides by dial-back, and the control home3 joins: its router forwards FORWARDED_PORT to it."""
FORWARDED_PORT = 31338
NAT_HOMES = ("home1", "home2")
"""The homes nobody can dial: `first_fetchable_s` is the time until one's group reached the other."""
PUBLIC_FIRST = True
"""Start P, and wait for its hello, before the home nodes."""


@dataclasses.dataclass
class ReachArm:
    """One arm's figures."""

    mode: str
    share: dict[str, float]
    """{"publisher->consumer": share of the publisher's groups accepted within the round deadline}."""
    p50_ms: dict[str, Optional[float]]
    """{"public->home" | "home->public" | "home->home": publish-to-visible median, ms (None: nothing arrived)}."""
    joined_s: dict[str, float]
    """{node: seconds from its process start to its hello (a relayed node says hello once its relay slot is
    reserved, or `relay_wait` passed)}."""
    first_fetchable_s: dict[str, Optional[float]]
    """{home: seconds from its start to its first group accepted by the other home (None: never); the
    first publish waits for every node's hello}."""
    modes: dict[str, str]
    """{node: the mode it ran in, as its counters say (in `auto`: what the dial-back decided)}."""
    relay_slot: dict[str, bool]
    """{node: whether its hello's multiaddrs held a relay circuit (a reserved slot)}."""
    faults: dict[str, dict[str, int]]
    """{node: its counters' faults and rejections by reason at the end (why groups did not arrive)}."""
    boot_bytes_per_round: float
    """Bytes in and out of the bootstrap's interface per round (DHT and relayed traffic)."""
    pub_bytes_per_round: float
    """The same for P, a public node that relays for nobody: the baseline."""
    puzzle_s: dict[str, Optional[float]] = dataclasses.field(default_factory=dict)
    """{node: wall seconds its identity's puzzle took at start, from its log (None: not in the log); a
    share of `joined_s` that grows with the machine's load (the puzzle is CPU-bound)}."""
    direct: bool = False
    """Whether home1 and home2 held a direct connection to each other after the last round (hole punching;
    reach_punch.py says why it does not happen on this testbed)."""


@dataclasses.dataclass
class ReachBench:
    rounds: int
    groups: int
    size: int
    arms: list[ReachArm]

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def iface_bytes(bed: NatTestbed, role: str) -> int:
    stats = json.loads(bed.run(role, ["ip", "-s", "-j", "link", "show", "wan"]).stdout)[0]["stats64"]
    return int(stats["rx"]["bytes"]) + int(stats["tx"]["bytes"])


def start_bootstrap(bed: NatTestbed, logs: Path, *, name: str,
                    env: Optional[dict[str, str]] = None) -> tuple[subprocess.Popen, list[str]]:
    """The bootstrap CLI in the `boot` namespace (`env`: swarm settings, e.g. its relay limits); its multiaddrs."""
    maddrs_file, log_file = logs / f"{name}.maddrs", logs / f"{name}.log"
    maddrs_file.unlink(missing_ok=True)
    settings = [f"{key}={value}" for key, value in (env or {}).items()]
    with open(log_file, "w") as log:
        proc = subprocess.Popen(bed.wrap("boot", ["env", *settings, sys.executable, "-m", "ftis_swarm.cli", "bootstrap",
                                                  "--host", bed.addr("boot"), "--maddrs-file", str(maddrs_file)]),
                                stdout=log, stderr=log, start_new_session=True)
    stop_at = time.monotonic() + 90.0
    while not maddrs_file.exists():
        if proc.poll() is not None or time.monotonic() > stop_at:
            raise RuntimeError(f"the bootstrap did not start: {log_file.read_text()[-2000:]}")
        time.sleep(0.1)
    return proc, maddrs_file.read_text().split()


def _config(bed: NatTestbed, role: str, mode: str, peers: list[str]) -> SwarmConfig:
    transport: dict = dict(peers=peers, host=bed.addr(role),
                           reachability="public" if role == "pub" and mode != "auto" else mode)
    if role == "home3":  # listens on the forwarded port, announces its router's address
        transport.update(port=FORWARDED_PORT, announce=[f"/ip4/{bed.public_addr(role)}/tcp/{FORWARDED_PORT}"])
    return SwarmConfig.model_validate({"run_id": "reach", "transport": transport, "records": {"window": 5.0},
                                       "fetch": {"poll_interval": 0.25}})


def _arm(mode: str, *, rounds: int, groups: int, size: int, deadline: float, logs: Path) -> ReachArm:
    roles = ROLES + (("home3",) if mode == "auto" else ())
    with NatTestbed.create(forward_port=FORWARDED_PORT if mode == "auto" else 0) as bed:
        boot, peers = start_bootstrap(bed, logs, name=f"{mode}-boot")
        workers: dict[str, JsonProcess] = {}
        started: dict[str, float] = {}
        try:
            joined = {}
            for role in roles:  # P first: the homes join a swarm that has a public node (see docs/deploy.md)
                cfg = _config(bed, role, mode, peers)
                started[role] = time.time()
                workers[role] = JsonProcess(bed.wrap(role, [sys.executable, "-m", "ftis_swarm.lab.bench.swarm_worker",
                                                            cfg.model_dump_json()]), log=logs / f"{mode}-{role}.log")
                if role == "pub" and PUBLIC_FIRST:
                    workers[role].joined()
                    joined[role] = time.time() - started[role]
            for role, worker in workers.items():
                if role not in joined:
                    worker.joined()
                    joined[role] = time.time() - started[role]
            slots = {role: any(CIRCUIT in m for m in worker.maddrs) for role, worker in workers.items()}
            before = {role: iface_bytes(bed, role) for role in ("boot", "pub")}
            answers = run_rounds(workers, 0, rounds, groups=groups, size=size, deadline=deadline)
            after = {role: iface_bytes(bed, role) for role in ("boot", "pub")}
            direct, _ = home_pair_direct(workers)
            faults, modes = {}, {}
            for role, worker in workers.items():
                counters = worker.request({"op": "counters"})
                faults[role] = {**counters["faults"], **counters["rejected"]}
                modes[role] = counters["reach"]["mode"]
        finally:
            for worker in workers.values():
                worker.kill()
            boot.kill()
            boot.wait()
    arm = _figures(mode, roles, answers, started, joined, faults, slots, modes,
                   per_round={r: (after[r] - before[r]) / rounds for r in before})
    return dataclasses.replace(arm, direct=direct,
                               puzzle_s={role: puzzle_seconds(logs / f"{mode}-{role}.log") for role in roles})


def puzzle_seconds(log: Path) -> Optional[float]:
    """Seconds from each "created identity" log line of a worker to the "solved this identity's puzzle" line
    after it, summed (an `auto` node without an identity file solves one for its dial-back probe's daemon
    too); None when the log has no such pair."""
    total, created, pairs = 0.0, None, 0
    for line in log.read_text(errors="replace").splitlines() if log.exists() else []:
        try:
            stamp = datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
        except ValueError:
            continue  # a line without the logging timestamp
        if "created identity" in line:
            created = stamp
        elif "solved this identity's puzzle" in line and created is not None:
            total, created, pairs = total + stamp - created, None, pairs + 1
    return total if pairs else None


def home_pair_direct(workers: dict[str, JsonProcess]) -> tuple[bool, dict[str, list[str]]]:
    """Whether the two NAT'd homes hold a direct connection to each other (one of them not a relay circuit,
    as either home's p2pd lists it), and {home: its connections' remote multiaddrs to the other}."""
    home1, home2 = NAT_HOMES
    ids = {home1: workers[home2].peer_id, home2: workers[home1].peer_id}
    connections = {home: workers[home].request({"op": "connections"}).get(ids[home], []) for home in NAT_HOMES}
    return any(CIRCUIT not in m for maddrs in connections.values() for m in maddrs), connections


def run_rounds(workers: dict[str, JsonProcess], first: int, count: int, *, groups: int, size: int,
               deadline: float, min_seconds: float = 0.0) -> list[dict[str, dict]]:
    """Rounds `first` .. `first + count - 1`, every worker publishing `groups` groups of `size` bytes from one
    start, each round lasting `min_seconds` at least; per round {role: its worker's answer}."""
    answers = []
    for number in range(first, first + count):
        start_at = time.time() + 0.5
        for worker in workers.values():
            worker.send({"op": "round", "round": number, "size": size, "count": groups,
                         "expect": groups * (len(workers) - 1), "start_at": start_at, "timeout": deadline,
                         "min_seconds": min_seconds})
        answers.append({role: worker.read() for role, worker in workers.items()})
    return answers


def _kind(role: str) -> str:
    return "public" if role == "pub" else "home"


def _figures(mode: str, roles: tuple[str, ...], answers: list[dict[str, dict]], started: dict[str, float],
             joined: dict[str, float], faults: dict[str, dict[str, int]], slots: dict[str, bool],
             modes: dict[str, str], *, per_round: dict[str, float]) -> ReachArm:
    sent: dict[str, list[tuple[str, float]]] = {r: [] for r in roles}  # publisher -> [(group id, publish start)]
    for answer in answers:
        for role, reply in answer.items():
            sent[role] += [(gid, start) for gid, start, ok, *_ in reply["published"] if ok]
    arrivals = {role: {} for role in roles}
    for answer in answers:
        for role, reply in answer.items():
            arrivals[role].update(reply["arrivals"])
    share, latencies = {}, {"public->home": [], "home->public": [], "home->home": []}
    first: dict[str, Optional[float]] = {}
    for pub in roles:
        for con in roles:
            if pub == con:
                continue
            got = [(arrivals[con][gid] - start) for gid, start in sent[pub] if gid in arrivals[con]]
            share[f"{pub}->{con}"] = len(got) / max(1, len(sent[pub]))
            latencies[f"{_kind(pub)}->{_kind(con)}"] += got
            if pub in NAT_HOMES and con in NAT_HOMES:
                times = [arrivals[con][gid] for gid, _ in sent[pub] if gid in arrivals[con]]
                first[pub] = min(times) - started[pub] if times else None
    p50 = {k: (float(np.median(v)) * 1000 if v else None) for k, v in latencies.items()}
    return ReachArm(mode=mode, share=share, p50_ms=p50, joined_s=joined, first_fetchable_s=first, faults=faults,
                    relay_slot=slots, modes=modes,
                    boot_bytes_per_round=per_round["boot"], pub_bytes_per_round=per_round["pub"])


@contextlib.contextmanager
def log_folder(keep: Optional[Path], *, prefix: str) -> Iterator[Path]:
    """Where a phase's processes write their logs: `keep` (created; the logs outlive the run), else a
    temporary folder deleted at the end."""
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        yield keep
        return
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        yield Path(tmp)


def run_reach_bench(*, rounds: int, groups: int, size: int, deadline: float, progress: Callable[[str], None],
                    logs: Optional[Path] = None) -> ReachBench:
    arms = []
    with log_folder(logs, prefix="ftis-reach-") as folder:
        for mode in ARMS:
            progress(f"home nodes in {mode} mode: {rounds} rounds")
            arms.append(_arm(mode, rounds=rounds, groups=groups, size=size, deadline=deadline, logs=folder))
    return ReachBench(rounds=rounds, groups=groups, size=size, arms=arms)


def format_reach(bench: ReachBench) -> str:
    lines = [f"reach on real NAT: {bench.rounds} rounds, {bench.groups} groups of {bench.size // 1024} KiB per node "
             f"per round (baseline: client)"]
    pairs = list(dict.fromkeys(pair for arm in bench.arms for pair in arm.share))
    lines.append(f"{'pair':<14}" + "".join(f"{arm.mode:>10}" for arm in bench.arms))
    for pair in pairs:
        lines.append(f"{pair:<14}" + "".join(f"{arm.share[pair]:>10.0%}" if pair in arm.share else f"{'-':>10}"
                                             for arm in bench.arms))
    for kind in bench.arms[0].p50_ms:
        cells = [arm.p50_ms[kind] for arm in bench.arms]
        lines.append(f"{'p50 ' + kind:<14}" + "".join(f"{c:>8.0f}ms" if c is not None else f"{'-':>10}"
                                                      for c in cells))
    for role in dict.fromkeys(role for arm in bench.arms for role in arm.joined_s):  # home3 in `auto` only
        def row(label: str, cell: Callable[[ReachArm], str]) -> str:
            return f"{role + ' ' + label:<14}" + "".join(f"{cell(arm) if role in arm.joined_s else '-':>10}"
                                                         for arm in bench.arms)
        lines.append(row("joined", lambda arm: f"{arm.joined_s[role]:.1f}s"))
        lines.append(row("puzzle", lambda arm: f"{arm.puzzle_s[role]:.1f}s" if arm.puzzle_s.get(role) is not None
                         else "?"))
        lines.append(row("slot", lambda arm: "yes" if arm.relay_slot[role] else "no"))
        lines.append(row("mode", lambda arm: arm.modes.get(role, "?")))
    for home in bench.arms[0].first_fetchable_s:
        cells = [arm.first_fetchable_s.get(home) for arm in bench.arms]
        lines.append(f"{home + ' first':<14}" + "".join(f"{c:>9.1f}s" if c is not None else f"{'never':>10}"
                                                        for c in cells))
    lines.append(f"{'homes direct':<14}" + "".join(f"{int(arm.direct):>8}/1" for arm in bench.arms))
    for arm in bench.arms:
        lines.append(f"{arm.mode}: faults " + "; ".join(f"{role} {dict(sorted(f.items()))}"
                                                         for role, f in arm.faults.items() if f))
    base = bench.arms[0]
    for arm in bench.arms:
        lines.append(f"{arm.mode}: bootstrap {arm.boot_bytes_per_round / 1024:.0f} KiB/round "
                     f"({arm.boot_bytes_per_round / max(1.0, base.boot_bytes_per_round):.2f}x the baseline's), "
                     f"P {arm.pub_bytes_per_round / 1024:.0f} KiB/round")
    return "\n".join(lines)
