"""`jsonl:PATH`: the operator's own dataset file as a task, with a verifier of the project's or their own.

Rows: one JSON object a line, with a question (`task_options.prompt_key`, default `prompt`)
and its answer (`answer_key`, default `answer`); optionally an id (`id_key`) and a split
(`split_key`, `train` or `test`). Without a split column, a seeded share of the distinct
questions (`test_fraction`, by a hash of the question and `split_seed`) is held out, so
the same question never lands in both splits. Ids: `jsonl:<name>/v1/<split>/<row>:<tag>`
(dataset.py), the row being the id column or the row's position among the file's rows.

Verifiers (`task_options.verifier`): `math` (math-verify on the last `\\boxed{}`, as the
word-problem tasks), `exact` (the last `\\boxed{}`, else the last non-empty line, equal to
the answer after normalisation: case, whitespace runs, surrounding punctuation and `$`),
`number` (the reply's last number, as arith), `choice` (one multiple-choice letter), or a
callable `module:function` taking `(completion, answer)` and returning a truth value,
called in the learner's process (an exception scores the reply `verifier_error`).

Identity (`definition`): the file's sha256, the options that change items or rewards,
and the verifier: for a callable its module, its distribution's version and a hash of its
source; a callable without source (a builtin, a compiled extension) cannot be digested, so
the task is local-only (`local_only`): the node trains on its own groups and never
publishes them. Bad input raises `TaskSourceError` (one sentence, exit 2 in the CLI): a
missing or malformed file, a row without its answer, a verifier that raises on (or
refuses) the data's own answers.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import inspect
import json
import logging
import re
from pathlib import Path
from typing import Any, Callable, Sequence

from ftis_swarm.config.task_options import VERIFIERS, TaskOptionsConfig
from ftis_swarm.tasks.answers import last_boxed, last_number, same_number
from ftis_swarm.tasks.base import BOXED_INSTRUCTION, Score, TaskItem, package_version
from ftis_swarm.tasks.dataset import DatasetTask, Row, TaskSourceError
from ftis_swarm.tasks.generated import hash_int

logger = logging.getLogger(__name__)

PREFIX = "jsonl:"
INSTRUCTIONS = {
    "math": BOXED_INSTRUCTION,
    "exact": "Put your final answer within \\boxed{}.",
    "number": "Answer with a single number.",
    "choice": "Answer with the letter of the correct option.",
}
SELF_CHECK_ROWS = 16
"""Rows whose own answer each verifier must accept when the task is built (all rows: in-process verifiers)."""
_CHOICE = re.compile(r"(?<![A-Za-z])\(?([A-J])\)?(?![A-Za-z])")
_STRIP = " \t\n.,;:!?\"'`$"


def normalise(text: str) -> str:
    """Case folded, whitespace runs as one space, surrounding punctuation and `$` dropped."""
    return " ".join(text.casefold().split()).strip(_STRIP)


def task_name(path: str, options: TaskOptionsConfig) -> str:
    """The task's name on the wire: `jsonl:<options.name or the file's stem>` (no folder: peers' paths differ)."""
    return PREFIX + (options.name or re.sub(r"[^A-Za-z0-9_.-]", "_", Path(path).stem)[:48])


def load_callable(target: str) -> Callable[[str, str], Any]:
    """`module:function` imported; TaskSourceError (one sentence) when it is not there."""
    module, _, func = target.partition(":")
    try:
        fn = getattr(importlib.import_module(module), func)
    except (ImportError, AttributeError) as exc:
        raise TaskSourceError(f"verifier {target}: cannot import it ({type(exc).__name__}: {exc})") from None
    if not callable(fn):
        raise TaskSourceError(f"verifier {target} is not callable")
    return fn


def callable_definition(target: str, fn: Callable) -> dict[str, Any] | None:
    """Module, distribution version and source hash of a callable verifier; None when it has no source."""
    try:
        source = inspect.getsource(fn)
    except (OSError, TypeError):
        return None
    module = target.partition(":")[0]
    top = module.split(".")[0]
    dists = importlib.metadata.packages_distributions().get(top, [])
    return {
        "callable": target,
        "distribution": {d: package_version(d) for d in sorted(dists)},
        "source_sha256": hashlib.sha256(source.encode("utf-8")).hexdigest(),
    }


class JsonlTask(DatasetTask):
    """A task over the rows of one JSONL file (module docstring)."""

    version = 1
    splits = ("train", "test")
    answer_form = "as the task's verifier reads it (task_options.verifier)"

    def __init__(self, path: Path | str, options: TaskOptionsConfig | None = None, *,
                 verify_timeout: float = 5.0) -> None:
        self.options = options or TaskOptionsConfig()
        self.path = Path(path)
        self.name = task_name(str(path), self.options)
        super().__init__(verify_timeout=verify_timeout)
        try:
            self._bytes = self.path.read_bytes()
        except OSError as exc:
            raise TaskSourceError(f"task {self.name}: cannot read {self.path}: {exc.strerror or exc}") from None
        self.verifier = self.options.verifier
        self._fn: Callable[[str, str], Any] | None = None
        verifier_def: Any = self.verifier
        if self.verifier not in VERIFIERS:
            self._fn = load_callable(self.verifier)
            verifier_def = callable_definition(self.verifier, self._fn)
            if verifier_def is None:
                self.local_only = True
                logger.warning("task %s is local-only: its verifier %s has no Python source to digest, so this "
                               "node trains on its own groups and never publishes them", self.name, self.verifier)
                verifier_def = {"callable": self.verifier, "source_sha256": None}
        self._verifier_def = verifier_def
        self._raw = self._parse()
        for split in self.splits:
            self.rows(split)
        self._self_check()

    # -- rows ---------------------------------------------------------------------------------------
    def _parse(self) -> dict[str, list[dict[str, Any]]]:
        """Every row, validated, by split (in file order)."""
        o = self.options
        try:
            text = self._bytes.decode("utf-8")
        except UnicodeDecodeError:
            raise TaskSourceError(f"task {self.name}: {self.path} is not UTF-8 text") from None
        by_split: dict[str, list[dict[str, Any]]] = {s: [] for s in self.splits}
        keys: set[str] = set()
        position = 0
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                raw = json.loads(line)
            except ValueError as exc:
                raise TaskSourceError(f"task {self.name}: {self.path} line {number} is not JSON ({exc})") from None
            if not isinstance(raw, dict):
                raise TaskSourceError(f"task {self.name}: {self.path} line {number} is not a JSON object")
            question, answer = raw.get(o.prompt_key), raw.get(o.answer_key)
            if not isinstance(question, str) or not question.strip():
                raise TaskSourceError(f"task {self.name}: {self.path} line {number} has no {o.prompt_key!r} text")
            if answer is None or isinstance(answer, (dict, list)) or not str(answer).strip():
                raise TaskSourceError(f"task {self.name}: {self.path} line {number} has no {o.answer_key!r} answer")
            key = str(raw.get(o.id_key, "")) if o.id_key else str(position)
            if not key or "/" in key or ":" in key or key in keys:
                raise TaskSourceError(f"task {self.name}: {self.path} line {number} has a missing, repeated or "
                                      f"unusable id {key!r} (no '/' or ':')")
            keys.add(key)
            split = self._split_of(raw, question, number)
            by_split[split].append({"key": key, "question": question, "answer": str(answer).strip()})
            position += 1
        if position == 0:
            raise TaskSourceError(f"task {self.name}: {self.path} holds no rows")
        if not by_split["train"]:
            raise TaskSourceError(f"task {self.name}: {self.path} has no train rows")
        return by_split

    def _split_of(self, raw: dict[str, Any], question: str, number: int) -> str:
        o = self.options
        if o.split_key:
            split = raw.get(o.split_key)
            if split not in self.splits:
                raise TaskSourceError(f"task {self.name}: {self.path} line {number} has split {split!r}, not "
                                      f"{' or '.join(self.splits)}")
            return split
        share = hash_int(f"{o.split_seed}/{' '.join(question.split())}") % 10**6
        return "test" if share < o.test_fraction * 10**6 else "train"

    def load_raw(self, split: str) -> list[dict[str, Any]]:
        return self._raw[split]

    def row_of(self, raw: dict[str, Any], position: int) -> Row | None:
        return Row(key=raw["key"], question=raw["question"], answer=raw["answer"])

    def prompt_of(self, question: str) -> str:
        instruction = self.options.instruction
        if instruction is None:
            instruction = INSTRUCTIONS.get(self.verifier, "")
        return f"{question}\n{instruction}" if instruction else question

    def definition(self) -> dict[str, Any]:
        o = self.options
        return {
            "name": self.name,
            "version": self.version,
            "kind": "jsonl",
            "data_sha256": hashlib.sha256(self._bytes).hexdigest(),
            "columns": [o.prompt_key, o.answer_key, o.id_key, o.split_key],
            "split": None if o.split_key else [o.test_fraction, o.split_seed],
            "prompt": self.prompt_of("{question}"),
            "verifier": self._verifier_def,
        }

    # -- scoring ------------------------------------------------------------------------------------
    def extract_answer(self, completion: str) -> str | None:
        if self._fn is not None:
            return completion
        if self.verifier == "math":
            return last_boxed(completion)
        if self.verifier == "number":
            return last_number(completion)
        if self.verifier == "choice":
            boxed = last_boxed(completion)
            found = _CHOICE.findall(boxed if boxed is not None else completion)
            return found[-1] if found else None
        boxed = last_boxed(completion)  # exact
        if boxed is not None:
            return boxed
        lines = [line for line in completion.splitlines() if line.strip()]
        return lines[-1] if lines else None

    def judge(self, items: Sequence[TaskItem], answers: Sequence[str | None]) -> list[Score]:
        if self.verifier == "math":
            return super().judge(items, answers)
        out = []
        for item, answer in zip(items, answers):
            if answer is None:
                out.append(Score(0.0, False, "no_answer"))
                continue
            try:
                right = self._right(answer, item.answer)
            except Exception as exc:  # noqa: BLE001 - the operator's callable: one reply's failure stays with it
                logger.warning("task %s: verifier %s raised %s: %s", self.name, self.verifier, type(exc).__name__, exc)
                out.append(Score(0.0, False, "verifier_error"))
                continue
            out.append(Score(1.0, True, "correct") if right else Score(0.0, False, "wrong"))
        return out

    def _right(self, answer: str, gold: str) -> bool:
        if self._fn is not None:
            return bool(self._fn(answer, gold))
        if self.verifier == "number":
            return same_number(answer, gold)
        if self.verifier == "choice":
            return answer.upper() == gold.strip().strip("()").upper()
        return normalise(answer) == normalise(gold)

    def _self_check(self) -> None:
        """Each verifier must accept a reply stating the data's own answer: else the rows are unlearnable."""
        rows = [(split, r) for split in self.splits for r in self.rows(split)]
        limit = SELF_CHECK_ROWS if self.verifier == "math" or self._fn is not None else len(rows)
        for split, row in rows[:limit]:
            item = self._build(split, row)
            if self.verifier == "choice" and not re.fullmatch(r"\(?[A-Ja-j]\)?", row.answer):
                raise TaskSourceError(f"task {self.name}: row {row.key}'s answer {row.answer!r} is not an option "
                                      "letter A-J (verifier choice)")
            reply = row.answer if self.verifier in ("number",) or self._fn else f"\\boxed{{{row.answer}}}"
            try:
                if self._fn is not None:
                    self._fn(reply, row.answer)
                    continue
                score = self.judge([item], [self.extract_answer(reply)])[0]
            except Exception as exc:  # noqa: BLE001 - reported as the operator's bad input
                raise TaskSourceError(f"task {self.name}: verifier {self.verifier} raised {type(exc).__name__} on "
                                      f"row {row.key}'s own answer: {exc}") from None
            if not score.correct:
                raise TaskSourceError(f"task {self.name}: verifier {self.verifier} does not accept row {row.key}'s "
                                      f"own answer {row.answer!r} ({score.reason})")
