"""`TaskOptionsConfig` (`[task_options]`): how a task named by a spec (`jsonl:PATH`, `rg:NAME`) reads its
rows, splits them and scores them (docs/tasks.md, Your own task). Built-in tasks ignore it."""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import Field, field_validator

from ftis_swarm.config.base import Strict

VERIFIERS = ("math", "exact", "number", "choice")
"""The project's verifiers for `task_options.verifier`; any other value must be a `module:function`."""


class TaskOptionsConfig(Strict):
    """Options of a `jsonl:PATH` or `rg:NAME` task; each is part of the task's digest."""

    name: Optional[str] = Field(None, min_length=1, max_length=48)
    """A `jsonl:` task's name on the wire (its groups' task id is `jsonl:<name>`); None: the file's stem.
    Peers must use the same name (and the same bytes, columns, split and verifier: the digest)."""
    prompt_key: str = Field("prompt", min_length=1)
    """The JSONL column holding the question."""
    answer_key: str = Field("answer", min_length=1)
    """The JSONL column holding the ground-truth answer (a row without it is refused)."""
    id_key: Optional[str] = Field(None, min_length=1)
    """The column holding each row's stable id (no `/` or `:`); None: the row's position in the file."""
    split_key: Optional[str] = Field(None, min_length=1)
    """The column holding each row's split (`train` or `test`); None: a seeded held-out fraction."""
    test_fraction: float = Field(0.2, gt=0, lt=1)
    """Without `split_key`: the share of distinct questions held out for `test`, chosen by a hash of
    the question and `split_seed` (the same question always lands in the same split)."""
    split_seed: int = Field(0, ge=0)
    """Seeds the held-out choice (and the reasoning-gym split)."""
    verifier: str = "math"
    """How a `jsonl:` reply is scored: `math` (math-verify on the last `\\boxed{}`), `exact` (the last
    `\\boxed{}`, else the last line, equal after normalisation), `number` (the last number), `choice` (a
    multiple-choice letter), or `module:function` (a Python callable `f(completion, answer) -> bool`)."""
    instruction: Optional[str] = None
    """The answer-format sentence after each question; None: the verifier's own."""
    rg_answer: Literal["tags", "last_number", "last_line"] = "tags"
    """Where an `rg:NAME` reply's answer is read before the family's `score_answer`: `tags` (the last
    `<answer>...</answer>`, reasoning-gym's own form), `last_number` (the reply's last number: a small model
    that never writes tags, on a family with numeric answers) or `last_line` (its last non-empty line). With
    `instruction` unset, the prompt asks for that form."""
    rg: dict[str, Any] = Field(default_factory=dict)
    """An `rg:NAME` task's generator config, passed to `reasoning_gym.create_dataset` (e.g. `{min_animals = 2}`)."""

    @field_validator("verifier")
    @classmethod
    def _verifier(cls, v: str) -> str:
        if v in VERIFIERS:
            return v
        module, _, func = v.partition(":")
        if not module or not func or not all(p.isidentifier() for p in module.split(".")) or not func.isidentifier():
            raise ValueError(f"verifier {v!r} is none of {', '.join(VERIFIERS)} and not a module:function")
        return v

    @field_validator("name")
    @classmethod
    def _name(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and not v.replace("_", "").replace("-", "").replace(".", "").isalnum():
            raise ValueError(f"task_options.name {v!r} may hold letters, digits, '_', '-' and '.' only")
        return v
