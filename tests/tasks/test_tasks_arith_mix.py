"""arith_mix: the +, -, * variant of arith whose every held-out question the experiment uses once."""

from __future__ import annotations

import re

import pytest

from ftis_swarm.tasks import UnknownItemError, get_task
from ftis_swarm.tasks.arith_mix import heldout_items

QUESTION = re.compile(r"What is (\d) ([-+*]) (\d)\?")


def _parts(question: str) -> tuple[int, str, int]:
    m = QUESTION.fullmatch(question)
    assert m is not None, question
    return int(m[1]), m[2], int(m[3])


def test_split_sizes_cover_the_243_questions_and_every_heldout_question_comes_once():
    task = get_task("arith_mix")
    assert (task.size("train"), task.size("test")) == (148, 95)
    held = heldout_items()
    assert len(held) == 95 and len({it.question for it in held}) == 95
    assert all(it.split == "test" for it in held)
    ops = [_parts(it.question)[1] for it in held]
    assert (ops.count("+"), ops.count("-"), ops.count("*")) == (33, 32, 30)  # 2 keys in 5 of each operation
    train = task.sample(148, seed=3, split="train")
    assert len({it.question for it in train}) == 148  # distinct before any repeat
    assert not {it.question for it in train} & {it.question for it in held}


def test_answers_are_the_arithmetic_and_ids_are_versioned_and_resolve():
    task = get_task("arith_mix")
    for it in heldout_items(seed=1) + task.sample(40, seed=2):
        a, op, b = _parts(it.question)
        assert int(it.answer) == {"+": a + b, "-": a - b, "*": a * b}[op]
        assert re.fullmatch(r"arith_mix/v1/s\d+/\d+:[0-9a-f]{8}", it.item_id)
        assert task.item(it.item_id) == it
        assert it.prompt == f"{it.question} Answer with a single number."
    with pytest.raises(UnknownItemError, match="v2; this node has v1"):
        task.item("arith_mix/v2/s0/3")


def test_split_is_by_content_commutative_pairs_together_differences_ordered():
    task = get_task("arith_mix")
    splits = {}
    for seed in range(3):
        for it in task.sample(148, seed=seed) + task.sample(95, seed=seed, split="test"):
            splits[_parts(it.question)] = it.split
    assert len(splits) == 243
    for (a, op, b), split in splits.items():
        if op in "+*":
            assert splits[(b, op, a)] == split
    assert any(splits[(a, "-", b)] != splits[(b, "-", a)] for a in range(1, 10) for b in range(1, 10))


def test_heldout_order_depends_on_the_seed_but_not_the_set():
    a, b = heldout_items(seed=0), heldout_items(seed=5)
    assert [it.question for it in a] != [it.question for it in b]
    assert {it.question for it in a} == {it.question for it in b}
    assert [it.item_id for it in a] == [it.item_id for it in heldout_items(seed=0)]
