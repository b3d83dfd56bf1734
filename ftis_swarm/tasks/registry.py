"""Task names to task classes, imported on demand so that naming one task loads no other.

Besides the built-in names: `jsonl:PATH` (jsonl.py), `rg:NAME` (rg.py), and the tasks that
installed packages add under the entry-point group `ftis_swarm.tasks` (name = a `Task`
subclass, built like the built-in ones; a built-in name wins). A spec task built in this
process is remembered under its wire name (`jsonl:<stem>`), with its options, so that a
peer's group naming it resolves to the same file here.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
from pathlib import Path
from typing import Any

from ftis_swarm.config.task_options import TaskOptionsConfig
from ftis_swarm.tasks.base import EvaluationTaskError, Task, UnknownTaskError

logger = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "ftis_swarm.tasks"
"""Packages add tasks here: `[project.entry-points."ftis_swarm.tasks"] my_task = "my_pkg.tasks:MyTask"`."""

_TASKS: dict[str, str] = {
    "arith": "ftis_swarm.tasks.arith:ArithTask",
    "arith_mix": "ftis_swarm.tasks.arith_mix:ArithMixTask",
    "gsm_symbolic": "ftis_swarm.tasks.gsm_symbolic:GSMSymbolicTask",
    "gsm8k": "ftis_swarm.tasks.gsm8k:GSM8KTask",
    "math500": "ftis_swarm.tasks.math500:Math500Task",
    "champ": "ftis_swarm.tasks.champ:ChampTask",
    "arith_add": "ftis_swarm.tasks.arith_mix:ArithAddTask",
    "arith_sub": "ftis_swarm.tasks.arith_mix:ArithSubTask",
    "arith_addsub": "ftis_swarm.tasks.arith_mix:ArithAddSubTask",
    "arith_mul": "ftis_swarm.tasks.arith_mix:ArithMulTask",
}
_SPEC_CLASSES = {"jsonl": "ftis_swarm.tasks.jsonl:JsonlTask", "rg": "ftis_swarm.tasks.rg:ReasoningGymTask"}
_BUILT: dict[str, tuple[str, TaskOptionsConfig]] = {}
"""Wire name of a spec task built in this process -> (its spec, its options)."""


def entry_points() -> dict[str, importlib.metadata.EntryPoint]:
    """The installed packages' tasks (group `ftis_swarm.tasks`), built-in names left out."""
    found = {}
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in _TASKS:
            logger.warning("entry point %s = %s shadows the built-in task %s: ignored", ep.name, ep.value, ep.name)
        else:
            found.setdefault(ep.name, ep)
    return found


def _spec(name: str) -> tuple[str, str] | None:
    kind, sep, rest = name.partition(":")
    return (kind, rest) if sep and kind in _SPEC_CLASSES and rest else None


def list_tasks() -> list[str]:
    """The names `get_task` knows, the embedded default (`arith`) first, then the packages' (`jsonl:PATH` and
    `rg:NAME` besides)."""
    return [*_TASKS, *entry_points()]


def task_class(name: str) -> type[Task]:
    """The class of task `name` (its module imported, nothing loaded); UnknownTaskError names the known ones."""
    spec = _spec(name)
    target = _SPEC_CLASSES[spec[0]] if spec else _TASKS.get(name)
    if target is None:
        ep = entry_points().get(name)
        if ep is None:
            raise UnknownTaskError(f"unknown task {name!r}; known tasks: {', '.join(list_tasks())}, jsonl:PATH, rg:NAME")
        try:
            cls = ep.load()
        except Exception as exc:  # noqa: BLE001 - a package's broken entry point is the operator's input
            raise UnknownTaskError(f"task {name}: its entry point {ep.value} does not load ({type(exc).__name__}: "
                                   f"{exc})") from None
        if not (isinstance(cls, type) and issubclass(cls, Task)):
            raise UnknownTaskError(f"task {name}: entry point {ep.value} is not a Task subclass")
        return cls
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


def get_task(name: str, *, data_dir: Path | str | None = None, verify_timeout: float = 5.0,
             options: TaskOptionsConfig | None = None) -> Task:
    """A fresh task object by name, or by spec (`jsonl:PATH`, `rg:NAME`, with `options`).

    `data_dir`: where gsm8k/math500 read their JSONL files (default: `FTIS_DATA_DIR`, else the
    copies shipped in the package; `"hub"` loads them through `datasets`). `verify_timeout`:
    seconds one answer's check may take before it scores 0 with reason `timeout`. `options`:
    a spec task's `[task_options]`; None: those it was last built with in this process (by
    spec or by wire name), else the defaults.
    """
    spec = _spec(name)
    if spec is None:
        return task_class(name)(data_dir=data_dir, verify_timeout=verify_timeout)
    if name in _BUILT and options is None:  # a wire name (`jsonl:<stem>`) or a spec built before
        name, options = _BUILT[name]
        spec = _spec(name)
        assert spec is not None
    kind, rest = spec
    options = options or TaskOptionsConfig()
    task: Any
    if kind == "jsonl":
        from ftis_swarm.tasks.jsonl import JsonlTask

        task = JsonlTask(rest, options, verify_timeout=verify_timeout)
    else:
        from ftis_swarm.tasks.rg import ReasoningGymTask

        task = ReasoningGymTask(rest, options.rg, verify_timeout=verify_timeout, answer=options.rg_answer,
                                instruction=options.instruction)
    _BUILT[task.name] = _BUILT[name] = (name, options)
    return task


def wire_name(name: str, options: TaskOptionsConfig | None = None) -> str:
    """The task id a task's groups carry: `name` itself, except `jsonl:PATH` -> `jsonl:<stem>` (no file read)."""
    spec = _spec(name)
    if spec is None or spec[0] != "jsonl":
        return name
    from ftis_swarm.tasks.jsonl import task_name

    return task_name(spec[1], options or (_BUILT[name][1] if name in _BUILT else TaskOptionsConfig()))
