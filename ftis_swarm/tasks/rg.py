"""`rg:NAME`: any of reasoning-gym's seeded generator families as a task, scored by its own `score_answer`.

Source: `reasoning_gym.create_dataset(NAME, seed=<generator seed>, size=..., **task_options.rg)`,
the entry at `(seed, index)` (generated.py: ids `rg:NAME/v1/s<seed>/<index>:<tag>`; the
dataset is built with size 1024 * 2^k, the smallest past `index`, so every node builds the
same entry). Split by content: the split key is the question itself, and one question in
five (by hash) is held out for `test`, so a test question never appears in training, and
the held-out draw is the same on every node.

Prompt: the question, then "Put your final answer within <answer></answer> tags." (the
format reasoning-gym's own prompts ask for). Answer form: the content of the last
`<answer>...</answer>`; with `task_options.rg_answer` `last_number` the reply's last number
(the prompt then asks for a single number), with `last_line` its last non-empty line
(`task_options.instruction` replaces the sentence either way). Reward: 1 when the family's `score_answer(answer, entry)` returns
1.0 (a partial score counts as `wrong`: the reward stays binary), in the learner's process.

Identity (`definition`): the family, its config, the answer form, the instruction and reasoning-gym's version.
"""

from __future__ import annotations

import functools
import json
import logging
import re
from typing import Any, Sequence

from ftis_swarm.tasks.answers import last_number
from ftis_swarm.tasks.base import Score, TaskItem, UnknownTaskError
from ftis_swarm.tasks.generated import Generated, GeneratedTask

logger = logging.getLogger(__name__)

PREFIX = "rg:"
INSTRUCTION = "Put your final answer within <answer></answer> tags."
ANSWER_FORMS = {
    "tags": ("the content of the last <answer>...</answer> of the reply", INSTRUCTION),
    "last_number": ("the last number of the reply", "Answer with a single number."),
    "last_line": ("the last non-empty line of the reply", "Give only the final answer, on the last line."),
}
"""`task_options.rg_answer`: where the answer is read, and the sentence that asks for it."""
_ANSWER = re.compile(r"<answer>\s?(.*?)\s?</answer>", re.DOTALL)


def families() -> list[str]:
    """reasoning-gym's registered family names."""
    from reasoning_gym.factory import DATASETS

    return sorted(DATASETS)


@functools.lru_cache(maxsize=64)
def _dataset(family: str, config_json: str, gen_seed: int, size: int) -> Any:
    import reasoning_gym

    return reasoning_gym.create_dataset(family, seed=gen_seed, size=size, **json.loads(config_json))


class ReasoningGymTask(GeneratedTask):
    """One reasoning-gym family (module docstring)."""

    version = 1
    generator_packages = ("reasoning-gym",)
    answer_form = "the content of the last <answer>...</answer> of the reply"

    def __init__(self, family: str, config: dict[str, Any] | None = None, *, verify_timeout: float = 5.0,
                 answer: str = "tags", instruction: str | None = None) -> None:
        super().__init__(verify_timeout=verify_timeout)
        if answer not in ANSWER_FORMS:
            raise UnknownTaskError(f"rg:{family}: the answer form is one of {', '.join(ANSWER_FORMS)}, got {answer!r}")
        self.answer = answer
        self.answer_form, default_instruction = ANSWER_FORMS[answer]
        self.instruction = instruction or default_instruction
        known = families()
        if family not in known:
            raise UnknownTaskError(f"unknown reasoning-gym family {family!r} (rg:{family}); it has {len(known)}, "
                                   f"e.g. {', '.join(known[:6])}")
        self.family = family
        self.name = PREFIX + family
        self.config = dict(config or {})
        self._config_json = json.dumps(self.config, sort_keys=True)
        try:
            self.generate(self.generator_seed(0), 0)
        except (TypeError, ValueError, AssertionError) as exc:  # a config key or value the family refuses
            raise UnknownTaskError(f"rg:{family}: reasoning-gym refuses the config {self.config}: {exc}") from None

    def definition(self) -> dict[str, Any]:
        out = super().definition()
        out.update(kind="rg", family=self.family, config=self.config)
        if self.answer != "tags" or self.instruction != INSTRUCTION:  # the default's digest stays what it was
            out.update(answer=self.answer, instruction=self.instruction)
        return out

    def _entry(self, gen_seed: int, index: int) -> tuple[Any, dict[str, Any]]:
        size = 1024
        while size <= index:
            size *= 2
        dataset = _dataset(self.family, self._config_json, gen_seed, size)
        return dataset, dataset[index]

    def generate(self, gen_seed: int, index: int) -> Generated:
        _, entry = self._entry(gen_seed, index)
        question = entry["question"]
        return Generated(question=question, answer=str(entry["answer"]), split_key=" ".join(question.split()))

    def prompt_of(self, question: str) -> str:
        return f"{question}\n{self.instruction}"

    def extract_answer(self, completion: str) -> str | None:
        if self.answer == "last_number":
            return last_number(completion)
        if self.answer == "last_line":
            lines = [ln.strip() for ln in completion.splitlines() if ln.strip()]
            return lines[-1] if lines else None
        found = _ANSWER.findall(completion)
        return found[-1].strip() if found else None

    def judge(self, items: Sequence[TaskItem], answers: Sequence[str | None]) -> list[Score]:
        out = []
        for item, answer in zip(items, answers):
            if answer is None:
                out.append(Score(0.0, False, "no_answer"))
                continue
            seed, index = (int(x) for x in item.item_id.split("/s", 1)[1].split(":")[0].split("/"))
            dataset, entry = self._entry(self.generator_seed(seed), index)
            try:
                value = float(dataset.score_answer(answer, entry))
            except Exception as exc:  # noqa: BLE001 - the family's scorer on a model's answer: that reply alone
                logger.warning("rg:%s score_answer raised %s: %s", self.family, type(exc).__name__, exc)
                out.append(Score(0.0, False, "verifier_error"))
                continue
            out.append(Score(1.0, True, "correct") if value >= 1.0 else Score(0.0, False, "wrong"))
        return out
