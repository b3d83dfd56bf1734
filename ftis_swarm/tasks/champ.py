"""CHAMP: competition-level problems with concise answers (the `champ-dataset` package), for
out-of-distribution evaluation; offline, test split only.

Source: the package's `v0.json` (what `champ_dataset.load("v0")` reads), 270 problems. Only problems with one verifiable final
answer are kept (see `gold_of`): a plain number, or a single expression marked `@@...@@` in
CHAMP's answer, possibly followed by ", or equivalently @@...@@" alternatives (the last
one, the closed form, is the ground truth). Dropped: yes/no and prose answers ("0 is the
only possible value"), several answers ("376 and 625"), and notations math-verify misreads
(`C(n, k)`, `floor`, `sum_`, `±`, `...`). 131 of the 270 remain. The row key is CHAMP's own
identifier (`P_Combinatorics_1`).

Prompt: the problem, then "Please reason step by step, and put your final answer within
\\boxed{}." Answer form: the content of the last `\\boxed{...}`. Reward: 1 when math-verify
finds it equal to the ground truth (CHAMP writes it in plain notation, `2^(n-1)`, which
math-verify's LaTeX parser reads as well).
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

from ftis_swarm.tasks.answers import last_boxed
from ftis_swarm.tasks.base import BOXED_INSTRUCTION
from ftis_swarm.tasks.dataset import DatasetTask, Row

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_MARKED = re.compile(r"@@(.*?)@@")
_ONE_ANSWER = re.compile(r"@(?:, or (?:equivalently|an equivalent form such as) @)*(?:, or approximately [^@]*)?")
"""The shape of an answer with one expression (`@` stands for each `@@...@@`) and its alternatives."""
_MISREAD = ("C(", "floor", "sum_", "±", "...")


def gold_of(raw_answer: str) -> str | None:
    """The verifiable ground truth in a CHAMP answer, or None when it has none (see module doc)."""
    raw = raw_answer.strip()
    if _NUMBER.fullmatch(raw):
        return raw
    if not _ONE_ANSWER.fullmatch(_MARKED.sub("@", raw)):
        return None
    gold = _MARKED.findall(raw)[-1].strip()
    return None if any(bad in gold for bad in _MISREAD) else gold


@functools.lru_cache(maxsize=1)
def _problems() -> list[dict[str, Any]]:
    """CHAMP's problems, read once per process straight from the package's `v0.json`.

    `champ_dataset.load` would also build and validate the models' 72 MB of recorded
    conversations, which doubles the load time; the problem fields are all that is needed
    (`_text` is the text without CHAMP's `@@` markup, as `Problem.text` gives it).
    """
    import champ_dataset

    with (Path(str(champ_dataset.BASE_FOLDER)) / "dataset_files" / "v0.json").open(encoding="utf-8") as f:
        problems = json.load(f)["problems"]
    return [{"id": pid, "text": p["_text"], "raw_answer": p["_raw_answer"]} for pid, p in problems.items()]


class ChampTask(DatasetTask):
    name = "champ"
    version = 1
    splits = ("test",)
    answer_form = "the content of the last \\boxed{...} of the reply"
    max_new_tokens = 1024

    def load_raw(self, split: str) -> list[dict[str, Any]]:
        return _problems()

    def row_of(self, raw: dict[str, Any], position: int) -> Row | None:
        gold = gold_of(raw["raw_answer"])
        return None if gold is None else Row(key=raw["id"], question=raw["text"], answer=gold)

    def prompt_of(self, question: str) -> str:
        return f"{question}\n{BOXED_INSTRUCTION}"

    def extract_answer(self, completion: str) -> str | None:
        return last_boxed(completion)
