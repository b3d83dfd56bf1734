"""The rollout backend serves the learner's weights, under the learner's policy version.

The version guard: a group is stamped with the version its backend serves, and the learner
labels its own groups on-policy only when that version is its own (`learning.py`). So the
backend's version advances exactly when the learner's does, that is when an optimiser step
was taken; an update without a step (no sample carried signal, or a skipped non-finite
step) leaves both where they were. A backend sharing the learner's model object sees an
update at once and only advances its version. A backend that loads tensors from memory
(vLLM's `load_tensors`) gets a full model's new weights that way, with no file; otherwise
(a LoRA adapter, or a transformers backend with its own copy) the weights or the adapter
come from a directory the learner writes; `after_update` returns how long that took. Used
by the node (`components.py`) and by the experiment, the same code in both.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from ftis_swarm.learner.learner import Learner

log = logging.getLogger(__name__)


@dataclass
class Serving:
    """Keeps `backend` serving `learner`'s weights; `after_update` after every update."""

    learner: Learner
    backend: Any
    shares_model: bool
    """The backend samples from the learner's own model object (no copy to refresh)."""
    weights_dir: Optional[Path] = None
    """Where the learner writes its weights or adapter for a backend with its own copy (None: it shares the model)."""

    def after_update(self) -> Optional[float]:
        """Serves the learner's new weights, if the update took a step; versions stay equal.

        Returns the seconds the refresh of a backend's own copy took (None: nothing was copied)."""
        if self.backend.policy_version == self.learner.policy_version:
            return None  # no optimiser step: the served weights are still current
        seconds = None
        if self.shares_model:
            self.backend.bump_policy_version()
        else:
            seconds = self._refresh()
        check_versions(self.learner, self.backend)
        return seconds

    def sync(self, *, resumed_from: Optional[Path] = None) -> None:
        """After a resume: the backend serves the restored weights under the restored version.

        At version 0 no step was taken: the backend already serves those weights (a push would
        advance its version past the learner's)."""
        if not self.shares_model and self.learner.policy_version > self.backend.policy_version:
            self._refresh()
        while self.backend.policy_version < self.learner.policy_version:
            self.backend.bump_policy_version()
        check_versions(self.learner, self.backend)
        if resumed_from is not None:
            log.debug("serving policy version %d restored from %s", self.learner.policy_version, resumed_from)

    def _save(self) -> Path:
        if self.weights_dir is None:
            raise RuntimeError("a backend with its own copy of the model needs a weights_dir to load from")
        return self.learner.save_weights(self.weights_dir)

    def _refresh(self) -> float:
        """Gives the backend's own copy the learner's weights (from memory where it can); returns the seconds."""
        t0 = time.perf_counter()
        tensors = self.learner.named_weights() if hasattr(self.backend, "load_tensors") else None
        if tensors is not None:
            self.backend.load_tensors(tensors)
        else:
            self._push(self._save())
        return time.perf_counter() - t0

    def _push(self, path: Path) -> None:
        if self.learner.is_lora:
            self.backend.set_adapter(str(path))
        else:
            self.backend.load_weights(str(path))


def check_versions(learner: Learner, backend: Any) -> None:
    """Raises when the backend serves another policy version than the learner holds (a bug, not a peer's fault)."""
    if backend.policy_version != learner.policy_version:
        raise RuntimeError(
            f"rollout serves policy version {backend.policy_version} but the learner is at {learner.policy_version}"
        )
