"""Which of the peers' gathered groups an update takes: refused peers, duplicates, length, caps
and a budget of completion tokens, so a round's learn time stays bounded whatever peers send.

One peer's 64 x 2,000-token group (1 MiB, inside every wire limit) once cost each node
four minutes of `logp_old`; the budget bounds the peers' completion tokens per update and
per peer, by default at 4 and 2 times this node's own per round. A group over what is left
of the budget waits for the next round (`peer_deferred`), taken first then, and is dropped
if it does not fit then either; a group over the whole budget is dropped at once
(`peer_over_budget`). The deferred groups are part of a checkpoint (`state`), so a resumed
node takes the same groups in the same order as one that ran on; a group offered twice in
one take (deferred, then gathered again by a restarted node's swarm) is taken once
(`peer_duplicate`).
"""

from __future__ import annotations

import base64
import logging
from collections import Counter
from dataclasses import dataclass
from typing import Any, Container, Optional

from ftis_swarm.config import NodeConfig, WireConfig
from ftis_swarm.wire import Group, decode_group, encode_group
from ftis_swarm.peers import faults

log = logging.getLogger(__name__)


def within_vocab(group: Group, bound: int) -> bool:
    """True when every token id is below `bound`, the tokenizer's length: peers refuse any other
    group, so a node does not publish one. Only a model whose embedding has padding rows past its
    tokenizer can sample such ids (a random tiny model does, 0.2% of its tokens)."""
    return int(group.prompt_ids.max(initial=0)) < bound and all(int(c.max()) < bound for c in group.completion_ids)


@dataclass(frozen=True)
class Budget:
    """Caps on the peers' share of one update."""

    max_groups: int
    max_groups_per_peer: int
    max_tokens: int
    max_tokens_per_peer: int
    context: int
    """This model's context: a group whose prompt and longest completion exceed it is dropped."""

    @classmethod
    def of(cls, cfg: NodeConfig, *, context: int) -> "Budget":
        lc = cfg.learner
        own = cfg.prompts_per_round * cfg.sampling.group_size * cfg.sampling.max_new_tokens
        return cls(max_groups=lc.max_peer_groups, max_groups_per_peer=lc.max_groups_per_peer,
                   max_tokens=lc.max_peer_tokens or 4 * own, max_tokens_per_peer=lc.max_peer_tokens_per_peer or 2 * own,
                   context=context)


@dataclass
class Intake:
    """What `PeerIntake.take` kept, and why the rest was left out (counts, and per (peer, reason))."""

    kept: list[Group]
    counts: Counter
    by_peer: Counter


class PeerIntake:
    """Holds the groups deferred to the next round; `take` picks an update's peers' groups."""

    def __init__(self, budget: Budget) -> None:
        self.budget = budget
        self._deferred: list[Group] = []

    def take(self, groups: list[Group], consumed: Container[str], allows: Any) -> Intake:
        """The groups this update takes, last round's deferred ones first, then `groups` in arrival order.

        `allows(peer_id) -> bool` (the ledger's) refuses a banned or denied peer's groups.
        """
        b = self.budget
        out = Intake([], Counter(), Counter())
        groups_of: Counter = Counter()
        tokens_of: Counter = Counter()
        total = 0
        deferred, self._deferred = self._deferred, []
        offered: set[str] = set()
        for g, waited in [(g, True) for g in deferred] + [(g, False) for g in groups]:
            n, seen = g.num_completion_tokens, g.group_id in offered
            offered.add(g.group_id)
            if not allows(g.sender):
                reason = faults.PEER_REFUSED
            elif g.group_id in consumed:
                reason = faults.PEER_ALREADY_CONSUMED
            elif seen:
                reason = faults.PEER_DUPLICATE
            elif g.prompt_ids.size + max(g.completion_lengths) > b.context:
                reason = faults.PEER_TOO_LONG
            elif n > b.max_tokens_per_peer or n > b.max_tokens:
                reason = faults.PEER_OVER_BUDGET
            elif len(out.kept) >= b.max_groups or groups_of[g.sender] >= b.max_groups_per_peer:
                reason = faults.PEER_OVER_CAP
            elif total + n > b.max_tokens or tokens_of[g.sender] + n > b.max_tokens_per_peer:
                reason = faults.PEER_OVER_BUDGET if waited else faults.PEER_DEFERRED
            else:
                out.kept.append(g)
                groups_of[g.sender] += 1
                tokens_of[g.sender] += n
                total += n
                continue
            out.counts[reason] += 1
            out.by_peer[(g.sender, reason)] += 1
            if reason == faults.PEER_DEFERRED:
                self._deferred.append(g)
        return out

    def state(self) -> list[str]:
        """The deferred groups, wire-encoded (base64), for a checkpoint's `state.json`."""
        return [base64.b64encode(encode_group(g)).decode("ascii") for g in self._deferred]

    def load_state(self, state: list[str], *, limits: Optional[WireConfig] = None) -> None:
        """The deferred groups of `state()`; the next `take` offers them first, as it would have."""
        self._deferred = [decode_group(base64.b64decode(text), limits=limits) for text in state]
