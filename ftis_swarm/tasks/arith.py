"""arith: sums of two small numbers (reasoning-gym's `basic_arithmetic`, offline), the
embedded default task: easy enough that the default model, SmolLM2-135M-Instruct, starts
with a reward between 0.2 and 0.8, so GRPO groups have mixed rewards from the first round.

Source: reasoning-gym's two-term sums with one-digit terms, drawn at `(seed, index)`;
draws with a term of 0 or 10 (its one-digit range is 0..10) are passed over, leaving
single-digit sums `a + b`, a and b in 1..9. Prompt: `What is a + b? Answer with a single
number.` (one phrasing; the default model did no better with reasoning-gym's four, "Solve
5 + 8." etc.; docs/tasks.md has the measurements). Split: by the unordered pair {a, b}
(one pair in five held out for `test`, both orders).
Ids: `arith/v1/s<seed>/<index>:<tag>` (generated.py).

Answer form: **the last number in the reply** (`1 + 6 = 7.` answers 7; thousands
separators and a trailing `.0` are fine). Not `\\boxed{}`: the default model writes a box
in about 1% of replies, so a boxed-only reward would be almost always 0 and give GRPO
nothing to learn from, while it states the sum as its last number in a fair share of
them. A `\\boxed{7}` reply is accepted as well, since 7 is its last number. Reward: 1 when
that number equals the sum, compared exactly in the learner's process (an integer needs no
math-verify and cannot hang).
"""

from __future__ import annotations

import functools
from typing import Any, Sequence

from ftis_swarm.tasks.answers import last_number, same_number
from ftis_swarm.tasks.base import Score, TaskItem
from ftis_swarm.tasks.generated import Generated, GeneratedTask

INSTRUCTION = "Answer with a single number."


@functools.lru_cache(maxsize=32)
def _dataset(gen_seed: int) -> Any:
    import reasoning_gym

    return reasoning_gym.create_dataset(
        "basic_arithmetic",
        seed=gen_seed,
        size=10**9,  # virtual: an item depends on (seed, index) alone
        min_terms=2,
        max_terms=2,
        min_digits=1,
        max_digits=1,
        operators=("+",),
        allow_parentheses=False,
        allow_negation=False,
    )


class ArithTask(GeneratedTask):
    name = "arith"
    version = 1
    generator_packages = ("reasoning-gym",)
    answer_form = "the last number in the reply"
    max_new_tokens = 64

    def generate(self, gen_seed: int, index: int) -> Generated | None:
        entry = _dataset(gen_seed)[index]
        a, b = (int(t) for t in entry["metadata"]["expression"].split("+"))
        if not (1 <= a <= 9 and 1 <= b <= 9):  # reasoning-gym's one-digit terms run 0..10
            return None
        return Generated(question=f"What is {a} + {b}?", answer=entry["answer"], split_key=f"{min(a, b)}+{max(a, b)}")

    def prompt_of(self, question: str) -> str:
        return f"{question} {INSTRUCTION}"

    def extract_answer(self, completion: str) -> str | None:
        return last_number(completion)

    def judge(self, items: Sequence[TaskItem], answers: Sequence[str | None]) -> list[Score]:
        scores = []
        for item, answer in zip(items, answers):
            if answer is None:
                scores.append(Score(0.0, False, "no_answer"))
            elif same_number(answer, item.answer):
                scores.append(Score(1.0, True, "correct"))
            else:
                scores.append(Score(0.0, False, "wrong"))
        return scores
