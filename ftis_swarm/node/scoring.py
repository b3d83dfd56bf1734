"""What a learner accepts from a group, and its rewards recomputed locally.

A reward that arrives on the wire is never trusted (docs/method.md, Advantage), and neither is the choice
of what to train on. Each group names its task and item; before it is scored it must pass
`Admission` (the reasons below are counted, and the node charges them to the sender):

- its tokenizer fingerprint is this node's (`tokenizer`), or it carries alignment data and
  `Admission.align_limit` is set: then its prompt ids are not read (the item's prompt is
  rendered with this node's template), its texts are re-encoded and aligned
  (`learner/aligned.py`: `align_bytes`, `align_utf8`, `align_too_long`) and its texts are
  what the verifier reads (docs/method.md, "Peers with another tokenizer");
- its task is one this node accepts (`task_not_accepted`), never an evaluation-only task
  (`eval_task`), one this node knows (`unknown_task`), with this node's content: its task
  digest (`tdg`, when it carries one) is this node's (`task_digest`, docs/tasks.md);
- its item resolves in this node's copy of the task (`unknown_item`), inside the task's
  real range (`item_out_of_range`), from the train split (`not_train_split`);
- its prompt is that item's whole prompt: the decoded prompt ids contain the item's
  prompt text entire (`prompt_mismatch`; whitespace runs count as one space, so a chat
  template may wrap it, but a prompt cut short or with the question alone is refused)
  and hold at most `max_prompt_overhead` tokens beyond it (`prompt_too_long`).

A completion with an EOS (this node's sampler's set, `Admission.eos_ids`) before its last token
is refused as `eos_tail` (docs/method.md, "Known tricks"): the verifier would read the tail,
the loss would train it. It costs nothing: an honest sampler stops at its first EOS, but a peer
whose model lists another EOS set (a base model beside its instruct) may write one of ours.

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

from ftis_swarm.core.chunks import AlignmentError
from ftis_swarm.learner.aligned import LEARNER_TOKENIZER, Aligned, align_group
from ftis_swarm.peers import faults
from ftis_swarm.tasks import ItemOutOfRangeError, UnknownItemError, UnknownTaskError, get_task, has_train_split
from ftis_swarm.wire import Group

log = logging.getLogger(__name__)

UNSETTLED = frozenset({"timeout", "verifier_error"})
"""Verifier reasons that score 0 without settling the answer: another verifier may score it correct."""


@dataclass(frozen=True)
class Admission:
    """What a group must satisfy to be scored (module docstring). None disables a check."""

    tokenizer_fp: Optional[str] = None
    accept_tasks: Optional[frozenset[str]] = None
    """Tasks taken; None: any task this node can build."""
    train_only: bool = True
    max_prompt_overhead: Optional[int] = 256
    eos_ids: Optional[frozenset[int]] = None
    """The ids that end a completion (this node's sampler's set); a completion with one before its last
    token is refused (`eos_tail`). None: not checked."""
    """Prompt tokens allowed beyond the item's prompt text; None: neither the cap nor the question check."""
    align_limit: Optional[int] = None
    """Most tokens one completion of another tokenizer's group (with alignment data) may re-encode to here
    (`align_too_long` over it); None: groups of another tokenizer are refused (`tokenizer`)."""
    align_eos: Optional[int] = None
    """This learner's EOS, which a peer's stop maps to in such a group (needed with `align_limit`)."""


@dataclass
class ScoredBatch:
    """Rewards for the groups that could be scored, and what happened to the rest."""

    groups: list[Group] = field(default_factory=list)
    rewards: list[np.ndarray] = field(default_factory=list)  # one (G,) array per kept group
    correct: list[np.ndarray] = field(default_factory=list)  # one (G,) bool array per kept group
    unsettled: list[int] = field(default_factory=list)  # per kept group: completions its check did not settle
    rejected: Counter = field(default_factory=Counter)  # reason -> groups
    rejected_by_peer: Counter = field(default_factory=Counter)  # (sender, reason) -> groups
    score_reasons: Counter = field(default_factory=Counter)  # verifier reason -> completions
    aligned: dict[str, Aligned] = field(default_factory=dict)  # group id -> another tokenizer's group, aligned

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
                 admission: Admission = Admission(), memo: Optional[dict[str, list]] = None) -> ScoredBatch:
    """Admits, decodes and scores every group with this node's verifier, one batch per task.

    `memo`: group id -> its verifier scores, read for a group it holds and written for each group this
    call scores (the node scores its own groups once, for their hint at publish, and reuses the scores
    in the update: `Learning.own_scores`)."""
    out = ScoredBatch()
    by_task: dict[str, list[tuple[Group, Any, list[str]]]] = {}
    for g in groups:
        admitted = _admit(g, tokenizer, tasks, admission)
        if isinstance(admitted, str):
            log.debug("group %s from %s refused: %s", g.group_id, g.sender, admitted)
            out.reject(g, admitted)
            continue
        if len(admitted) == 3:
            out.aligned[g.group_id] = admitted[2]
        by_task.setdefault(g.task_id, []).append((g, *admitted[:2]))
    for task_id, entries in by_task.items():
        for (g, _, _), scores in zip(entries, _remembered(tasks.get(task_id), entries, memo)):
            if scores is None:
                out.reject(g, faults.SCORE_ERROR)
                continue
            out.groups.append(g)
            out.rewards.append(np.array([s.reward for s in scores], dtype=np.float32))
            out.correct.append(np.array([s.correct for s in scores], dtype=bool))
            out.unsettled.append(sum(s.reason in UNSETTLED for s in scores))
            out.score_reasons.update(s.reason for s in scores)
    return out


def _admit(g: Group, tokenizer: Any, tasks: TaskCache, adm: Admission) -> str | tuple[Any, ...]:
    """The group's item and decoded completions (and, for another tokenizer's group, it aligned), or the
    reason it is refused."""
    foreign = adm.tokenizer_fp is not None and g.tokenizer_fp != adm.tokenizer_fp
    if foreign and (not g.aligned or adm.align_limit is None or adm.align_eos is None):
        return faults.TOKENIZER
    if not foreign and adm.eos_ids and eos_tail(g, adm.eos_ids):
        return faults.EOS_TAIL
    if adm.accept_tasks is not None and g.task_id not in adm.accept_tasks:
        try:
            return faults.TASK_NOT_ACCEPTED if has_train_split(g.task_id) else faults.EVAL_TASK
        except UnknownTaskError:
            return faults.UNKNOWN_TASK
    task = tasks.get(g.task_id)
    if task is None:
        return faults.UNKNOWN_TASK
    if g.task_digest and g.task_digest != task.digest:  # same name, other data/generator/verifier: a mismatch
        return faults.TASK_DIGEST
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
    if foreign:  # the item is what is shared: its prompt rendered here, the texts re-encoded here
        return _aligned(g, tokenizer, task, item, adm)
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


def _aligned(g: Group, tokenizer: Any, task: Any, item: Any, adm: Admission) -> str | tuple[Any, list[str], Aligned]:
    """A group of another tokenizer on this learner's tokens (`learner/aligned.py`), or the reason it is refused."""
    try:
        prompt = task.render_prompt(tokenizer, item)
    except Exception as exc:  # noqa: BLE001 - our own template: the item stays unused, the peer uncharged
        log.warning("group %s: rendering its item's prompt raised %s: %s", g.group_id, type(exc).__name__, exc)
        return faults.ITEM_ERROR
    try:
        aligned = align_group(g, tokenizer, prompt, eos_id=int(adm.align_eos or 0), limit=int(adm.align_limit or 0))
    except AlignmentError as exc:
        log.debug("group %s from %s cannot be aligned: %s", g.group_id, g.sender, exc)
        return ALIGN_FAULTS[exc.reason]
    return item, list(aligned.texts), aligned


ALIGN_FAULTS = {"align_bytes": faults.ALIGN_BYTES, "align_utf8": faults.ALIGN_UTF8,
                "align_too_long": faults.ALIGN_TOO_LONG, LEARNER_TOKENIZER: faults.TOKENIZER}
"""`AlignmentError.reason` -> the reason counted and charged (docs/node.md)."""


def eos_tail(g: Group, eos_ids: frozenset[int]) -> bool:
    """Whether a completion holds an id of `eos_ids` before its last token (tokens after the first EOS)."""
    eos = np.fromiter(eos_ids, dtype=np.uint32)
    return any(bool(np.isin(c[:-1], eos).any()) for c in g.completion_ids)


def ended(g: Group, eos_ids: frozenset[int]) -> np.ndarray:
    """`[G]` bool: each completion's last token is an EOS (false: it stopped at the token cap)."""
    return np.array([c.size > 0 and int(c[-1]) in eos_ids for c in g.completion_ids], dtype=bool)


def _remembered(task: Any, entries: list[tuple[Group, Any, list[str]]],
                memo: Optional[dict[str, list]]) -> list[Optional[list]]:
    """`_scores` for the entries `memo` does not hold (which it then holds), `memo`'s for the others."""
    if memo is None:
        return _scores(task, entries)
    todo = [e for e in entries if e[0].group_id not in memo]
    for (g, _, _), scores in zip(todo, _scores(task, todo) if todo else []):
        if scores is not None:
            memo[g.group_id] = scores
    return [memo.get(g.group_id) for g, _, _ in entries]


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
