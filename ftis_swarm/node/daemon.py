"""The node daemon: rounds of generate, publish, gather, learn, refresh, checkpoint.

Owns the round (`Node`), the one place where rollout, learner, peers and a swarm meet, in two halves:
`Node.publish_round` (steps 1-3: prompts drawn by (seed, round) and rendered, own groups generated
by the served policy version, published with their hints) and `Node.learn_published` (steps 4-7:
gather, the swarm's faults charged, the cherry check, the intake, `learning.learn_round`, the hints
checked, one record logged). `Node.run_round` runs both; `Node.run` runs rounds, checkpoints every
`checkpoint_every` rounds and at the last, and closes. Imports: node's own modules, learner, peers,
wire, models, metrics, config; a swarm only as a `peers.protocol.Swarm` (`Node(cfg, swarm=factory)`;
the hivemind one by default).

- A resumed node repeats an uninterrupted run exactly: `Node.checkpoint` holds all that a round's
  randomness and choices depend on, and `drop_rounds_after` cuts the run's per-round files back to
  its round (to nothing without one).
- A peer's group enters at most one persisted update (`NodeState.consumed`, checkpointed).
- No peer stops a node: its groups are bounded by the intake, its faults charged to the ledger.
  `max_failed_updates` failed updates in a row do (`health.py`): it publishes nothing more,
  checkpoints none of those rounds, and leaves.
- SIGTERM/SIGINT (`install_signal_handlers`): the round in progress ends, a checkpoint, the swarm left.
- With `max_staleness` >= 1 the own groups come from the generator running ahead (`pipeline.py`:
  `_own_groups`, `pipeline.finish`, `own_ahead` in the checkpoint).

The round step by step: docs/architecture.md, "One round of a node"; the operator's view:
docs/node.md ("Untrusted peers", "Health", "Checkpoints, restarts, signals").
"""

from __future__ import annotations

import json
import logging
import os
import signal
import time
from collections import Counter, OrderedDict, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from ftis_swarm.config import NodeConfig
from ftis_swarm.learner.checkpoint import CheckpointManager
from ftis_swarm.metrics import read_jsonl
from ftis_swarm.models import portable_model_name
from ftis_swarm.node.components import build_components
from ftis_swarm.node.health import UpdateHealth
from ftis_swarm.node.heldout import HeldoutEval
from ftis_swarm.node.hints import check_hints, own_hints
from ftis_swarm.node.learning import Learning, RoundLearning, learn_round
from ftis_swarm.node.peer_yield import peer_yield
from ftis_swarm.node.pipeline import Pipeline
from ftis_swarm.node.rollouts import generate_own
from ftis_swarm.node.status import open_status, reach_metrics
from ftis_swarm.peers.cherry import MixedShareCheck
from ftis_swarm.peers.intake import Budget, PeerIntake, within_vocab
from ftis_swarm.peers.ledger import short_peer
from ftis_swarm.peers.protocol import SwarmFactory
from ftis_swarm.wire import Group

log = logging.getLogger(__name__)

MAX_REMEMBERED_IDS = 100_000

KEPT_RESULTS = 1_000
"""Rounds whose result `Node.run` keeps and returns, the latest (each round's record is in
metrics.jsonl): about 8 KB a round, which a node running for weeks must not hold for every round."""


@dataclass
class RoundResult:
    round: int
    record: dict[str, Any]
    """The round's line of metrics.jsonl."""


@dataclass
class Published:
    """A round's publish half: its own groups, and what it counted and when (`time.perf_counter`)."""

    round: int
    own: list[Group]
    counts: Counter
    started: float
    generated: float
    published: float


@dataclass
class NodeState:
    """What a checkpoint carries besides the weights: where the node is and what it consumed."""

    start_round: int = 1
    consumed: "OrderedDict[str, None]" = field(default_factory=OrderedDict)

    def consume(self, group_ids: list[str]) -> None:
        for gid in group_ids:
            self.consumed[gid] = None
        while len(self.consumed) > MAX_REMEMBERED_IDS:
            self.consumed.popitem(last=False)


class Node:
    """Build with `Node(cfg)`, then `run()`; `request_stop()` ends it after the current round."""

    def __init__(self, cfg: NodeConfig, *, ranks: Any = None, swarm: Optional[SwarmFactory] = None) -> None:
        self.cfg = cfg
        self.state = NodeState()
        self._stop = False
        self.health = UpdateHealth(cfg.max_failed_updates)
        checkpoints = CheckpointManager(cfg.run_dir / "checkpoints", keep=cfg.keep_checkpoints)
        latest = checkpoints.latest()
        # before the sinks open, as they append to what this keeps; without a complete checkpoint every
        # logged round died with the process that logged it (round 0's evaluation too: it is redone)
        last_round = checkpoints.round_of(latest) if latest is not None else -1
        for path in (cfg.run_dir / "metrics.jsonl", cfg.run_dir / "consumed.jsonl"):
            drop_rounds_after(path, last_round)
        # ranks: rank 0 of torchrun; swarm: the transport's factory (peers.protocol), None for hivemind
        self.parts = build_components(cfg, checkpoints=checkpoints, ranks=ranks, swarm=swarm)
        context = self.parts.backend.context_len
        p = self.parts
        # seeded by the peer id and drawn by round, as the swarm's fetch selection: both take one strangers' draw
        self.intake = PeerIntake(Budget.of(cfg, context=context), seed=p.swarm.peer_id)
        p.swarm.set_budget(self.intake.budget)  # the swarm fetches only what an update takes
        self.cherry = MixedShareCheck(window=cfg.ledger.cherry_window, z=cfg.ledger.cherry_z)
        """Publishers whose announced groups are mixed beyond their pass rate (peers/cherry.py): no credit."""
        self.learning = Learning(me=p.swarm.peer_id, learner=p.learner, tokenizer=p.tokenizer, tasks=p.tasks,
                                 admission=p.admission, serving=p.serving, peer_ledger=p.peer_ledger,
                                 health=self.health)
        # max_staleness >= 1: round r + k generates while round r learns (pipeline.py); else the synchronous round
        self.pipeline = Pipeline.build(p, self.learning) if cfg.max_staleness else None
        self.generator = self.pipeline.backend if self.pipeline else p.backend
        """The backend that samples this node's own groups (its generate calls are checkpointed)."""
        self.last_learning: Optional[RoundLearning] = None
        """The latest round's learning half (its labelled groups and raw metrics), for the lab's records."""
        self.heldout = HeldoutEval(cfg, backend=p.backend, tokenizer=p.tokenizer)
        """Held-out accuracy at round 0, every `eval_every` rounds and at the last (heldout.py)."""
        if latest is not None:
            self._resume(latest)
        self.status = open_status(cfg, peer_id=p.swarm.peer_id, start_round=self.state.start_round,
                                  accounts=p.peer_ledger.snapshot(), reach=p.swarm.counters().get("reach"),
                                  heldout=self.heldout.curve)
        """status.json each round, and the status page when `status_port` is set (status.py)."""
        self.status.task_digest = getattr(p.task, "digest", "")

    # -- lifecycle -------------------------------------------------------------------------
    def _resume(self, latest: Path) -> None:
        p = self.parts
        saved = p.checkpoints.load(latest, p.learner)
        p.sync_rollout_weights(resumed_from=latest)
        self.state.start_round = int(saved["round"]) + 1
        self.state.consume(list(saved.get("consumed", [])))
        p.peer_ledger.load_state(saved.get("peer_ledger", {}))
        p.learner.detector.load_state(saved.get("forgery", {}))
        self.generator.restore_generate_calls(int(saved.get("rollout_calls", 0)))
        self.intake.load_state(saved.get("intake", saved.get("intake_deferred", [])), limits=self.cfg.swarm.wire)
        self.cherry.load_state(saved.get("cherry", {}))
        self.health.load_state(saved.get("health", {}))
        self.heldout.load_state(saved.get("heldout", {}))
        if self.pipeline is not None:
            self.pipeline.load_state(saved.get("own_ahead", {}), limits=self.cfg.swarm.wire)
        elif saved.get("own_ahead", {}).get("rounds"):
            log.warning("the checkpoint holds own groups generated ahead, which max_staleness 0 does not use")
        log.info("resumed from %s: next round %d, policy version %d", latest.name, self.state.start_round,
                 p.learner.policy_version)

    def request_stop(self, *_: Any) -> None:
        if not self._stop:
            log.info("stop requested: finishing the round in progress")
        self._stop = True

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self.request_stop)
        signal.signal(signal.SIGINT, self.request_stop)

    def run(self, *, on_round: Optional[Callable[[RoundResult], None]] = None) -> list[RoundResult]:
        """Runs rounds until `cfg.rounds` or a stop request; checkpoints and leaves at the end.

        Returns the last `KEPT_RESULTS` rounds' results, oldest first. A node that `health`
        stopped leaves without a checkpoint of its failed rounds.
        """
        results: deque[RoundResult] = deque(maxlen=KEPT_RESULTS)
        last_saved = self.state.start_round - 1
        r = self.state.start_round
        try:
            while r <= self.cfg.rounds and not self._stop:
                res = self.run_round(r)
                results.append(res)
                if on_round:
                    on_round(res)
                if self.health.stopped:
                    break
                if r % self.cfg.checkpoint_every == 0 or r == self.cfg.rounds:
                    self.checkpoint(r)
                    last_saved = r
                r += 1
            if results and last_saved < results[-1].round and not self.health.stopped:
                self.checkpoint(results[-1].round)
        finally:
            self.close()
        return list(results)

    def close(self) -> None:
        """Stops the generator, leaves the swarm, closes the backend, the sinks and the status page (`Node.run` ends with it)."""
        if self.pipeline is not None:
            self.pipeline.close()
        self.parts.close()
        self.status.close()

    def checkpoint(self, round_idx: int) -> None:
        p = self.parts
        state = {"consumed": list(self.state.consumed), "peer_id": p.swarm.peer_id,
                 "peer_ledger": p.peer_ledger.state(), "forgery": p.learner.detector.state(),
                 "rollout_calls": self.generator.generate_calls, "intake": self.intake.state(),
                 "cherry": self.cherry.state(),
                 "health": self.health.state(), "heldout": self.heldout.state()}
        if self.pipeline is not None:
            state["own_ahead"] = self.pipeline.state()
        path = p.checkpoints.save(round_idx=round_idx, learner=p.learner, tokenizer=p.tokenizer, state=state,
                                  base_model=portable_model_name(self.cfg.model))
        log.info("checkpoint %s", path.name)

    # -- one round -------------------------------------------------------------------------
    def run_round(self, r: int) -> RoundResult:
        """Round `r` whole: its publish half, then its learn half."""
        return self.learn_published(self.publish_round(r))

    def publish_round(self, r: int) -> Published:
        """Steps 1 to 3 of round `r`: this node's own groups, generated (or taken ahead) and published.

        Several nodes of one process (the lab, on a `peers.loopback` hub) run every node's
        publish half of a round before any learn half, so each gathers the others' round.
        Round 1 begins with round 0's held-out evaluation (the weights before any update).
        """
        p = self.parts
        if r == 1 and self.heldout.due(0):
            self._log_start_evaluation()
        counts: Counter = Counter()
        t0 = time.perf_counter()
        own = self._own_groups(r, counts)
        t_gen = time.perf_counter()
        publishable = [g for g in own if within_vocab(g, p.token_bound)]  # peers would refuse the rest
        counts["publish_out_of_vocab"] += len(own) - len(publishable)
        counts["publish_failed"] += len(own) - len(publishable)
        if getattr(p.task, "local_only", False):  # a verifier without source: no digest peers could agree on
            publishable = []
        if publishable:
            ok = p.swarm.publish_round(publishable, round=r, correct=own_hints(self.learning, publishable)).ok
            counts["published" if ok else "publish_failed"] += len(publishable)
        return Published(r, own, counts, started=t0, generated=t_gen, published=time.perf_counter())

    def learn_published(self, published: Published) -> RoundResult:
        """Steps 4 to 7 of a round whose publish half is `published`: gather, intake, learn, log."""
        p, cfg = self.parts, self.cfg
        r, own, counts = published.round, published.own, published.counts
        t_half = time.perf_counter()  # other nodes of this process may have run since the publish half ended
        gathered = p.swarm.gather(deadline=cfg.round_deadline, round=r)
        self.status.saw_groups(gathered)  # which task digests the peers have (status.json's `tasks`)
        p.peer_ledger.charge_swarm(p.swarm.drain_peer_faults(), me=p.swarm.peer_id)
        flagged = self.cherry.note(p.swarm.drain_announced())  # every announced hint, fetched or not
        p.peer_ledger.withhold_credit(flagged)
        counts["publishers_cherry_flagged"] += len(flagged)
        peers, dropped = self._take_peer_groups(r, gathered, counts)
        t_gather = time.perf_counter()

        learned = learn_round(self.learning, r, own, peers)
        self.last_learning = learned
        counts.update(learned.counts)
        lied, checked = check_hints(learned.scored, p.swarm.hints([g.group_id for g in peers]), me=p.swarm.peer_id)
        p.peer_ledger.charge_counts(lied, me=p.swarm.peer_id)
        counts.update(checked)
        self.state.consume([g.group_id for g in peers])
        p.consumed.log({"round": r, "policy_version": p.learner.policy_version,
                      "peer_groups": [g.group_id for g in peers]})
        t_learn = time.perf_counter()
        overlap = self.pipeline.finish() if self.pipeline is not None else {}  # wait for r + k, sync its weights
        t_end = time.perf_counter()

        record: dict[str, Any] = {
            "round": r,
            "time": time.time(),
            "policy_version": p.learner.policy_version,
            "reward": _mean(learned.own_rewards),
            "accuracy": _mean(learned.own_correct),
            "peer_reward": _mean(learned.peer_rewards),
            "own_groups": len(own),
            "peer_groups": len(peers),
            "time_generate": published.generated - published.started,
            "time_gather": published.published - published.generated + t_gather - t_half,
            "time_learn": t_learn - t_gather,
            "time_round": published.published - published.started + t_end - t_half,
            **overlap,
            **counts,
            **self._named_sources(learned.metrics),
            **p.peer_ledger.take_round(),
            **learned.health,
            **peer_yield(peers + dropped, learned.items, learned.metrics, source_of=self.learning.source),
        }
        swarm_counts = p.swarm.counters()
        for key in ("fetched_bytes", "served_bytes", "fetched_bodies", "chosen", "not_chosen"):  # since it started
            record[f"swarm_{key}"] = swarm_counts.get(key, 0)
        for reason, n in swarm_counts.get("rejected", {}).items():
            record[f"swarm_rejected_{reason}"] = n
        record.update(reach_metrics(swarm_counts.get("reach")))
        if self.heldout.due(r):  # after the generation ahead finished: the served weights are this round's
            record.update(self.heldout.run(r))
        p.sink.log(record)
        self.status.observe(record, p.peer_ledger.snapshot(), reach=swarm_counts.get("reach"))
        return RoundResult(r, record)

    def _own_groups(self, r: int, counts: Counter) -> list[Group]:
        """Round `r`'s own groups: generated now, or ahead, the next generation then started (pipeline.py)."""
        if self.pipeline is None:
            p = self.parts
            return generate_own(p.backend, p.task, p.tokenizer, self.cfg, r, counts)
        own = self.pipeline.take(r, counts)
        self.pipeline.start(r)
        return own

    def _log_start_evaluation(self) -> None:
        """Round 0's record: the held-out accuracy of the weights the node starts from."""
        p = self.parts
        record = {"round": 0, "time": time.time(), "policy_version": p.learner.policy_version, **self.heldout.run(0)}
        p.sink.log(record)
        self.status.observe_heldout(record)

    def _take_peer_groups(self, r: int, groups: list[Group], counts: Counter) -> tuple[list[Group], list[Group]]:
        """The peers' groups the update takes, and those the intake dropped for good (peer_yield.py)."""
        p = self.parts
        taken = self.intake.take(groups, self.state.consumed, p.peer_ledger.allows,
                                 standing=p.learner.detector.has_standing, rank=p.peer_ledger.score,
                                 origin=p.swarm.origin_of, draw=r, recent=p.peer_ledger.recent,
                                 settled=p.peer_ledger.settled, tier=p.peer_ledger.tenure_class)
        self.status.observe_origins(taken.by_origin)
        counts.update(taken.counts)
        counts["gathered"] += len(groups)
        self.parts.peer_ledger.charge_counts(taken.by_peer, me=self.parts.swarm.peer_id)
        return taken.kept, taken.dropped

    def _named_sources(self, metrics: dict[str, float]) -> dict[str, float]:
        names = {0: "self", **{i: short_peer(pid) for pid, i in self.learning.sources.items()}}
        out = {}
        for key, value in metrics.items():
            base, at, src = key.partition("@")
            out[f"{base}@{names.get(int(src), src)}" if at else key] = value
        return out


def drop_rounds_after(path: Path, last_round: int) -> None:
    """Rewrites a per-round JSONL file without the rounds a resume will redo.

    Those rounds' updates died with the process (they came after the checkpoint), so the
    files again describe the history of the weights the node now holds.
    """
    if not path.exists():
        return
    kept = [row for row in read_jsonl(path) if int(row.get("round", 0)) <= last_round]
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(row, separators=(",", ":")) + "\n" for row in kept))
    os.replace(tmp, path)


def _mean(xs: list) -> Optional[float]:
    return float(sum(xs)) / len(xs) if xs else None
