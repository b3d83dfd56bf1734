"""What every task shares: the item and score types, the errors, prompting and batched scoring.

A task file (arith.py, gsm8k.py, ...) says where its problems come from, how its prompt
asks for the answer, and how the answer is pulled out of a completion (`extract_answer`);
this module turns that into the API the learner and node call. The reward is binary (the
paper's "format and answer"): 1 when the completion states its final answer in the task's
required form and that answer equals the ground truth, else 0, with the reason kept so the
node can count why samples failed.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import logging
import math
from abc import ABC, abstractmethod
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal, Sequence

from ftis_swarm.errors import UserError
from ftis_swarm.tasks import mathcheck
from ftis_swarm.tasks.verifier import Outcome, shared_pool

logger = logging.getLogger(__name__)

Reason = Literal["correct", "wrong", "no_answer", "unparseable", "timeout", "verifier_error", "gold_unparseable"]
"""Why a completion got its reward. `no_answer`: no final answer in the required form;
`unparseable`: math-verify cannot read the stated answer; `timeout`: the check ran past the
task's `verify_timeout`; `verifier_error`: the check's worker died; `gold_unparseable`: the
ground truth itself cannot be read (a task bug, kept apart from the model's failures)."""

REASONS: tuple[str, ...] = Reason.__args__  # type: ignore[attr-defined]

BOXED_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
"""The answer-format instruction of the `\\boxed{}` tasks (Qwen2.5-Math's wording)."""


class UnknownTaskError(UserError, ValueError):
    """`get_task` was given a name no task has."""


class EvaluationTaskError(UnknownTaskError):
    """A task without a train split (an evaluation set) named where a node would train on it."""


class UnknownItemError(KeyError):
    """A well-formed item id this node cannot resolve (other version, out of range, other data)."""

    def __str__(self) -> str:  # KeyError would repr-quote the sentence
        return str(self.args[0]) if self.args else ""


class MalformedItemIdError(UnknownItemError, ValueError):
    """An item id that does not follow the task's id scheme at all."""


class ItemOutOfRangeError(UnknownItemError):
    """A well-formed item id past the task's real range (a seed or index no node draws, a row
    its split does not have): a peer naming it is not running this task."""


class UnknownSplitError(ValueError):
    """A split this task does not have (e.g. `train` of an evaluation-only task)."""


@dataclass(frozen=True)
class TaskItem:
    """One problem: its stable id, what the model is asked, and the ground truth."""

    task_id: str
    item_id: str
    """Stable across machines: the same id resolves to the same item on every node."""
    split: str
    question: str
    """The problem as its source states it."""
    prompt: str
    """The user message: the question plus the task's answer-format instruction."""
    answer: str
    """The ground-truth final answer (what the extracted answer is compared with)."""


@dataclass(frozen=True)
class Score:
    """The reward of one completion, in {0, 1}, and why."""

    reward: float
    correct: bool
    reason: str


def package_version(dist: str) -> str:
    """The installed version of distribution `dist`, or "none"."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "none"


def content_tag(text: str) -> str:
    """8 hex digits of the item's text, appended to ids: a peer's id resolves only to the same problem."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:8]


def reason_counts(scores: Sequence[Score]) -> dict[str, int]:
    """How many scores had each reason (every reason present, zeros included), for metrics."""
    counts = Counter(s.reason for s in scores)
    return {reason: counts.get(reason, 0) for reason in REASONS}


class Task(ABC):
    """A source of problems with verifiable answers; see the module docstring."""

    name: ClassVar[str]
    version: ClassVar[int]
    """Bumped when items, prompts or rewards change meaning; part of every item id."""
    splits: ClassVar[tuple[str, ...]] = ("train", "test")
    answer_form: ClassVar[str]
    """One sentence: what the completion must contain for reward 1 (for docs and logs)."""
    max_new_tokens: ClassVar[int] = 512
    """Tokens a completion needs to reach its answer: the default of `sampling.max_new_tokens`
    and of `ftis-node eval` on this task when the user gives none."""

    def __init__(self, *, data_dir: Path | None = None, verify_timeout: float = 5.0) -> None:
        if not verify_timeout > 0:
            raise ValueError(f"verify_timeout must be positive, got {verify_timeout}")
        self.data_dir = data_dir
        self.verify_timeout = verify_timeout

    generator_packages: ClassVar[tuple[str, ...]] = ()
    """Distributions whose version is part of the task's definition (reasoning-gym for its generators)."""
    local_only: bool = False
    """True when the task's definition cannot be digested (a verifier without source): this node
    trains on its own groups and never publishes them (docs/tasks.md, Agreement by content)."""

    def definition(self) -> dict[str, Any]:
        """What defines the task, as JSON-able data: the digest hashes it. Here: name, version,
        class, and the versions of `generator_packages`; a task over data adds the data's hash."""
        return {
            "name": self.name,
            "version": self.version,
            "class": f"{type(self).__module__}:{type(self).__qualname__}",
            "packages": {p: package_version(p) for p in self.generator_packages},
        }

    @property
    def digest(self) -> str:
        """32 hex digits of sha256 over `definition()` (canonical JSON): the task's identity on the
        wire (a group's `tdg`). Two nodes with the same data, generator and verifier get the same one."""
        cached = self.__dict__.get("_digest")
        if cached is None:
            text = json.dumps(self.definition(), sort_keys=True, separators=(",", ":"), ensure_ascii=True)
            cached = self.__dict__["_digest"] = hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]
        return cached

    @abstractmethod
    def sample(self, n: int, *, seed: int, split: str = "train") -> list[TaskItem]:
        """`n` items of `split`, the same ones for the same `(seed, split)` on every machine."""

    @abstractmethod
    def item(self, item_id: str) -> TaskItem:
        """The item with this id; `UnknownItemError` (a KeyError) when it does not resolve here."""

    @abstractmethod
    def size(self, split: str) -> int | None:
        """How many distinct items `split` holds; None for an endless generated stream."""

    @abstractmethod
    def extract_answer(self, completion: str) -> str | None:
        """The final answer stated in the required form, or None when there is none."""

    def messages(self, item: TaskItem) -> list[dict[str, str]]:
        """Chat messages for `item`: one user turn holding the question and the format instruction."""
        return [{"role": "user", "content": item.prompt}]

    def render_prompt(self, tokenizer: Any, item: TaskItem) -> list[int]:
        """Prompt token ids: the chat template with the generation prompt where the tokenizer has one.

        Without a template (a base model) the prompt is plain `Question: ...\\nAnswer:` text.
        Duck-typed: anything with `apply_chat_template`/`chat_template` or `encode` works.
        """
        if getattr(tokenizer, "chat_template", None):
            ids = tokenizer.apply_chat_template(self.messages(item), add_generation_prompt=True, tokenize=True)
            if hasattr(ids, "keys"):  # transformers 5 may return a BatchEncoding
                ids = ids["input_ids"]
            if ids and isinstance(ids[0], list):
                ids = ids[0]
            return [int(t) for t in ids]
        return [int(t) for t in tokenizer.encode(f"Question: {item.prompt}\nAnswer:")]

    def check_split(self, split: str) -> None:
        if split not in self.splits:
            raise UnknownSplitError(f"task {self.name} has no split {split!r}; it has {', '.join(self.splits)}")

    def score(self, items: Sequence[TaskItem], completions: Sequence[str]) -> list[Score]:
        """Binary rewards of decoded completions against their items' ground truth, in order.

        Never raises for what a model wrote: an answer missing, unreadable, or whose check
        hangs scores 0 with its reason. Raises ValueError only for caller bugs (lengths
        differ, an item of another task).
        """
        if len(items) != len(completions):
            raise ValueError(f"{len(items)} items but {len(completions)} completions")
        for item in items:
            if item.task_id != self.name:
                raise ValueError(f"item {item.item_id} belongs to task {item.task_id}, not {self.name}")
        answers = [self.extract_answer(c) for c in completions]
        scores = self.judge(items, answers)
        logger.debug("%s scored %d completions: %s", self.name, len(scores), reason_counts(scores))
        return scores

    def judge(self, items: Sequence[TaskItem], answers: Sequence[str | None]) -> list[Score]:
        """Compare extracted answers with the ground truth through math-verify in the verifier pool.

        Each distinct (answer, ground truth) pair is checked once: a group's completions
        often agree, and a pathological answer repeated G times must cost one timeout, not G.
        """
        pairs = sorted({(a, item.answer) for item, a in zip(items, answers) if a is not None})
        alarm_s = max(1, math.floor(self.verify_timeout / 2))
        outcomes = shared_pool().run(
            mathcheck.check_answer,
            [(answer, gold, alarm_s) for answer, gold in pairs],
            timeout=self.verify_timeout,
        )
        verdicts = {pair: _score_of(outcome) for pair, outcome in zip(pairs, outcomes)}
        return [
            verdicts[(a, item.answer)] if a is not None else Score(0.0, False, "no_answer")
            for item, a in zip(items, answers)
        ]


def _score_of(outcome: Outcome) -> Score:
    if outcome.status == "ok":
        correct, reason = outcome.value
        return Score(1.0 if correct else 0.0, bool(correct), reason)
    if outcome.status == "timeout":
        return Score(0.0, False, "timeout")
    logger.warning("verifier call failed (%s): %s", outcome.status, outcome.value)
    return Score(0.0, False, "verifier_error")
