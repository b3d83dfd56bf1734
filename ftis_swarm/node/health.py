"""Whether this node's training works; `max_failed_updates` failed updates in a row stop the node.

A node whose learning fails while it keeps generating and publishing looks alive to its
peers and its operator (rl-swarm#517: "participating" for days with a broken trainer).
Here a node whose update fails `max_failed_updates` rounds in a row (3 by default) stops:
it publishes nothing more, says why in its log (one line per failed round, one when it
stops), in its metrics (`update_failed`, `failed_updates_in_a_row` and `stopped_unhealthy`
in the round's record) and in its exit status (`EXIT_UNHEALTHY`, 3).

A round's update **failed** when the node had groups of its own in the batch and:

- `raised`: the learner raised (logged with its traceback; the round is still logged);
- `nonfinite_step`: the learner skipped an optimiser step whose loss or gradient norm was
  not finite (`updates_skipped_nonfinite`);
- `nonfinite_loss`: the reported loss or gradient norm is not finite;
- `nonfinite_own`: some of the node's own samples had a non-finite log-prob, from the
  sampler or the learner's forward pass (`frac_nonfinite@self` > 0): its own model makes
  NaNs, so its groups are worthless to itself and to its peers;
- `own_forward_failed`: the forward pass raised on one of the node's own groups (the
  learner withholds the group and goes on: `withheld_learn_error`).

Not failures: a round without an optimiser step because no sample carried signal (every
group's rewards equal: plain GRPO takes no step either), a round without own groups, and
anything a peer's group does (refused, filtered, withheld and charged to the peer, never
to this node's health: a peer must not be able to stop a node). One successful update
resets the count. The count is part of the checkpoint, so a resumed node stops where the
uninterrupted one would have.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Mapping, Optional

log = logging.getLogger(__name__)

EXIT_UNHEALTHY = 3
"""Exit status of a node stopped by `max_failed_updates` failed updates in a row."""
SELF_SOURCE = "0"
"""The learner's per-source metrics name this node's own samples `@0` (the node renames it `@self`)."""


def update_failure(metrics: Mapping[str, float], *, own_groups: int, own_learn_errors: int,
                   error: Optional[BaseException] = None) -> str:
    """Why this round's update failed (a reason of the module docstring), or "" when it did not."""
    if own_groups == 0:
        return ""
    if error is not None:
        return "raised"
    if metrics.get("updates_skipped_nonfinite", 0.0) > 0:
        return "nonfinite_step"
    if not all(math.isfinite(metrics.get(key, 0.0)) for key in ("loss", "grad_norm")):
        return "nonfinite_loss"
    if metrics.get(f"frac_nonfinite@{SELF_SOURCE}", 0.0) > 0:
        return "nonfinite_own"
    if own_learn_errors > 0:
        return "own_forward_failed"
    return ""


class UpdateHealth:
    """Counts failed updates in a row; `stopped` once they reach `max_failed_updates`."""

    def __init__(self, max_failed_updates: int) -> None:
        if max_failed_updates < 1:
            raise ValueError(f"max_failed_updates must be >= 1, got {max_failed_updates}")
        self.max_failed = max_failed_updates
        self.in_a_row = 0
        self.total = 0
        self.last_reason = ""

    @property
    def stopped(self) -> bool:
        return self.in_a_row >= self.max_failed

    def note(self, round_idx: int, reason: str) -> dict[str, Any]:
        """Records round `round_idx`'s outcome ("" = fine); returns its keys for the round's record."""
        if reason:
            self.in_a_row += 1
            self.total += 1
            self.last_reason = reason
            log.error("round %d: the update failed (%s); %d of %d in a row", round_idx, reason, self.in_a_row,
                      self.max_failed)
        else:
            self.in_a_row = 0
        out: dict[str, Any] = {"update_failed": int(bool(reason)), "failed_updates_in_a_row": self.in_a_row}
        if self.stopped:
            out["stopped_unhealthy"] = 1
            log.error("stopping: %s (last: %s); this node publishes nothing more and exits with status %d",
                      self.explain(), self.last_reason, EXIT_UNHEALTHY)
        return out

    def explain(self) -> str:
        """One sentence for the operator: why the node stopped."""
        return (f"the last {self.in_a_row} updates failed in a row (max_failed_updates = {self.max_failed}; "
                f"last reason: {self.last_reason})")

    def state(self) -> dict[str, Any]:
        return {"in_a_row": self.in_a_row, "total": self.total, "last_reason": self.last_reason}

    def load_state(self, state: Mapping[str, Any]) -> None:
        self.in_a_row = int(state.get("in_a_row", 0))
        self.total = int(state.get("total", 0))
        self.last_reason = str(state.get("last_reason", ""))
