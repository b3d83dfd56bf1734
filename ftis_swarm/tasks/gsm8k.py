"""GSM8K: grade-school word problems (openai/gsm8k, config `main`; 7,473 train / 1,319 test).

Source: a local copy of the original JSONL (`<data_dir>/gsm8k/{train,test}.jsonl`, rows
`{"question", "answer"}`) or the hub. The ground truth is the number after `#### ` in the
reference solution, thousands separators dropped.

Prompt: the question, then "Please reason step by step, and put your final answer within
\\boxed{}." Answer form: the last `\\boxed{...}` or the last `#### N` of the completion,
whichever comes later (`#### N` is how GSM8K's own solutions end, so a model trained on
them is not penalised for it). Reward: 1 when math-verify finds that answer equal to the
ground truth.
"""

from __future__ import annotations

from typing import Any

from ftis_swarm.tasks.answers import after_hashes, last_boxed, last_boxed_position
from ftis_swarm.tasks.base import BOXED_INSTRUCTION
from ftis_swarm.tasks.dataset import DatasetTask, Row


class GSM8KTask(DatasetTask):
    name = "gsm8k"
    version = 1
    splits = ("train", "test")
    answer_form = "the last \\boxed{N} or `#### N` of the reply, whichever comes later"
    hub_id = "openai/gsm8k"
    hub_config = "main"
    local_files = {"train": "gsm8k/train.jsonl", "test": "gsm8k/test.jsonl"}

    def row_of(self, raw: dict[str, Any], position: int) -> Row | None:
        gold = after_hashes(raw["answer"])
        if gold is None:
            raise ValueError(f"gsm8k row {position} has no '#### N' final answer: {raw['answer'][-80:]!r}")
        return Row(key=str(position), question=raw["question"], answer=gold[0])

    def prompt_of(self, question: str) -> str:
        return f"{question}\n{BOXED_INSTRUCTION}"

    def extract_answer(self, completion: str) -> str | None:
        hashes = after_hashes(completion)
        boxed_at = last_boxed_position(completion)
        if hashes is not None and hashes[1] > boxed_at:
            return hashes[0]
        return last_boxed(completion)
