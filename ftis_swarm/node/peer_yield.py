"""What the swarm gave a node in a round: its peers' samples that reached the gradient, against those
fetched, and the bytes spent on groups that carried none.

A round settles the peers' groups that its intake took (then learned from, or refused by the
scorer) or dropped; a group the intake deferred is settled in the round that takes or drops
it, so each fetched group counts once, and `useful_peer_frac` stays within [0, 1]. Of them:

- `peer_samples_fetched`: their samples (completions), `peer_bytes` their wire bytes (the
  encoding the swarm carried: `wire.encode_group` is canonical);
- `useful_peer_frac`: the learner's `offpolicy_used` (peers' samples with a non-zero
  advantage that passed the filter: those through the gradient pass) over
  `peer_samples_fetched`; absent when nothing was fetched;
- `zero_signal_groups`, `zero_signal_bytes`: the groups none of whose samples reached the
  gradient (dropped by the intake, refused by the scorer or the learner, rewards all equal,
  or every sample filtered or withheld), and their bytes. The learner counts the samples
  through the gradient per sender (`used@<source>`), not per group: a group with unequal
  rewards counts as carrying signal when its sender had any sample through the gradient.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from ftis_swarm.learner.batch import ScoredGroup
from ftis_swarm.wire import Group, encode_group


def peer_yield(settled: Sequence[Group], items: Sequence[ScoredGroup], metrics: dict[str, Any], *,
               source_of: Callable[[str], int]) -> dict[str, Any]:
    """The round record's keys (module docstring) for the peers' groups `settled` this round.

    `items`: the labelled groups the update was given; `metrics`: the learner's update metrics,
    their per-source keys by source index (`used@<index>`); `source_of(sender)`: that index.
    """
    used = {key.partition("@")[2]: float(v) for key, v in metrics.items() if key.startswith("used@")}
    carried = {item.group.group_id for item in items
               if item.peer_rows.any() and float(np.ptp(item.rewards)) > 0
               and used.get(str(source_of(item.group.sender)), 0.0) > 0}
    sizes = {g.group_id: len(encode_group(g)) for g in settled}
    zero = [g for g in settled if g.group_id not in carried]
    samples = sum(g.G for g in settled)
    out: dict[str, Any] = {"peer_samples_fetched": samples, "peer_bytes": sum(sizes.values()),
                           "zero_signal_groups": len(zero), "zero_signal_bytes": sum(sizes[g.group_id] for g in zero)}
    if samples:
        out["useful_peer_frac"] = float(metrics.get("offpolicy_used", 0.0)) / samples
    return out
