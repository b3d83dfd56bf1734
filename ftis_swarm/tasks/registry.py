"""Task names to task classes, imported on demand so that naming one task loads no other."""

from __future__ import annotations

import importlib
from pathlib import Path

from ftis_swarm.tasks.base import EvaluationTaskError, Task, UnknownTaskError

_TASKS: dict[str, str] = {
    "arith": "ftis_swarm.tasks.arith:ArithTask",
    "arith_mix": "ftis_swarm.tasks.arith_mix:ArithMixTask",
    "gsm_symbolic": "ftis_swarm.tasks.gsm_symbolic:GSMSymbolicTask",
    "gsm8k": "ftis_swarm.tasks.gsm8k:GSM8KTask",
    "math500": "ftis_swarm.tasks.math500:Math500Task",
    "champ": "ftis_swarm.tasks.champ:ChampTask",
}


def list_tasks() -> list[str]:
    """The names `get_task` knows, the embedded default (`arith`) first."""
    return list(_TASKS)


def task_class(name: str) -> type[Task]:
    """The class of task `name` (its module imported, nothing loaded); UnknownTaskError names the known ones."""
    target = _TASKS.get(name)
    if target is None:
        raise UnknownTaskError(f"unknown task {name!r}; known tasks: {', '.join(_TASKS)}")
    module, cls = target.split(":")
    return getattr(importlib.import_module(module), cls)


def has_train_split(name: str) -> bool:
    """True when task `name` can be trained on (MATH-500 and CHAMP are evaluation sets)."""
    return "train" in task_class(name).splits


def check_trainable(name: str) -> None:
    """Raises `EvaluationTaskError` (one sentence) for a task a node must not train on, `UnknownTaskError` for no task."""
    if not has_train_split(name):
        raise EvaluationTaskError(
            f"task {name} is an evaluation set with no train split: a node cannot train on it "
            f"(evaluate with `ftis-node eval --task {name}`)"
        )


def get_task(name: str, *, data_dir: Path | str | None = None, verify_timeout: float = 5.0) -> Task:
    """A fresh task object by name.

    `data_dir`: where gsm8k/math500 read their JSONL files (default: `FTIS_DATA_DIR`, else the
    copies shipped in the package; `"hub"` loads them through `datasets`). `verify_timeout`:
    seconds one answer's check may take before it scores 0 with reason `timeout`.
    """
    return task_class(name)(data_dir=data_dir, verify_timeout=verify_timeout)
