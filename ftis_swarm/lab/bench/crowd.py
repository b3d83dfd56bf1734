"""`ftis-node bench attacks --crowd-daemons N`: the standing part's crowd over the real swarm.

The standing part (`standing.py`) simulates its identities on the loopback hub; this one
gives each a daemon. The receiving node is a real `Node` in process with its own
`SwarmClient` (its p2pd on 127.0.2.1, the swarm's first peer). Its peers are real swarm
nodes (`scale_worker` processes: each a `SwarmClient` with its own p2pd, DHT peer, RSA key
and puzzle, several per process), publishing real signed rounds of honest arith groups of
the honest model (`standing.HonestPeers`, the groups built here with each node's peer id as
sender and handed to its worker as bytes):

- the crowd: N fresh identities, all on 127.0.9.1 (one origin, 127.0.9.0/24, as the
  storage crowd of `bench hostile --phase identities`), `PER_WORKER` to a process, one
  8-token group each a round;
- two earned peers, on 127.0.3.1 and 127.0.4.1 (an origin each), two groups each a round,
  and with `signal` (a model whose groups carry signal: the tiny preset's honest model never
  writes a number, so its groups earn no credit) a third of that model's; during a warm-up
  they alone publish, until both have standing and credit (a ledger score above 0: the
  swarm fetches only such a peer as earned, `swarm/fetch/selection.py`);
- an honest newcomer on 127.0.5.1, one 24-token group a round.

Each round every peer publishes its round first (the workers answer once their pointers are
stored), then the node runs its round: generate, publish, gather with its deadline (the
swarm's fetch selection by the ledger's score, strangers drawn by origin from what it
saw), intake by standing, learn. Its consumed ids are mapped back to the groups built here.
The forgers and the copier stay on the loopback part: they test the learner's and the
intake's checks, which do not depend on the transport.

Figures: per round the crowd's and all strangers' (peers with neither standing nor tenure)
share of the peers' token budget in the update (the cap is `learner.strangers_share`) and by
origin, the groups the node gathered (fetched) beside those offered, the newcomer's first used round and its standing (round and
tokens), publish failures, and the 1-minute load average.
"""

from __future__ import annotations

import base64
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from ftis_swarm.config import LearnerConfig, NodeConfig, PuzzleConfig, SwarmConfig, TransportConfig
from ftis_swarm.lab.bench.identities import CROWD_HOST, CROWD_ORIGIN
from ftis_swarm.lab.bench.standing import CROWD_SAMPLING, RUN_ID, SAMPLING, HonestPeers, Shares
from ftis_swarm.lab.bench.swarm import JsonProcess
from ftis_swarm.models import load_model
from ftis_swarm.node.daemon import Node
from ftis_swarm.wire import Group, encode_group, tokenizer_fingerprint

RECEIVER_HOST = "127.0.2.1"
HONEST_HOSTS = ("127.0.3.1", "127.0.4.1", "127.0.5.1")
"""The two earned peers' and the newcomer's addresses: an origin each."""
PER_WORKER = 5
"""Crowd identities per worker process (each with its own p2pd)."""
ROUND_DEADLINE = 8.0
JOIN_TIMEOUT = 120.0
"""Seconds a daemon may take to join: two dozen starting at once on a loaded machine."""


@dataclass
class CrowdFigures(Shares):
    crowd: int
    processes: int
    """Worker processes of the crowd."""
    warmup_rounds: int
    """Rounds until both earned peers had standing."""
    rounds: int
    crowd_offered: list[int] = field(default_factory=list)
    """Per round: groups the crowd published."""
    gathered: list[int] = field(default_factory=list)
    """Per round: peers' groups the node's gather returned (fetched), of all peers."""
    crowd_used: list[int] = field(default_factory=list)
    """Per round: the crowd's groups in the update."""
    earned_standing: bool = False
    """Whether both earned peers had standing and credit when the main rounds began."""
    earned_with_standing: int = 0
    earned_with_credit: int = 0
    """Of the two earned peers when the main rounds began: those with standing, those with a ledger score above 0."""
    publish_failed: int = 0
    """Peers' rounds whose publish was not ok (`PublishResult.ok`)."""
    publish_reasons: dict[str, int] = field(default_factory=dict)
    """Why, by the reason's first words."""
    round_seconds: list[float] = field(default_factory=list)
    load: list[float] = field(default_factory=list)
    """1-minute load average at the start and at the end of the main rounds."""
    share_cap: float = 0.25


class _Peers:
    """The worker processes and the peer ids of their nodes: the crowd's, then the earned peers' and the newcomer's."""

    def __init__(self, cfg: SwarmConfig, *, crowd: int, per_worker: int, fp: str, vocab: int, logs: Path) -> None:
        sizes = [min(per_worker, crowd - i) for i in range(0, crowd, per_worker)]
        plans = [(k, [CROWD_HOST] * k) for k in sizes] + [(len(HONEST_HOSTS), list(HONEST_HOSTS))]
        self.workers: list[JsonProcess] = []
        try:
            for j, (k, hosts) in enumerate(plans):
                settings = {"cfg": cfg.model_dump_json(), "clients": k, "first": 0, "hosts": hosts,
                            "tokenizer_fp": fp, "vocab_size": vocab}
                self.workers.append(JsonProcess([sys.executable, "-m", "ftis_swarm.lab.bench.scale_worker",
                                                 json.dumps(settings)], log=logs / f"worker{j}.log"))
            for w in self.workers:
                w.joined()
        except BaseException:
            self.close()
            raise
        ids = [w.hello["peer_ids"] for w in self.workers]
        self.crowd = [p for ws in ids[:-1] for p in ws]
        self.earned, self.newcomer = ids[-1][:2], ids[-1][2]

    def publish(self, groups: list[Group], r: int) -> list[str]:
        """Each group by the node of its sender, as that node's round `r`, all at once; why each failed publish failed."""
        bodies = [[[base64.b64encode(encode_group(g)).decode() for g in groups if g.sender == p] for p in w.hello["peer_ids"]]
                  for w in self.workers]
        for w, b in zip(self.workers, bodies):
            w.send({"op": "publish", "round": r, "bodies": b})
        answers = [w.read() for w in self.workers]
        return [why for a in answers for ok, why in zip(a["ok"], a["reasons"]) if ok is False]

    def close(self) -> None:
        for w in self.workers:
            w.kill()


def run_crowd_bench(receiver: str, honest: str, *, crowd: int, rounds: int, workdir: Path,
                    signal: Optional[str] = None, max_warmup: int = 12, per_worker: int = PER_WORKER, seed: int = 0,
                    puzzle: Optional[PuzzleConfig] = None, standing_margin: float = 0.25,
                    progress: Callable[[str], None] = lambda s: None) -> CrowdFigures:
    """The crowd's figures over `rounds` main rounds after a warm-up of at most `max_warmup` rounds.

    `signal`: the model of the earned peers' third group a round (None: none); `puzzle`: the
    run's identity puzzle (default: the default one, a few CPU seconds an identity);
    `standing_margin`: the receiver's `learner.standing_margin` (a test raises it, so that
    standing comes in fewer rounds). No process outlives this call.
    """
    swarm = SwarmConfig(run_id=RUN_ID, transport=TransportConfig(host=RECEIVER_HOST, join_timeout=JOIN_TIMEOUT),
                        **({"puzzle": puzzle} if puzzle is not None else {}))
    total = rounds + max_warmup
    cfg = NodeConfig(model=receiver, task="arith", rounds=total, prompts_per_round=2, sampling=SAMPLING,
                     learner=LearnerConfig(lr=2e-6, standing_margin=standing_margin), max_failed_updates=total + 1, swarm=swarm,
                     round_deadline=ROUND_DEADLINE, run_dir=workdir / "crowd", seed=seed, eval_every=0)
    progress(f"the receiving node on {RECEIVER_HOST}")
    node = Node(cfg)
    try:
        p = node.parts
        joined = cfg.swarm.replace(transport={"peers": p.swarm.visible_maddrs})
        progress(f"{crowd} identities with daemons on {CROWD_HOST}, 2 earned peers and a newcomer")
        with tempfile.TemporaryDirectory(prefix="ftis-bench-crowd-") as logs:
            peers = _Peers(joined, crowd=crowd, per_worker=per_worker, fp=tokenizer_fingerprint(p.tokenizer),
                           vocab=p.token_bound, logs=Path(logs))
            try:
                models = [HonestPeers(load_model(m)[0], p.tokenizer, p.token_bound)
                          for m in ([honest, signal] if signal else [honest])]
                return _crowd_rounds(node, peers, *models, rounds=rounds, max_warmup=max_warmup, progress=progress)
            finally:
                peers.close()
    finally:
        node.close()


def _crowd_rounds(node: Node, peers: _Peers, honest: HonestPeers, signal: Optional[HonestPeers] = None, *,
                  rounds: int, max_warmup: int, progress: Callable[[str], None]) -> CrowdFigures:
    det, budget, ledger = node.parts.learner.detector, node.intake.budget.max_tokens, node.parts.peer_ledger

    def earned_groups(r: int) -> list[Group]:
        """The signal group first (the older: a stranger's groups are drawn oldest first), so credit comes soon."""
        first = signal.groups(peers.earned, r, salt=7) if signal else []
        return first + honest.groups([e for e in peers.earned for _ in range(2)], r, salt=5)

    def earned() -> bool:
        return all(det.has_standing(e) and ledger.score(e) > 0 for e in peers.earned)

    posted: dict[str, Group] = {}  # every group offered so far: the intake may take a deferred one rounds later

    def round_of(r: int, offered: list[Group]) -> tuple[list[Group], dict[str, Any]]:
        """Round `r` of the peers (`offered`, published first) and of the node: the peers' groups it took, its record."""
        for why in peers.publish(offered, r):
            fig.publish_failed += 1
            key = " ".join(why.split()[:6])
            fig.publish_reasons[key] = fig.publish_reasons.get(key, 0) + 1
        posted.update((g.group_id, g) for g in offered)
        before = set(node.state.consumed)
        record = node.run_round(r).record
        return [posted[gid] for gid in node.state.consumed if gid not in before and gid in posted], record

    fig = CrowdFigures(crowd=len(peers.crowd), processes=len(peers.workers) - 1, warmup_rounds=0, rounds=rounds,
                       share_cap=node.cfg.learner.strangers_share)
    r = 0
    while fig.warmup_rounds < max_warmup and not earned():
        r, fig.warmup_rounds = r + 1, fig.warmup_rounds + 1
        progress(f"warm-up round {fig.warmup_rounds}")
        round_of(r, earned_groups(r))
    fig.earned_standing = earned()
    fig.earned_with_standing = sum(det.has_standing(e) for e in peers.earned)
    fig.earned_with_credit = sum(ledger.score(e) > 0 for e in peers.earned)
    crowd = set(peers.crowd)
    fig.load.append(os.getloadavg()[0])
    for main in range(1, rounds + 1):
        r += 1
        progress(f"round {main} of {rounds} ({len(crowd)} identities with daemons)")
        offered = honest.groups(peers.crowd, r, salt=2, sampling=CROWD_SAMPLING)
        offered += honest.groups([peers.newcomer], r, salt=4)
        offered += earned_groups(r)
        # the first part of the budget: standing, or tenure (the ledger's `settled`, docs/method.md "Tenure")
        had = {s: det.has_standing(s) or ledger.settled(s) for s in [*peers.crowd, peers.newcomer, *peers.earned]}
        t0 = time.perf_counter()
        kept, record = round_of(r, offered)
        fig.round_seconds.append(time.perf_counter() - t0)
        fig.add_shares(kept, had, budget=budget, crowd=crowd, origin_of=node.parts.swarm.origin_of)
        fig.crowd_offered.append(sum(g.sender in crowd for g in offered))
        fig.gathered.append(int(record.get("gathered", 0)))
        fig.crowd_used.append(sum(g.sender in crowd for g in kept))
        if fig.newcomer_first_used is None and any(g.sender == peers.newcomer for g in kept):
            fig.newcomer_first_used = main
        if fig.newcomer_standing_round is None and det.has_standing(peers.newcomer):
            fig.newcomer_standing_round, fig.newcomer_standing_tokens = main, det.tokens(peers.newcomer)
    fig.load.append(os.getloadavg()[0])
    return fig


def format_crowd(f: CrowdFigures) -> str:
    newcomer = HONEST_HOSTS[2].rsplit(".", 1)[0] + ".0/24"
    named = {CROWD_ORIGIN: f"the crowd's ({CROWD_ORIGIN})", newcomer: f"the newcomer's ({newcomer})"}
    lines = [f"crowd with daemons: {f.crowd} fresh identities on {CROWD_HOST} ({f.processes} processes, a p2pd each), "
             f"2 earned peers and a newcomer of their own origins, a Node on the real swarm "
             f"(warm-up {f.warmup_rounds} rounds: {f.earned_with_standing} of 2 with standing, "
             f"{f.earned_with_credit} with credit; "
             f"then {f.rounds})",
             f"strangers' share of the peers' token budget per update (cap {f.share_cap:.2f}): "
             + " ".join(f"{x:.2f}" for x in f.strangers_share)
             + "; the crowd's: " + " ".join(f"{x:.2f}" for x in f.crowd_share),
             "strangers' share of the peers' tokens used: " + " ".join(f"{x:.2f}" for x in f.strangers_of_used),
             "the crowd's groups offered / used per round: "
             + " ".join(f"{o}/{u}" for o, u in zip(f.crowd_offered, f.crowd_used))
             + "; peers' groups gathered: " + " ".join(str(n) for n in f.gathered)]
    lines += f.origin_lines(named)
    load = f"; 1-min load {f.load[0]:.1f} at the first round, {f.load[-1]:.1f} at the end" if f.load else ""
    why = ", ".join(f"{n} {k}" for k, n in f.publish_reasons.items())
    lines.append(f"publishes failed: {f.publish_failed}{f' ({why})' if why else ''}; seconds a round: "
                 + " ".join(f"{s:.1f}" for s in f.round_seconds) + load)
    return "\n".join(lines)
