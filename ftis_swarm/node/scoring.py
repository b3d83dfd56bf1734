"""What a learner accepts from a group, and its rewards recomputed locally.

A reward that arrives on the wire is never trusted (docs/method.md, Advantage), and neither is the choice
of what to train on. Each group names its task and item; before it is scored it must pass
`Admission` (the reasons below are counted, and the node charges them to the sender):

- its tokenizer fingerprint is this node's (`tokenizer`);
- its task is one this node accepts (`task_not_accepted`), never an evaluation-only task
  (`eval_task`), one this node knows (`unknown_task`);
- its item resolves in this node's copy of the task (`unknown_item`), inside the task's
  real range (`item_out_of_range`), from the train split (`not_train_split`);
- its prompt is that item's whole prompt: the decoded prompt ids contain the item's
  prompt text entire (`prompt_mismatch`; whitespace runs count as one space, so a chat
  template may wrap it, but a prompt cut short or with the question alone is refused)
  and hold at most `max_prompt_overhead` tokens beyond it (`prompt_too_long`).

Then the completions are decoded with this node's tokenizer and scored by its verifier, one
batch per task. Any error one group causes (an item lookup that raises, a decode, a scoring
batch that fails, then that group alone) rejects that group with a counted reason
(`item_error`, `decode_error`, `score_error`) and never the others.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import numpy as np

from ftis_swarm.tasks import ItemOutOfRangeError, UnknownItemError, UnknownTaskError, get_task, has_train_split
from ftis_swarm.wire import Group
from ftis_swarm.peers import faults

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Admission:
    """What a group must satisfy to be scored (module docstring). None disables a check."""

    tokenizer_fp: Optional[str] = None
    accept_tasks: Optional[frozenset[str]] = None
    """Tasks taken; None: any task this node can build."""
    train_only: bool = True
    max_prompt_overhead: Optional[int] = 256
    """Prompt tokens allowed beyond the item's prompt text; None: neither the cap nor the question check."""


@dataclass
class ScoredBatch:
    """Rewards for the groups that could be scored, and what happened to the rest."""

    groups: list[Group] = field(default_factory=list)
    rewards: list[np.ndarray] = field(default_factory=list)  # one (G,) array per kept group
    correct: list[np.ndarray] = field(default_factory=list)  # one (G,) bool array per kept group
    rejected: Counter = field(default_factory=Counter)  # reason -> groups
    rejected_by_peer: Counter = field(default_factory=Counter)  # (sender, reason) -> groups
    score_reasons: Counter = field(default_factory=Counter)  # verifier reason -> completions

    def reject(self, group: Group, reason: str) -> None:
        self.rejected[reason] += 1
        self.rejected_by_peer[(group.sender, reason)] += 1


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


def score_groups(groups: Sequence[Group], tokenizer: Any, tasks: TaskCache, *,
                 admission: Admission = Admission()) -> ScoredBatch:
    """Admits, decodes and scores every group with this node's verifier, one batch per task."""
    out = ScoredBatch()
    by_task: dict[str, list[tuple[Group, Any, list[str]]]] = {}
    for g in groups:
        admitted = _admit(g, tokenizer, tasks, admission)
        if isinstance(admitted, str):
            log.debug("group %s from %s refused: %s", g.group_id, g.sender, admitted)
            out.reject(g, admitted)
            continue
        by_task.setdefault(g.task_id, []).append((g, *admitted))
    for task_id, entries in by_task.items():
        for (g, _, _), scores in zip(entries, _scores(tasks.get(task_id), entries)):
            if scores is None:
                out.reject(g, faults.SCORE_ERROR)
                continue
            out.groups.append(g)
            out.rewards.append(np.array([s.reward for s in scores], dtype=np.float32))
            out.correct.append(np.array([s.correct for s in scores], dtype=bool))
            out.score_reasons.update(s.reason for s in scores)
    return out


def _admit(g: Group, tokenizer: Any, tasks: TaskCache, adm: Admission) -> str | tuple[Any, list[str]]:
    """The group's item and decoded completions, or the reason it is refused."""
    if adm.tokenizer_fp is not None and g.tokenizer_fp != adm.tokenizer_fp:
        return faults.TOKENIZER
    if adm.accept_tasks is not None and g.task_id not in adm.accept_tasks:
        try:
            return faults.TASK_NOT_ACCEPTED if has_train_split(g.task_id) else faults.EVAL_TASK
        except UnknownTaskError:
            return faults.UNKNOWN_TASK
    task = tasks.get(g.task_id)
    if task is None:
        return faults.UNKNOWN_TASK
    try:
        item = task.item(g.item_id)
    except ItemOutOfRangeError:
        return faults.ITEM_OUT_OF_RANGE
    except UnknownItemError:
        return faults.UNKNOWN_ITEM
    except Exception as exc:  # noqa: BLE001 - whatever a peer's id makes a task raise stays with that group
        log.warning("group %s: looking up item %r raised %s: %s", g.group_id, g.item_id[:80], type(exc).__name__, exc)
        return faults.ITEM_ERROR
    if adm.train_only and item.split != "train":
        return faults.NOT_TRAIN_SPLIT
    try:
        if adm.max_prompt_overhead is not None:
            own = len(tokenizer.encode(item.prompt, add_special_tokens=False))
            if g.prompt_ids.size > own + adm.max_prompt_overhead:
                return faults.PROMPT_TOO_LONG
            prompt = tokenizer.decode(g.prompt_ids.tolist(), skip_special_tokens=False)
            if _squeeze(item.prompt) not in _squeeze(prompt):  # the whole prompt, not a part of it
                return faults.PROMPT_MISMATCH
        texts = tokenizer.batch_decode([c.tolist() for c in g.completion_ids], skip_special_tokens=True)
    except Exception as exc:  # noqa: BLE001 - ids this tokenizer cannot decode stay with that group
        log.warning("group %s: decoding raised %s: %s", g.group_id, type(exc).__name__, exc)
        return faults.DECODE_ERROR
    return item, texts


def _scores(task: Any, entries: list[tuple[Group, Any, list[str]]]) -> list[Optional[list]]:
    """Scores per group: the task's batch at once, or, when that raises, each group alone (None: it raised)."""
    items = [item for g, item, _ in entries for _ in range(g.G)]
    texts = [t for _, _, ts in entries for t in ts]
    try:
        flat = task.score(items, texts)
    except Exception as exc:  # noqa: BLE001 - find the group that broke the batch; the others are scored
        log.warning("scoring %d groups of %s raised %s: %s; scoring them one by one", len(entries), task.name,
                    type(exc).__name__, exc)
        out: list[Optional[list]] = []
        for g, item, ts in entries:
            try:
                out.append(task.score([item] * g.G, ts))
            except Exception as one:  # noqa: BLE001 - this group alone is rejected, counted
                log.warning("group %s: scoring raised %s: %s", g.group_id, type(one).__name__, one)
                out.append(None)
        return out
    starts = np.cumsum([0] + [g.G for g, _, _ in entries]).tolist()
    return [flat[a:b] for a, b in zip(starts[:-1], starts[1:])]


def _squeeze(text: str) -> str:
    """Whitespace runs as one space: a chat template may re-wrap lines, never change the words."""
    return " ".join(text.split())
