"""MATH-500: competition problems (HuggingFaceH4/MATH-500; 500 rows, test only), for evaluation.

Source: a local copy of `<data_dir>/math500/test.jsonl` (rows `{"problem", "solution",
"answer", "subject", "level", "unique_id"}`) or the hub. The ground truth is the `answer`
field. The row key is the row's position (the hub serves the same order).

Prompt: the problem, then "Please reason step by step, and put your final answer within
\\boxed{}." Answer form: the content of the last `\\boxed{...}`. Reward: 1 when math-verify
finds it equal to the ground truth. It has no train split: the paper trains on GSM8K and
evaluates here out of distribution.
"""

from __future__ import annotations

from typing import Any

from ftis_swarm.tasks.answers import last_boxed
from ftis_swarm.tasks.base import BOXED_INSTRUCTION
from ftis_swarm.tasks.dataset import DatasetTask, Row


class Math500Task(DatasetTask):
    name = "math500"
    version = 1
    splits = ("test",)
    answer_form = "the content of the last \\boxed{...} of the reply"
    max_new_tokens = 1024
    hub_id = "HuggingFaceH4/MATH-500"
    hub_config = None
    local_files = {"test": "math500/test.jsonl"}

    def row_of(self, raw: dict[str, Any], position: int) -> Row | None:
        return Row(key=str(position), question=raw["problem"], answer=raw["answer"])

    def prompt_of(self, question: str) -> str:
        return f"{question}\n{BOXED_INSTRUCTION}"

    def extract_answer(self, completion: str) -> str | None:
        return last_boxed(completion)
