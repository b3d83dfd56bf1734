"""`ftis-node bench reach --phase relay`: the bootstrap's relay under a hostile relayed pair, on real NAT.

On the NAT testbed, P (public) and the two relayed home nodes exchange groups for `rounds`
rounds (the baseline), then for `rounds` more while a hostile pair (lab/hostile/relay_push.py:
a pusher in home1's namespace, a sink in home2's, both relayed through the bootstrap, both
the attacker's) pushes as many bytes as it can through the relay, dialing again whenever
the relay cuts its circuit. The bootstrap runs with `data_limit` bytes per relayed
connection and `max_circuits` circuits per peer (`swarm.transport.relay_data_limit`,
`swarm.transport.relay_max_circuits`, set through its environment).

Figures: the honest home-to-home share of groups per part, the bytes in and out of the
bootstrap's interface per round per part, and the pusher's circuits, refusals and the
bytes each stream delivered to the sink (2 streams share one relayed connection, so a
circuit's two together are what it carried before the relay cut it).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from ftis_swarm.config import SwarmConfig
from ftis_swarm.lab.bench.nat_testbed import NatTestbed
from ftis_swarm.lab.bench.reach import iface_bytes, run_rounds, start_bootstrap
from ftis_swarm.lab.bench.swarm import JsonProcess

ROLES = ("pub", "home1", "home2")
ROUND_S = 5.0
"""Seconds a round lasts at least (both parts, so bytes per round compare): the pusher's flood runs meanwhile."""


@dataclasses.dataclass
class RelayPart:
    """One part's figures (baseline, or under the hostile pair)."""

    home_share: dict[str, float]
    """{"home1->home2" | "home2->home1": share of the publisher's groups accepted within the round}."""
    boot_bytes_per_round: float
    """Bytes in and out of the bootstrap's interface per round."""


@dataclasses.dataclass
class RelayPhase:
    rounds: int
    groups: int
    size: int
    data_limit: int
    max_circuits: int
    baseline: RelayPart
    attacked: RelayPart
    circuits: int
    """Circuits the pusher opened (a stream reached the sink)."""
    refused: int
    """Dials or streams of the pusher that failed (most: the relay reset its circuit)."""
    errors: dict[str, int]
    written: int
    """Bytes the pusher handed its daemon."""
    per_stream: list[int]
    """Bytes the sink read from each stream, in order of opening (the pusher opens 2 per circuit)."""
    delivered_per_round: float
    """Bytes the sink read per attacked round."""
    round_s: float
    """Seconds an attacked round lasted."""

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def _hostile(bed: NatTestbed, role: str, kind: str, settings: dict, logs: Path) -> JsonProcess:
    argv = [sys.executable, "-m", "ftis_swarm.lab.hostile.relay_push", kind, json.dumps(settings)]
    return JsonProcess(bed.wrap(role, argv), log=logs / f"hostile-{kind}.log").joined()


def _home_share(answers: list[dict[str, dict]]) -> dict[str, float]:
    share = {}
    for pub, con in (("home1", "home2"), ("home2", "home1")):
        sent = [gid for a in answers for gid, _, ok, *_ in a[pub]["published"] if ok]
        arrived = {gid for a in answers for gid in a[con]["arrivals"]}
        share[f"{pub}->{con}"] = sum(gid in arrived for gid in sent) / max(1, len(sent))
    return share


def run_relay_phase(*, rounds: int, groups: int, size: int, deadline: float, data_limit: int, max_circuits: int,
                    progress: Callable[[str], None]) -> RelayPhase:
    env = {"FTIS_SWARM__TRANSPORT__RELAY_DATA_LIMIT": str(data_limit),
           "FTIS_SWARM__TRANSPORT__RELAY_MAX_CIRCUITS": str(max_circuits)}
    with tempfile.TemporaryDirectory(prefix="ftis-reach-relay-") as tmp, NatTestbed.create() as bed:
        logs = Path(tmp)
        boot, peers = start_bootstrap(bed, logs, name="relay-boot", env=env)
        workers: dict[str, JsonProcess] = {}
        hostiles: list[JsonProcess] = []
        try:
            for role in ROLES:  # P first (reach.py: PUBLIC_FIRST)
                cfg = SwarmConfig.model_validate({
                    "run_id": "reach-relay", "records": {"window": 5.0}, "fetch": {"poll_interval": 0.25},
                    "transport": {"peers": peers, "host": bed.addr(role),
                                  "reachability": "public" if role == "pub" else "relayed"}})
                workers[role] = JsonProcess(bed.wrap(role, [sys.executable, "-m", "ftis_swarm.lab.bench.swarm_worker",
                                                            cfg.model_dump_json()]), log=logs / f"{role}.log").joined()
            progress(f"baseline: {rounds} rounds")
            before = iface_bytes(bed, "boot")
            baseline = run_rounds(workers, 0, rounds, groups=groups, size=size, deadline=deadline,
                                  min_seconds=ROUND_S)
            middle = iface_bytes(bed, "boot")
            base = {"relays": peers, "streams": 2, "seconds": rounds * (max(deadline, ROUND_S) + 1.0) + 5.0}
            sink = _hostile(bed, "home2", "sink", {**base, "host": bed.addr("home2")}, logs)
            hostiles.append(sink)
            hostiles.append(_hostile(bed, "home1", "push", {**base, "host": bed.addr("home1"), "sink_peer": sink.peer_id,
                                                            "sink_maddrs": sink.maddrs}, logs))
            progress(f"under the hostile pair: {rounds} rounds")
            middle, attack_started = iface_bytes(bed, "boot"), time.time()
            attacked = run_rounds(workers, rounds, rounds, groups=groups, size=size, deadline=deadline,
                                  min_seconds=ROUND_S)
            after, attack_s = iface_bytes(bed, "boot"), time.time() - attack_started
            per_stream = sink.request({"op": "report"})["streams"]
            pushed = hostiles[1].request({"op": "report"})
        finally:
            for proc in [*workers.values(), *hostiles]:
                proc.kill()
            boot.kill()
            boot.wait()
    return RelayPhase(rounds=rounds, groups=groups, size=size, data_limit=data_limit, max_circuits=max_circuits,
                      baseline=RelayPart(_home_share(baseline), (middle - before) / rounds),
                      attacked=RelayPart(_home_share(attacked), (after - middle) / rounds),
                      circuits=pushed["circuits"], refused=pushed["refused"], errors=pushed["errors"],
                      written=pushed["written"], per_stream=per_stream,
                      delivered_per_round=sum(per_stream) / rounds, round_s=attack_s / rounds)


def format_relay_phase(phase: RelayPhase) -> str:
    per = sorted(phase.per_stream) or [0]
    lines = [f"relay under a hostile relayed pair: {phase.rounds} rounds each part, {phase.groups} groups of "
             f"{phase.size // 1024} KiB per node per round; relay limits {phase.data_limit} B per relayed "
             f"connection, {phase.max_circuits} circuits per peer",
             f"{'':<22}{'baseline':>12}{'attacked':>12}"]
    for pair in phase.baseline.home_share:
        lines.append(f"{pair:<22}{phase.baseline.home_share[pair]:>12.0%}{phase.attacked.home_share[pair]:>12.0%}")
    lines.append(f"{'bootstrap KiB/round':<22}{phase.baseline.boot_bytes_per_round / 1024:>12.0f}"
                 f"{phase.attacked.boot_bytes_per_round / 1024:>12.0f}")
    lines.append(f"pusher: {phase.circuits} circuits, {phase.refused} cut or refused, {phase.written / 2**20:.1f} MiB "
                 f"written; the sink read {sum(phase.per_stream) / 2**20:.1f} MiB, "
                 f"{phase.delivered_per_round / 1024:.0f} KiB per round of {phase.round_s:.1f} s "
                 f"({phase.delivered_per_round / max(phase.round_s, 1e-9) / 1024:.0f} KiB/s); per stream max {per[-1]} B, "
                 f"median {per[len(per) // 2]} B")
    lines.append(f"errors: {phase.errors}")
    return "\n".join(lines)
