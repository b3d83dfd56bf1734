"""GSM-Symbolic: GSM8K-style word problems from templates with fresh names and numbers
(reasoning-gym's `gsm_symbolic`, offline; an endless stream).

Source: reasoning-gym generates the problem at `(seed, index)`; the ground truth is its
integer answer. Split: by template (85 templates; one in five held out for `test`), so the
test problems are new problem shapes, not the training shapes with other numbers.
Ids: `gsm_symbolic/v1/s<seed>/<index>:<tag>` (generated.py).

Prompt: the problem as reasoning-gym states it (it ends "Give the result as your final
answer. Do not include units."), then "Please reason step by step, and put your final answer
within \\boxed{}." Answer form: the content of the last `\\boxed{...}`. Reward: 1 when
math-verify finds it equal to the ground truth.
"""

from __future__ import annotations

import functools
from typing import Any

from ftis_swarm.tasks.answers import last_boxed
from ftis_swarm.tasks.base import BOXED_INSTRUCTION
from ftis_swarm.tasks.generated import Generated, GeneratedTask


@functools.lru_cache(maxsize=32)
def _dataset(gen_seed: int, size: int) -> Any:
    import reasoning_gym

    return reasoning_gym.create_dataset("gsm_symbolic", seed=gen_seed, size=size)


class GSMSymbolicTask(GeneratedTask):
    name = "gsm_symbolic"
    version = 1
    generator_packages = ("reasoning-gym",)
    answer_form = "the content of the last \\boxed{...} of the reply"

    def generate(self, gen_seed: int, index: int) -> Generated:
        # reasoning-gym draws each index's template from one list of `size` draws whose
        # prefix does not depend on `size`, so any size past `index` gives the same item.
        size = 1024
        while size <= index:
            size *= 2
        dataset = _dataset(gen_seed, size)
        entry = dataset[index]
        return Generated(
            question=entry["question"],
            answer=str(entry["answer"]),
            split_key=f"template{dataset.task_indices[index]}",
        )

    def prompt_of(self, question: str) -> str:
        return f"{question}\n{BOXED_INSTRUCTION}"

    def extract_answer(self, completion: str) -> str | None:
        return last_boxed(completion)
