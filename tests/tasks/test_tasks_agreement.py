"""The reward agrees with the ground truth on the real rows, through `task.score` (what the learner calls).

Reference solutions must score 1 (GSM8K test >= 99%, MATH-500 >= 97%; docs/tasks.md gives
the measured rates), and wrong answers 0. Reads the shipped files (the `data_dir` fixture).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ftis_swarm.tasks import get_task


def _rows(data_dir: Path, rel: str) -> list[dict]:
    with (data_dir / rel).open(encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def _items(task, split: str, n: int):
    return [task.item(f"{task.name}/v1/{split}/{i}") for i in range(n)]


@pytest.mark.data
@pytest.mark.slow
def test_gsm8k_reference_solutions_score_one_and_wrong_answers_zero(data_dir):
    task = get_task("gsm8k", data_dir=data_dir)
    rows = _rows(data_dir, "gsm8k/test.jsonl")
    assert len(rows) == 1319 and len(task.rows("train")) == 7473
    items = _items(task, "test", len(rows))
    scores = task.score(items, [r["answer"] for r in rows])
    rate = sum(s.reward for s in scores) / len(scores)
    assert rate >= 0.99, [(i, s.reason) for i, s in enumerate(scores) if not s.correct][:20]
    # a sample of the same answers boxed instead of after ####, then each off by one
    some = items[::5]
    boxed = task.score(some, [f"So the answer is $\\boxed{{{i.answer}}}$." for i in some])
    assert sum(s.reward for s in boxed) == len(some)
    wrong = task.score(some, [f"#### {int(i.answer) + 1}" for i in some])
    assert sum(s.reward for s in wrong) == 0 and {s.reason for s in wrong} == {"wrong"}


@pytest.mark.data
@pytest.mark.slow
def test_math500_reference_solutions_score_one_and_wrong_answers_zero(data_dir):
    task = get_task("math500", data_dir=data_dir)
    rows = _rows(data_dir, "math500/test.jsonl")
    assert len(rows) == 500
    items = _items(task, "test", len(rows))
    assert all(i.answer == r["answer"] and i.question == r["problem"] for i, r in zip(items, rows))
    scores = task.score(items, [r["solution"] for r in rows])
    rate = sum(s.reward for s in scores) / len(scores)
    assert rate >= 0.97, [(i, s.reason) for i, s in enumerate(scores) if not s.correct][:20]
    # the next problem's answer: 0, except where the two are equal (row 22's `5` and row
    # 23's `x=5`, rows 186/187 both `7`)
    shifted = [rows[k + 1]["answer"] for k in range(200)]
    scores = task.score(items[:200], [f"\\boxed{{{a}}}" for a in shifted])
    assert [k for k, s in enumerate(scores) if s.reward] == [22, 186]
    perturbed = task.score(items, [f"\\boxed{{{i.answer}+1}}" for i in items])
    assert sum(s.reward for s in perturbed) == 0


@pytest.mark.data
def test_math_verify_accepts_equivalent_forms(data_dir):
    task = get_task("math500", data_dir=data_dir)
    item = task.sample(1, seed=0, split="test")[0]
    probe = type(item)(**{**item.__dict__, "answer": "\\frac{1}{2}"})
    replies = ["\\boxed{0.5}", "\\boxed{\\dfrac12}", "\\boxed{1/2}", "\\boxed{x = \\frac{1}{2}}", "\\boxed{0.49}"]
    assert [s.reward for s in task.score([probe] * 5, replies)] == [1.0, 1.0, 1.0, 1.0, 0.0]


@pytest.mark.data
def test_dataset_ids_are_stable_and_checked(data_dir):
    task = get_task("gsm8k", data_dir=data_dir)
    items = task.sample(5, seed=4, split="test")
    assert items == get_task("gsm8k", data_dir=data_dir).sample(5, seed=4, split="test")
    assert all(get_task("gsm8k", data_dir=data_dir).item(i.item_id) == i for i in items)
    train = {i.question for i in task.sample(400, seed=0, split="train")}
    assert not train & {r.question for r in task.rows("test")}
    other_row = items[0].item_id.split(":")[0].rsplit("/", 1)[0] + "/0:" + items[0].item_id.split(":")[1]
    with pytest.raises(KeyError, match="another problem"):
        task.item(other_row)
    with pytest.raises(KeyError, match="has no row 1319"):
        task.item("gsm8k/v1/test/1319")


def test_champ_ground_truths_all_verify():
    task = get_task("champ")
    items = [task.item(f"champ/v1/test/{r.key}") for r in task.rows("test")]
    right = task.score(items, [f"The answer is $\\boxed{{{i.answer}}}$" for i in items])
    assert [s.reason for s in right] == ["correct"] * len(items)
    # off by one (equations like `x=y=0` excepted: math-verify compares their right-hand
    # sides, and `(x=y=0)+1` is no answer a model writes), and a number no answer equals
    shifted = [(i, f"\\boxed{{({i.answer})+1}}") for i in items if "=" not in i.answer]
    assert len(shifted) > 120
    wrong = task.score([i for i, _ in shifted], [c for _, c in shifted])
    assert sum(s.reward for s in wrong) == 0
