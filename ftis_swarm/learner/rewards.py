"""Rewards recomputed locally: a reward that arrives on the wire is never trusted.

Each group names its task and item; this node looks the item up in its own copy of the
task, decodes the completions with its own tokenizer (the fingerprint check guarantees the
same text the generator saw) and scores them with its own verifier. A group this node
cannot score (unknown task, unknown item) is rejected with the reason counted, never a crash.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from ftis_swarm.tasks import get_task
from ftis_swarm.wire import Group

log = logging.getLogger(__name__)


@dataclass
class ScoredBatch:
    """Rewards for the groups that could be scored, and what happened to the rest."""

    groups: list[Group] = field(default_factory=list)
    rewards: list[np.ndarray] = field(default_factory=list)  # one (G,) array per kept group
    correct: list[np.ndarray] = field(default_factory=list)  # one (G,) bool array per kept group
    rejected: Counter = field(default_factory=Counter)  # reason -> groups
    score_reasons: Counter = field(default_factory=Counter)  # verifier reason -> completions


class TaskCache:
    """Tasks by id, built once each; a task that fails to build is remembered as failed."""

    def __init__(self, factory: Callable[[str], Any] = get_task) -> None:
        self._factory = factory
        self._tasks: dict[str, Any] = {}
        self._failed: dict[str, str] = {}

    def get(self, task_id: str) -> Any | None:
        if task_id in self._tasks:
            return self._tasks[task_id]
        if task_id in self._failed:
            return None
        try:
            self._tasks[task_id] = self._factory(task_id)
        except (ValueError, KeyError, OSError) as exc:
            log.warning("cannot score groups of task %r: %s", task_id, exc)
            self._failed[task_id] = str(exc)
            return None
        return self._tasks[task_id]


def score_groups(groups: Sequence[Group], tokenizer: Any, tasks: TaskCache) -> ScoredBatch:
    """Scores every completion of every group with this node's verifier, one batch per task."""
    out = ScoredBatch()
    by_task: dict[str, list[tuple[Group, Any]]] = {}
    for g in groups:
        task = tasks.get(g.task_id)
        if task is None:
            out.rejected["unknown_task"] += 1
            continue
        try:
            item = task.item(g.item_id)
        except (KeyError, ValueError) as exc:
            log.debug("group %s: unknown item %r: %s", g.group_id, g.item_id, exc)
            out.rejected["unknown_item"] += 1
            continue
        by_task.setdefault(g.task_id, []).append((g, item))
    for task_id, pairs in by_task.items():
        task = tasks.get(task_id)
        items, texts = [], []
        for g, item in pairs:
            texts.extend(tokenizer.batch_decode([c.tolist() for c in g.completion_ids], skip_special_tokens=True))
            items.extend([item] * g.G)
        scores = task.score(items, texts)
        start = 0
        for g, _ in pairs:
            chunk = scores[start : start + g.G]
            start += g.G
            out.groups.append(g)
            out.rewards.append(np.array([s.reward for s in chunk], dtype=np.float32))
            out.correct.append(np.array([s.correct for s in chunk], dtype=bool))
            out.score_reasons.update(s.reason for s in chunk)
    return out
