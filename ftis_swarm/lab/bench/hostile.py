"""`ftis-node bench hostile`: a 3-node testnet under each attack of the hostile peer, one phase at a time.

A bootstrap peer (`ftis-node bootstrap`), three `swarm_worker` nodes, each with a
`PeerLedger` as a real node keeps (the swarm's policy; it charges what the swarm drains and
credits every gathered group), and the hostile peer (`ftis_swarm.lab.hostile.peer`: its
own identity, identities that only sign, four bad body servers) run as separate processes
on loopback, the nodes and the hostile peer each on an address of its own (127.0.N.1:
its own network origin). Phase by phase (first a baseline with no attack, then each attack alone)
every node runs rounds of "publish k groups, gather once with the deadline" in step, for
at least `rounds` rounds and until the attack has finished, then one more gather. Two
phases are not the hostile peer's: `fill`, in which `FILLERS` more hostile processes,
each with an identity and a daemon of its own, store `fill` valid pointers each on every
peer (more than the nodes' `max_stored_bytes` hold), and `honest_ban`, in which node0's
ledger bans node1 (by any cause: here one forged group) while node1 goes on publishing
and gossiping to it.

Per phase: what the attackers sent and got stored, honest groups received per round
against the baseline's, the groups accepted from attackers, the bans of honest peers
(every node's ledger; in `honest_ban` the one imposed, and no other), the attackers
banned and the signed-fault points charged to them, rounds over twice the deadline, and
each process's peak resident memory (`VmHWM`, reset at the start of the phase) against
its resident memory at the end of the baseline. First, in this process, what one stored
record costs in memory (`storage_memory`). All processes share this machine's cores and clock.

A crowd of identities on many origins that farms credit, strikes, stalls, fills (then falls silent) and copies against
real learning nodes is `--phase crowd`'s (`crowd_phases.py`).
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

from ftis_swarm.config import FetchConfig, GossipConfig, LedgerConfig, RecordsConfig, SwarmConfig, TransportConfig
from ftis_swarm.lab.bench.storage_memory import RecordMemory, format_record_memory, measure_record_memory
from ftis_swarm.lab.bench.swarm import JsonProcess, start_worker
from ftis_swarm.lab.bench.swarm_worker import TOKENIZER_FP, VOCAB_SIZE
from ftis_swarm.metrics.procstat import reset_peaks, status_mb, with_children

logger = logging.getLogger(__name__)

_GROUP_BYTES = 32 * 1024
_MAX_ROUNDS_FACTOR = 6
FILLERS = 10
"""Hostile processes of the `fill` phase, each with its own identity and daemon."""


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
    honest_per_round: float
    """Honest groups received per round, all nodes together (each group counted once per receiving node;
    groups whose publish failed count when they arrived all the same, by gossip)."""
    publish_failures: dict[str, int]
    """Failed honest publishes of the phase, by the start of their reason."""
    honest_bans: int
    """Bans of honest peers (the three nodes and the bootstrap) in any node's ledger during the phase."""
    imposed_bans: int
    """Of them, the ones the phase imposed (`honest_ban`: 1)."""
    attackers_banned: int
    """(node, attacker identity) bans during the phase."""
    attacker_points: float
    """Signed-fault points the nodes' ledgers charged the attackers' identities during the phase."""
    attacker_refused: int
    """Rejections and faults the nodes' ledgers counted against the attackers' identities (free ones too)."""
    ban_reasons: dict[str, int]
    """The causes of the phase's bans (`ban_reason`), all peers."""
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
    record_memory: RecordMemory | None
    storage_bytes: int
    """The nodes' `max_stored_bytes`."""
    fill: int
    """Pointers each filler stored."""
    baseline_mb: dict[str, float]
    """Each process's resident memory at the end of the baseline, MB."""
    phases: list[PhaseRow]

    def as_dict(self) -> dict:
        return {"bench": "hostile", **dataclasses.asdict(self)}


def _processes(roles: dict[str, JsonProcess]) -> dict[str, int]:
    """{name: pid} for every role's process and its children (its p2pd daemons)."""
    return with_children({role: proc.proc.pid for role, proc in roles.items()})


def _start(tmp: Path, *, ttl: float, identities: int, storage_bytes: int, ledger: LedgerConfig,
           ) -> tuple[dict[str, JsonProcess], dict]:
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
        cfg = SwarmConfig(run_id="bench-hostile",
                          transport=TransportConfig(host="127.0.0.1", peers=maddrs_file.read_text().split()),
                          records=RecordsConfig(ttl=ttl, max_stored_bytes=storage_bytes),
                          fetch=FetchConfig(poll_interval=0.5))
        for i in range(3):  # each node, and the hostile peer, on an address (an origin) of its own
            roles[f"node{i}"] = start_worker(cfg.replace(transport={"host": f"127.0.{i + 2}.1"}),
                                             log=tmp / f"node{i}.log", ledger=ledger)
        records = cfg.records
        settings = dict(peers=cfg.transport.peers, run_id=cfg.run_id, ttl=records.ttl,
                        max_clock_skew=records.max_clock_skew, window=records.window,
                        member_shards=records.member_shards, max_bytes=cfg.wire.max_bytes,
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
    return roles, settings


def _start_fillers(tmp: Path, settings: dict) -> list[JsonProcess]:
    """`FILLERS` hostile processes, each its own identity and daemon, no signers and no body servers."""
    own = {**settings, "identities": 0, "body_servers": False}
    fillers = [JsonProcess([sys.executable, "-m", "ftis_swarm.lab.hostile.peer", json.dumps(own)],
                           log=tmp / f"filler{i}.log") for i in range(FILLERS)]
    try:
        for filler in fillers:
            filler.joined()
    except BaseException:
        for filler in fillers:
            filler.kill()
        raise
    return fillers


class _Ledger:
    """Who published which group, who received it, and what the nodes' ledgers say of each peer."""

    def __init__(self, nodes: list[JsonProcess], bootstrap: str):
        self.nodes = nodes
        self.honest = {node.peer_id for node in nodes} | {bootstrap}
        self.published: dict[str, int] = {}
        self.attempted: dict[str, int] = {}
        """Every group a node tried to publish (a failed publish may still reach peers by gossip)."""
        self.failures: dict[str, int] = {}
        self.received: dict[str, set[int]] = {}
        self.from_attacker = 0
        self.exchanges = 0

    def exchange(self, *, count: int, deadline: float) -> list[dict]:
        for node in self.nodes:
            node.send({"op": "exchange", "size": _GROUP_BYTES, "count": count, "deadline": deadline})
        answers = [node.read() for node in self.nodes]
        self.exchanges += count > 0
        for i, answer in enumerate(answers):
            self.published.update({gid: i for gid, ok, _ in answer["published"] if ok})
            self.attempted.update({gid: i for gid, _, _ in answer["published"]})
            for _, ok, reason in answer["published"]:
                if not ok:
                    why = reason.split(",")[0][:60]
                    self.failures[why] = self.failures.get(why, 0) + 1
            for gid, sender in answer["received"]:
                if sender in self.honest:
                    self.received.setdefault(gid, set()).add(i)
                else:
                    self.from_attacker += 1
        return answers

    def delivered(self, groups: set[str]) -> int:
        return sum(len(self.received.get(gid, set()) - {self.published[gid]}) == len(self.nodes) - 1
                   for gid in groups)

    def receptions(self, groups: set[str]) -> int:
        return sum(len(self.received.get(gid, set()) - {self.attempted[gid]}) for gid in groups)

    def views(self) -> list[dict]:
        """Each node's ledger: {peer id: {"bans", "ban_reason", "cost", "charged", "allowed"}}."""
        return [node.request({"op": "ledger"}) for node in self.nodes]


@dataclasses.dataclass
class _Trust:
    honest_bans: int = 0
    attackers_banned: int = 0
    attacker_points: float = 0.0
    attacker_refused: int = 0
    ban_reasons: dict[str, int] = dataclasses.field(default_factory=dict)


def _trust(before: list[dict], after: list[dict], honest: set[str]) -> _Trust:
    out = _Trust()
    for was, now in zip(before, after):
        for peer, rec in now.items():
            old = was.get(peer, {"bans": 0, "cost": 0.0, "charged": 0})
            new_bans = rec["bans"] - old["bans"]
            if new_bans:
                out.ban_reasons[rec["ban_reason"]] = out.ban_reasons.get(rec["ban_reason"], 0) + new_bans
            if peer in honest:
                out.honest_bans += new_bans
            else:
                out.attackers_banned += new_bans
                out.attacker_points += rec["cost"] - old["cost"]
                out.attacker_refused += rec["charged"] - old["charged"]
    return out


def _attack(name: str, n: int, roles: dict[str, JsonProcess], ledger: _Ledger, fillers: list[JsonProcess]) -> tuple:
    """Starts the phase's attack; (sent, stored) for the attacks answered at once, else (0, 0)."""
    hostile = roles["hostile"]
    if name == "records":
        victim = ledger.nodes[0]
        target = next(gid for gid, i in reversed(list(ledger.published.items())) if i == 0)
        answer = hostile.request({"op": "attack_records", "victim": victim.peer_id, "group_id": target})
        answer["answers"].pop("valid_control")
        return len(answer["answers"]), max(sum(bool(per_peer[j] and per_peer[j][0])
                                               for per_peer in answer["answers"].values())
                                           for j in range(len(answer["asked"])))
    if name == "gossip":
        targets = [node.peer_id for node in ledger.nodes]
        hostile.request({"op": "flood", "attack": name, "n": n,
                         "params": {"burst": GossipConfig().burst, "targets": targets}})
    elif name == "fill":
        for filler in fillers:
            filler.request({"op": "flood", "attack": "fill", "n": n})
    elif name == "honest_ban":
        ledger.nodes[0].request({"op": "ban", "peer": ledger.nodes[1].peer_id})
    elif name != "baseline":
        hostile.request({"op": "flood", "attack": name, "n": n})
    return 0, 0


def _attack_done(name: str, roles: dict[str, JsonProcess], fillers: list[JsonProcess]) -> bool:
    if name in ("baseline", "records", "honest_ban"):
        return True
    attackers = fillers if name == "fill" else [roles["hostile"]]
    return all(a.request({"op": "done"})["done"] for a in attackers)


def _attack_results(name: str, roles: dict[str, JsonProcess], fillers: list[JsonProcess]) -> tuple[int, int]:
    if name == "fill":
        results = [f.request({"op": "results"})["fill"] for f in fillers]
        stored: dict[str, int] = {}
        for result in results:
            for peer, n in result.get("accepted", {}).items():
                stored[peer] = stored.get(peer, 0) + n
        return sum(r.get("sent", 0) for r in results), max(stored.values(), default=0)
    result = roles["hostile"].request({"op": "results"})[name]
    sent = result.get("sent", 0)
    if name == "gossip":  # messages written to each node; gossip stores nothing
        sent = max(sum(per_target.values()) for per_target in sent.values())
    return sent, max(result.get("accepted", {0: 0}).values(), default=0)


def _phase(name: str, n: int, roles: dict[str, JsonProcess], ledger: _Ledger, *, rounds: int, groups: int,
           deadline: float, fillers: list[JsonProcess] = ()) -> PhaseRow:
    pids = _processes(roles)
    reset_peaks(pids)
    before, attacker_before, exchanges_before = set(ledger.published), ledger.from_attacker, ledger.exchanges
    attempted_before, failures_before = set(ledger.attempted), dict(ledger.failures)
    views_before = ledger.views()
    sent, stored = _attack(name, n, roles, ledger, list(fillers))
    times, overruns = [], []
    while len(times) < rounds * len(ledger.nodes) or not _attack_done(name, roles, list(fillers)):
        if len(times) >= rounds * len(ledger.nodes) * _MAX_ROUNDS_FACTOR:
            logger.warning("the %s attack still runs after %d rounds; waiting for it without rounds", name, len(times))
            break
        for answer in ledger.exchange(count=groups, deadline=deadline):
            times.append(answer["round_s"])
            overruns.append(answer["gather_s"] - deadline)
    ledger.exchange(count=0, deadline=deadline)  # a last gather for what is still on its way
    if name not in ("baseline", "records", "honest_ban"):
        sent, stored = _attack_results(name, roles, list(fillers))
    trust = _trust(views_before, ledger.views(), ledger.honest)
    new = set(ledger.published) - before
    failures = {why: n - failures_before.get(why, 0) for why, n in ledger.failures.items()
                if n > failures_before.get(why, 0)}
    return PhaseRow(attack=name, sent=sent, stored=stored, from_attacker=ledger.from_attacker - attacker_before,
                    honest_published=len(new), honest_delivered=ledger.delivered(new),
                    honest_per_round=ledger.receptions(set(ledger.attempted) - attempted_before)
                    / max(1, ledger.exchanges - exchanges_before), publish_failures=failures,
                    honest_bans=trust.honest_bans, imposed_bans=int(name == "honest_ban"),
                    attackers_banned=trust.attackers_banned, attacker_points=trust.attacker_points,
                    attacker_refused=trust.attacker_refused, ban_reasons=trust.ban_reasons,
                    rounds=len(times) // len(ledger.nodes),
                    over_2x=sum(t > 2 * deadline for t in times), max_round_s=max(times),
                    max_gather_over_s=max(overruns),
                    peak_mb={role: status_mb(pid, "VmHWM") for role, pid in pids.items()})


ATTACKS = ("records", "bodies", "dictionary", "random_keys", "replays", "gossip", "pointers", "fill", "honest_ban")
"""In this order: the pointer flood and the fill late, as their records fill the attackers' quotas and the
storage of every peer for a TTL; the honest ban last, on storage the fill has filled."""


def run_hostile_bench(*, rounds: int, groups: int, deadline: float, identities: int, pointers: int,
                      random_keys: int, dictionary_items: int, bad_bodies: int, fill: int = 1900,
                      storage_mib: float = 32.0, memory_records: int = 2000,
                      progress: Callable[[str], None] = lambda s: None) -> HostileBench:
    """Runs the baseline and every attack in turn; no process outlives this call."""
    sizes = {"pointers": pointers, "random_keys": random_keys, "dictionary": dictionary_items,
             "bodies": bad_bodies, "replays": 3, "records": 0, "gossip": 4, "fill": fill, "honest_ban": 0}
    memory = None
    if memory_records:
        progress("memory of a stored record")
        memory = measure_record_memory(memory_records)
    storage_bytes = int(storage_mib * (1 << 20))
    ban = LedgerConfig(ban_seconds=max(4.0, rounds * deadline / 2))  # a ban that ends within its phase
    with tempfile.TemporaryDirectory(prefix="ftis-bench-hostile-") as tmp:
        roles, settings = _start(Path(tmp), ttl=600.0, identities=identities, storage_bytes=storage_bytes,
                                 ledger=ban)
        try:
            bootstrap = settings["peers"][0].rsplit("/p2p/", 1)[-1]
            ledger = _Ledger([roles[f"node{i}"] for i in range(3)], bootstrap=bootstrap)
            phases = [_phase("baseline", 0, roles, ledger, rounds=rounds, groups=groups, deadline=deadline)]
            baseline = {role: status_mb(pid, "VmRSS") for role, pid in _processes(roles).items()}
            for name in ATTACKS:
                progress(f"{name} attack")
                fillers = _start_fillers(Path(tmp), settings) if name == "fill" else []
                try:
                    phases.append(_phase(name, sizes[name], roles, ledger, rounds=rounds, groups=groups,
                                         deadline=deadline, fillers=fillers))
                finally:
                    for filler in fillers:
                        filler.kill()
                logger.info("%s", phases[-1])
        finally:
            for proc in roles.values():
                proc.kill()
    return HostileBench(deadline=deadline, groups=groups, record_memory=memory, storage_bytes=storage_bytes,
                        fill=fill, baseline_mb=baseline, phases=phases)


def format_hostile(bench: HostileBench) -> str:
    base = bench.phases[0].honest_per_round or 1.0
    lines = [
        f"3 nodes on loopback under attack, {bench.groups} group(s) of 32 KiB per node per round, "
        f"deadline {bench.deadline:g} s, storage {bench.storage_bytes / (1 << 20):g} MiB a node, "
        f"fill: {FILLERS} identities with daemons of their own x {bench.fill} pointers",
    ]
    if bench.record_memory is not None:
        lines.append(format_record_memory(bench.record_memory))
    lines.append(
        f"{'attack':>12} {'sent':>7} {'stored':>7} {'accepted':>8} {'honest':>9} {'/round':>6} {'vs base':>7} "
        f"{'honest bans':>11} {'attackers banned':>16} {'points':>7} {'refused':>7} {'rounds':>6} {'>2x':>4} "
        f"{'max round s':>11} {'worst RSS +MB':>22}")
    for row in bench.phases:
        growth = {role: peak - bench.baseline_mb.get(role, peak) for role, peak in row.peak_mb.items()
                  if not role.startswith("hostile")}
        worst = max(growth, key=growth.get) if growth else "-"
        bans = f"{row.honest_bans}" + (f" ({row.imposed_bans} imposed)" if row.imposed_bans else "")
        lines.append(
            f"{row.attack:>12} {row.sent:>7} {row.stored:>7} {row.from_attacker:>8} "
            f"{row.honest_delivered:>4}/{row.honest_published:<4} {row.honest_per_round:>6.1f} "
            f"{row.honest_per_round / base:>7.2f} {bans:>11} {row.attackers_banned:>16} {row.attacker_points:>7.0f} "
            f"{row.attacker_refused:>7} {row.rounds:>6} {row.over_2x:>4} {row.max_round_s:>11.2f} "
            f"{growth.get(worst, 0.0):>+9.1f} {worst:>12}")
    reasons: dict[str, int] = {}
    for row in bench.phases:
        for reason, n in row.ban_reasons.items():
            reasons[reason] = reasons.get(reason, 0) + n
    for row in bench.phases:
        if row.publish_failures:
            lines.append(f"failed honest publishes in {row.attack}: "
                         + ", ".join(f"{why} x{n}" for why, n in row.publish_failures.items()))
    lines.append("causes of all bans: " + (", ".join(f"{r} x{n}" for r, n in sorted(reasons.items())) or "none"))
    lines.append("peak RSS MB (baseline end -> highest peak of any attack phase):")
    for role, base_mb in bench.baseline_mb.items():
        peak = max(row.peak_mb.get(role, 0.0) for row in bench.phases[1:])
        lines.append(f"  {role:>16} {base_mb:8.1f} -> {peak:8.1f}  ({peak - base_mb:+.1f})")
    return "\n".join(lines)
