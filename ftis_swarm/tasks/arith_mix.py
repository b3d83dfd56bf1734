"""arith_mix: `a + b`, `a - b` and `a * b` with single-digit terms, an `arith` variant whose
held-out split is small enough to use whole and hard enough to leave room to learn.

Why a variant: `arith` (sums only) has 22 distinct held-out questions, and the two-digit
plus one-digit sums the experiment first used are too hard for the default
model (SmolLM2-135M-Instruct, greedy, 24 tokens: 0.06). On the three single-digit
operations it scores 0.36 (+), 0.47 (-) and 0.41 (*), 0.44 greedy on the mix and 0.26
sampled at T = 1: a start in the middle of what GRPO needs. No single-digit task has 300
distinct held-out questions, so the experiment uses every distinct held-out question
once (`heldout_items`), with sampled accuracy beside greedy.

Items: operation uniform over `+ - *`, a and b uniform over 1..9, drawn at `(seed, index)`
from Python's `random` seeded with both (no third-party generator, so the stream cannot
change under a package upgrade). 243 distinct questions: 81 of each operation (`5 - 9`
is asked: the answer -4 is a last number like any other). Prompt, answer form and reward
are `arith`'s (the reply's last number, compared exactly). Split key: the operation and
the operand pair, unordered for `+` and `*` (so `3 + 4` and `4 + 3` share a split),
ordered for `-`; two keys in five of each operation, the lowest by hash, are held out
(twice arith's share, and the same share of every operation: the held-out questions are
what the experiment's statistics count).

`sample(n, seed, split)` returns distinct questions first: it walks the seed's stream and
passes over a question already drawn in this call until every question of the split has
been drawn, then starts over, like a dataset task's permutation. So `size(split)` is the
number of distinct questions, and `sample(size("test"), seed=s, split="test")` is every
held-out question exactly once (in an order that depends on `s`).
Ids: `arith_mix/v1/s<seed>/<index>:<tag>` (generated.py).
"""

from __future__ import annotations

import functools
import random

from ftis_swarm.tasks.arith import ArithTask
from ftis_swarm.tasks.base import TaskItem
from ftis_swarm.tasks.generated import Generated, hash_int

OPERATIONS = ("+", "-", "*")
TERMS = range(1, 10)
TEST_SHARE = 0.4
"""Share of each operation's split keys held out: twice arith's one in five, for more held-out questions."""


def _answer(op: str, a: int, b: int) -> int:
    return a + b if op == "+" else a - b if op == "-" else a * b


def _split_key(op: str, a: int, b: int) -> str:
    if op == "-":
        return f"{a}-{b}"
    return f"{min(a, b)}{op}{max(a, b)}"


class ArithMixTask(ArithTask):
    name = "arith_mix"
    version = 1
    generator_packages = ()  # Python's `random`: no package
    operations: tuple[str, ...] = OPERATIONS
    """The operations drawn (uniformly); the per-operation tasks below draw one."""

    def generate(self, gen_seed: int, index: int) -> Generated:
        rng = random.Random(f"{gen_seed}/{index}")
        op, a, b = rng.choice(self.operations), rng.choice(TERMS), rng.choice(TERMS)
        return Generated(question=f"What is {a} {op} {b}?", answer=str(_answer(op, a, b)),
                         split_key=_split_key(op, a, b))

    @functools.cached_property
    def _test_keys(self) -> frozenset[str]:
        """The held-out split keys: of each operation's keys, the `TEST_SHARE` with the lowest hash."""
        held: set[str] = set()
        for op in self.operations:  # hashed under arith_mix's name: a per-operation task holds out its questions
            keys = sorted({_split_key(op, a, b) for a in TERMS for b in TERMS},
                          key=lambda k: hash_int(f"arith_mix/split/{k}"))
            held.update(keys[: round(TEST_SHARE * len(keys))])
        return frozenset(held)

    def split_of(self, split_key: str) -> str:
        return "test" if split_key in self._test_keys else "train"

    @functools.cached_property
    def _counts(self) -> dict[str, int]:
        """Distinct questions per split, counted over the whole catalogue (243 questions)."""
        counts = {split: 0 for split in self.splits}
        for op in self.operations:
            for a in TERMS:
                for b in TERMS:
                    counts[self.split_of(_split_key(op, a, b))] += 1
        return counts

    def size(self, split: str) -> int:
        self.check_split(split)
        return self._counts[split]

    def sample(self, n: int, *, seed: int, split: str = "train") -> list[TaskItem]:
        self.check_split(split)
        if n < 0 or seed < 0:
            raise ValueError(f"n and seed must be non-negative, got n={n}, seed={seed}")
        distinct = self._counts[split]
        items: list[TaskItem] = []
        seen: set[str] = set()
        for index in range(max(n, 1) * self.max_scan_factor):
            if len(items) == n:
                return items
            candidate = self._build(seed, index)
            if candidate is None or candidate.split != split or candidate.question in seen:
                continue
            items.append(candidate)
            seen.add(candidate.question)
            if len(seen) == distinct:
                seen.clear()
        if len(items) == n:
            return items
        raise RuntimeError(f"task {self.name} found only {len(items)} of {n} {split} items for seed {seed}")


class ArithAddTask(ArithMixTask):
    """`arith_mix`'s `+` questions alone (81: 48 train, 33 test, the same split as in arith_mix)."""

    name = "arith_add"
    operations = ("+",)


class ArithSubTask(ArithMixTask):
    """`arith_mix`'s `-` questions alone (81: 49 train, 32 test)."""

    name = "arith_sub"
    operations = ("-",)


class ArithAddSubTask(ArithMixTask):
    """`arith_mix`'s `+` and `-` questions (162: 97 train, 65 test): the experiment's learner A without `*`."""

    name = "arith_addsub"
    operations = ("+", "-")


class ArithMulTask(ArithMixTask):
    """`arith_mix`'s `*` questions alone (81: 51 train, 30 test)."""

    name = "arith_mul"
    operations = ("*",)


def heldout_items(seed: int = 0) -> list[TaskItem]:
    """Every distinct held-out question of `arith_mix` once, as items of `seed`'s stream."""
    task = ArithMixTask()
    return task.sample(task.size("test"), seed=seed, split="test")
