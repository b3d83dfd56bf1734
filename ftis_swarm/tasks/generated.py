"""Tasks whose items are generated offline from `(seed, index)`: the id scheme and the splits.

An item id is `<task>/v<version>/s<seed>/<index>:<tag>` (e.g. `arith/v1/s0/123:5d1c0e7a`):
any node with the same task version regenerates the same problem from it, and the tag (8
hex digits of the question) makes a node whose generator differs (another reasoning-gym
release) refuse the id instead of scoring against a different problem. A lookup without
the tag is accepted.

Each user seed is hashed to the generator's own seed, so the streams of seeds 0 and 1 are
unrelated (reasoning-gym seeds item `i` with `seed + i`, which would make seed 1's stream
seed 0's shifted by one). Train and test are disjoint by content, not by index: each task
names a split key (arith: the unordered pair of operands; gsm_symbolic: the template), and
one key in five, by hash, is held out for `test`. `sample` walks the seed's stream and keeps
the items of the requested split, so every seed yields both splits and they never overlap.
"""

from __future__ import annotations

import hashlib
import re
from abc import abstractmethod
from dataclasses import dataclass

from ftis_swarm.tasks.base import (
    ItemOutOfRangeError,
    MalformedItemIdError,
    Task,
    TaskItem,
    UnknownItemError,
    content_tag,
)

TEST_ONE_IN = 5
"""One split key in this many is held out for `test`."""
MAX_SEED = 2**63
"""Seeds at or above this are out of range (a node's seeds are 64-bit)."""


@dataclass(frozen=True)
class Generated:
    """What a task's generator returns for one `(seed, index)`."""

    question: str
    answer: str
    split_key: str
    """Items with the same key always land in the same split."""


def hash_int(text: str) -> int:
    return int(hashlib.sha256(text.encode("utf-8")).hexdigest()[:12], 16)


class GeneratedTask(Task):
    """A task generated from `(seed, index)`; subclasses supply `generate` and `prompt_of`."""

    max_scan_factor = 200
    """`sample` gives up (a task bug) after scanning this many indices per item requested."""
    max_index = 10**6
    """Indices at or above this are out of range: `sample` reaches about 2 indices per item
    requested, so no node drawing under 100,000 prompts a round goes near it."""

    @abstractmethod
    def generate(self, gen_seed: int, index: int) -> Generated | None:
        """The problem at `index` of the generator stream seeded with `gen_seed`; None when
        the task passes over that draw (e.g. arith keeps single-digit operands only)."""

    @abstractmethod
    def prompt_of(self, question: str) -> str:
        """The user message for `question`, with the answer-format instruction."""

    def generator_seed(self, seed: int) -> int:
        return hash_int(f"{self.name}/v{self.version}/s{seed}") % (2**31)

    def split_of(self, split_key: str) -> str:
        return "test" if hash_int(f"{self.name}/split/{split_key}") % TEST_ONE_IN == 0 else "train"

    def size(self, split: str) -> int | None:
        self.check_split(split)
        return None

    def sample(self, n: int, *, seed: int, split: str = "train") -> list[TaskItem]:
        self.check_split(split)
        if n < 0 or seed < 0:
            raise ValueError(f"n and seed must be non-negative, got n={n}, seed={seed}")
        items: list[TaskItem] = []
        for index in range(max(n, 1) * self.max_scan_factor):
            if len(items) == n:
                return items
            candidate = self._build(seed, index)
            if candidate is not None and candidate.split == split:
                items.append(candidate)
        if len(items) == n:
            return items
        raise RuntimeError(f"task {self.name} found only {len(items)} of {n} {split} items for seed {seed}")

    def item(self, item_id: str) -> TaskItem:
        pattern = rf"{re.escape(self.name)}/v(\d+)/s(\d+)/(\d+)(?::([0-9a-f]{{8}}))?"
        match = re.fullmatch(pattern, item_id)
        if match is None:
            raise MalformedItemIdError(
                f"item id {item_id!r} is not of the form {self.name}/v{self.version}/s<seed>/<index>[:<tag>]"
            )
        version, seed, index, tag = int(match[1]), int(match[2]), int(match[3]), match[4]
        if version != self.version:
            raise UnknownItemError(f"item {item_id} is from {self.name} v{version}; this node has v{self.version}")
        if seed >= MAX_SEED or index >= self.max_index:
            raise ItemOutOfRangeError(
                f"item {item_id} is out of range: seeds run below 2^63 and indices below {self.max_index}"
            )
        found = self._build(seed, index)
        if found is None:
            raise UnknownItemError(f"item {item_id}: index {index} of seed {seed} is no {self.name} item")
        if tag is not None and not found.item_id.endswith(":" + tag):
            raise UnknownItemError(
                f"item {item_id} does not match this node's generator ({found.item_id}): "
                "the peers run different versions of its generator package"
            )
        return found

    def _build(self, seed: int, index: int) -> TaskItem | None:
        gen = self.generate(self.generator_seed(seed), index)
        if gen is None:
            return None
        return TaskItem(
            task_id=self.name,
            item_id=f"{self.name}/v{self.version}/s{seed}/{index}:{content_tag(gen.question)}",
            split=self.split_of(gen.split_key),
            question=gen.question,
            prompt=self.prompt_of(gen.question),
            answer=gen.answer,
        )
