"""The learning half of a round, the one copy: score, label, update, settle the ledger, serve.

`learn_round(learning, r, own, peers)` takes the round's own groups and the peers' groups
the intake kept, and:

1. admits and scores every group with this node's verifier (`scoring.py`); a refused
   group is counted (`rejected_<reason>`) and charged to its sender in the ledger;
2. labels each sample (docs/method.md, Vocabulary): **own** (sent by this node, stamped with the learner's
   current policy version) is on-policy and never filtered; **stale** (own, from an older
   version: groups generated ahead with `max_staleness` >= 1) is off-policy, weighted, never
   filtered, counted in `stale_groups`; **peer** is off-policy and filterable, with a
   source index per sender (0 is this node);
3. makes one F-TIS update on the vertical groups; a raise or a non-finite step is a
   failed update for the health check (`health.py`), never a crash;
4. credits each peer for the samples of its that carried signal and passed every check, and
   charges it for what the update withheld (`peers/ledger.py`);
5. serves the new weights with the version guard (`serving.py`): the backend's version
   follows the learner's, which advances only when an optimiser step was taken.

Generation is not in here: the caller passes the own groups in (`rollouts.py` makes them),
so they may come from an older policy version. The daemon alone calls `learn_round` (the
lab runs real nodes); the experiment's horizontal arm, which a node refuses, builds its
mixed groups on `score` and `update_and_serve`.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, Sequence

from ftis_swarm.config import NodeConfig
from ftis_swarm.learner.aligned import Aligned
from ftis_swarm.learner.batch import ScoredGroup
from ftis_swarm.learner.learner import Learner
from ftis_swarm.node.health import UpdateHealth, update_failure
from ftis_swarm.node.scoring import Admission, ScoredBatch, TaskCache, ended, score_groups
from ftis_swarm.node.serving import Serving
from ftis_swarm.peers import faults
from ftis_swarm.peers.ledger import PeerLedger
from ftis_swarm.rollout.base import eos_token_ids
from ftis_swarm.tasks import wire_name
from ftis_swarm.wire import Group

log = logging.getLogger(__name__)


def node_admission(cfg: NodeConfig, tokenizer_fp: str) -> Admission:
    """What a node with `cfg` and this tokenizer accepts from a group before it scores it."""
    return Admission(tokenizer_fp=tokenizer_fp, accept_tasks=frozenset(wire_name(t) for t in cfg.accepted_tasks),
                     max_prompt_overhead=cfg.learner.max_prompt_overhead,
                     align_limit=cfg.swarm.wire.max_completion_tokens if cfg.learner.cross_tokenizer else None)


@dataclass
class Learning:
    """One node's learner and what its updates are accounted to."""

    me: str
    """This node's peer id: the sender of its own groups."""
    learner: Learner
    tokenizer: Any
    tasks: TaskCache
    admission: Admission
    serving: Serving
    peer_ledger: PeerLedger
    health: UpdateHealth
    sources: dict[str, int] = field(default_factory=dict)
    """Peer id -> the source index of its samples in the loss's per-source metrics (this node is 0)."""

    eos_ids: frozenset[int] | None = None
    """The ids that end a completion, as this node's sampler stops on them; None: read from the tokenizer and
    the learner's model on first use (`eos`)."""
    own_scores: dict[str, list] = field(default_factory=dict)
    """Group id -> verifier scores of this node's own groups, scored at publish for their hint (`hints.own_hints`)
    and reused by the round's update (`score`), which empties it: each own group is verified once."""

    def eos(self) -> frozenset[int]:
        """`eos_ids`, read once (empty when the model names no EOS: then no EOS rule applies)."""
        if self.eos_ids is None:
            model = self.learner.model
            try:
                self.eos_ids = frozenset(eos_token_ids(self.tokenizer, getattr(model, "config", None),
                                                       getattr(model, "generation_config", None)))
            except ValueError:
                self.eos_ids = frozenset()
        return self.eos_ids

    def align_eos(self) -> int | None:
        """The EOS a peer's stop maps to in a group of another tokenizer: the tokenizer's own, else the
        lowest of `eos`; None when the model names none (such groups are then refused)."""
        own = getattr(self.tokenizer, "eos_token_id", None)
        return int(own) if isinstance(own, int) else min(self.eos(), default=None)

    def source(self, sender: str) -> int:
        return 0 if sender == self.me else self.sources.setdefault(sender, len(self.sources) + 1)


@dataclass
class RoundLearning:
    """What the round's record needs from its learning half."""

    items: list[ScoredGroup]
    """The labelled groups the update was given."""
    metrics: dict[str, float]
    """The learner's update metrics (per-source keys `key@<index>`)."""
    health: dict[str, Any]
    """The health check's keys for the record."""
    counts: Counter
    """`rejected_<reason>` and `stale_groups`."""
    rejected_by_peer: Counter = field(default_factory=Counter)
    """(sender, reason) -> groups the scorer refused (each charged to its sender)."""
    own_rewards: list[float] = field(default_factory=list)
    own_correct: list[bool] = field(default_factory=list)
    peer_rewards: list[float] = field(default_factory=list)
    own_in_batch: int = 0
    scored: ScoredBatch = field(default_factory=ScoredBatch)
    """Every group's scores by this node's verifier (a peer's signed hint is checked against them: `hints.py`)."""


def score(learning: Learning, groups: Sequence[Group], counts: Counter) -> ScoredBatch:
    """Admits and scores `groups` with this node's verifier; refusals counted and charged to their senders."""
    scored = score_groups(groups, learning.tokenizer, learning.tasks,
                          admission=replace(learning.admission, eos_ids=learning.eos() or None,
                                            align_eos=learning.align_eos()), memo=learning.own_scores)
    learning.own_scores.clear()
    counts.update({f"rejected_{k}": v for k, v in scored.rejected.items()})
    learning.peer_ledger.charge_counts(scored.rejected_by_peer, me=learning.me)
    return scored


def label(learning: Learning, group: Group, rewards: Sequence[float], aligned: Aligned | None = None) -> ScoredGroup:
    """A vertical group labelled own (on-policy), stale (own, older version: off-policy) or peer (filterable);
    `aligned`: a peer group of another tokenizer on this learner's tokens (`ScoredBatch.aligned`)."""
    mine = group.sender == learning.me
    current = group.policy_version == learning.learner.policy_version
    stopped = aligned.ended if aligned is not None else ended(group, learning.eos()) if learning.eos() else None
    return ScoredGroup.vertical(group, rewards, offpolicy=not (mine and current), filterable=not mine,
                                source=learning.source(group.sender), ended=stopped, aligned=aligned)


def learn_round(learning: Learning, r: int, own: Sequence[Group], peers: Sequence[Group]) -> RoundLearning:
    """Round `r`'s learning on `own` (from any policy version of this node) plus `peers` (module docstring)."""
    counts: Counter = Counter()
    scored = score(learning, list(own) + list(peers), counts)
    out = RoundLearning(items=[], metrics={}, health={}, counts=counts, rejected_by_peer=scored.rejected_by_peer,
                        scored=scored)
    for g, rewards, correct in zip(scored.groups, scored.rewards, scored.correct):
        item = label(learning, g, rewards, scored.aligned.get(g.group_id))
        _count_capped(item, counts)
        out.items.append(item)
        mine = g.sender == learning.me
        (out.own_rewards if mine else out.peer_rewards).extend(rewards.tolist())
        if mine:
            out.own_correct.extend(correct.tolist())
            out.own_in_batch += 1
            counts["stale_groups"] += int(bool(item.offpolicy.any()))
    if not counts["stale_groups"]:
        del counts["stale_groups"]
    out.metrics, out.health = update_and_serve(learning, r, out.items, own_groups=out.own_in_batch)
    return out


def update_and_serve(learning: Learning, r: int, items: list[ScoredGroup], *, own_groups: int,
                     allow_mixed: bool = False) -> tuple[dict[str, float], dict[str, Any]]:
    """One update on `items`, its health noted, the ledger settled, the new weights served.

    `own_groups`: how many of `items` are this node's (a round without them cannot fail the
    health check). `allow_mixed` is for the experiment's horizontal groups only.
    Returns the update's metrics and the health keys of the round's record.
    """
    learner, error = learning.learner, None
    metrics: dict[str, float] = {}
    try:
        metrics = learner.update(items, allow_mixed=allow_mixed) if items else {}
    except Exception as exc:  # noqa: BLE001 - counted by the health check, which stops a node that keeps failing
        log.exception("round %d: the update raised", r)
        error = exc
        learner.peer_report, learner.peer_earned = {}, {}  # nothing of a failed update was used: no credit
    own_errors = learner.peer_report.get(learning.me, Counter()).get(faults.LEARN_ERROR, 0)
    reason = update_failure(metrics, own_groups=own_groups, own_learn_errors=own_errors, error=error)
    health = learning.health.note(r, reason)
    learning.peer_ledger.settle_update(learner.peer_report, me=learning.me, earned=learner.peer_earned)
    refreshed = learning.serving.after_update()
    if refreshed is not None:  # the backend's own copy of the weights was refreshed
        metrics["time_weight_refresh"] = refreshed
    return metrics, health


def _count_capped(item: ScoredGroup, counts: Counter) -> None:
    """`capped_completions`: completions that stopped at the token cap without EOS; `capped_no_positive`:
    those of them above their group's mean reward, whose positive advantage the learner zeroes
    (`learner.truncated_completions`, docs/method.md "Known tricks")."""
    if item.ended is None or bool(item.ended.all()):
        return
    capped = ~item.ended  # (G,)
    counts["capped_completions"] += int(capped.sum())
    counts["capped_no_positive"] += int((capped & (item.rewards > item.rewards.mean())).sum())
