"""Tasks over a fixed list of rows (GSM8K, MATH-500, CHAMP): where rows come from, ids, sampling.

Rows load from JSONL files in the dataset's original format. By default these are the
copies shipped inside the package (`tasks/data/`: GSM8K train and test, MATH-500, with
their MIT licences and `SHA256SUMS`), so a clone works offline with nothing beside it.
Overrides: the `data_dir` option, else the `FTIS_DATA_DIR` environment variable, names
another folder in the same layout; `FTIS_DATA_DIR=hub` (or `data_dir="hub"`) loads from
the HF hub through `datasets` instead (the `datasets` extra, imported only then). All
serve the same rows in the same order, so ids agree between nodes that load differently.
A file whose folder holds a `SHA256SUMS` naming it is checked against it when first read:
a damaged copy is refused, not scored against.

An item id is `<task>/v<version>/<split>/<row key>:<tag>` (e.g. `gsm8k/v1/test/17:0c9e4f1a`):
the row key is the row's position in its split file (or the source's own identifier), the
tag 8 hex digits of the question, so a node whose copy of the data differs refuses the id
instead of scoring a peer's group against another problem. A lookup without the tag is
accepted.

`sample(n, seed=s, split=...)` walks a permutation of the split seeded by `s`, starting a
fresh permutation each time it runs out: all rows before any repeats.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import random
import re
from abc import abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from ftis_swarm.errors import UserError
from ftis_swarm.tasks.base import (
    ItemOutOfRangeError,
    MalformedItemIdError,
    Task,
    TaskItem,
    UnknownItemError,
    content_tag,
)

logger = logging.getLogger(__name__)

DATA_DIR_ENV = "FTIS_DATA_DIR"
HUB = "hub"
"""The value of `FTIS_DATA_DIR` (or `data_dir`) that loads rows from the HF hub."""
BUNDLED_DATA = Path(__file__).resolve().parent / "data"
"""The copies shipped in the package (see data/README.md)."""


class TaskSourceError(UserError, FileNotFoundError):
    """A task's rows are not where its source says (a folder lacks them, a copy is damaged, no `datasets`)."""


@dataclass(frozen=True)
class Row:
    """One problem of a fixed dataset, in the task's terms."""

    key: str
    """Stable within its split: the position in the original file, or the source's identifier."""
    question: str
    answer: str


class DatasetTask(Task):
    """A task over fixed rows; subclasses name the source and map a raw row to a `Row`."""

    hub_id: ClassVar[str | None] = None
    hub_config: ClassVar[str | None] = None
    local_files: ClassVar[dict[str, str]] = {}
    """Split -> file under the data directory, in the dataset's original JSONL format."""

    def __init__(self, *, data_dir: Path | str | None = None, verify_timeout: float = 5.0) -> None:
        folder: Path | None = None
        if self.local_files:  # data_dir None below means: from the hub
            source = data_dir if data_dir is not None else os.environ.get(DATA_DIR_ENV) or BUNDLED_DATA
            folder = None if str(source) == HUB else Path(source)
        super().__init__(data_dir=folder, verify_timeout=verify_timeout)
        self._rows: dict[str, list[Row]] = {}
        self._by_key: dict[str, dict[str, Row]] = {}
        self._check_source()

    def definition(self) -> dict[str, Any]:
        """The base's, plus the sha256 of each split file read from a folder (the hub: its id)."""
        out = super().definition()
        if self.data_dir is not None:
            out["data"] = {split: hashlib.sha256((Path(self.data_dir) / rel).read_bytes()).hexdigest()
                           for split, rel in sorted(self.local_files.items())}
        elif self.hub_id is not None:
            out["data"] = {"hub": f"{self.hub_id}/{self.hub_config}"}
        return out

    @abstractmethod
    def row_of(self, raw: dict[str, Any], position: int) -> Row | None:
        """The task's view of one raw row; None leaves the row out (e.g. no verifiable answer)."""

    @abstractmethod
    def prompt_of(self, question: str) -> str:
        """The user message for `question`, with the answer-format instruction."""

    def load_raw(self, split: str) -> list[dict[str, Any]]:
        """The split's raw rows, from the data directory or the hub."""
        if self.data_dir is not None:
            path = Path(self.data_dir) / self.local_files[split]
            raw = path.read_bytes()
            _check_sum(Path(self.data_dir), self.local_files[split], raw)
            return [json.loads(line) for line in raw.decode("utf-8").splitlines() if line.strip()]
        import datasets  # only on machines that load from the hub

        logger.info("loading %s (%s) split %s from the hub", self.hub_id, self.hub_config, split)
        return [dict(r) for r in datasets.load_dataset(self.hub_id, self.hub_config, split=split)]

    def _check_source(self) -> None:
        if not self.local_files:
            return
        if self.data_dir is not None:
            missing = [f for f in self.local_files.values() if not (Path(self.data_dir) / f).is_file()]
            if missing:
                raise TaskSourceError(f"task {self.name}: {self.data_dir} lacks {', '.join(missing)}")
        elif importlib.util.find_spec("datasets") is None:
            raise TaskSourceError(
                f"task {self.name}: {DATA_DIR_ENV}={HUB} loads {self.hub_id} through the datasets package, which "
                f"is not installed (pip install 'ftis-swarm[datasets]'); unset {DATA_DIR_ENV} to use the copy shipped "
                "with the package"
            )

    def rows(self, split: str) -> list[Row]:
        """The split's rows in source order (loaded once per task object)."""
        self.check_split(split)
        if split not in self._rows:
            rows = [r for i, raw in enumerate(self.load_raw(split)) if (r := self.row_of(raw, i)) is not None]
            self._rows[split] = rows
            self._by_key[split] = {r.key: r for r in rows}
        return self._rows[split]

    def size(self, split: str) -> int | None:
        return len(self.rows(split))

    def sample(self, n: int, *, seed: int, split: str = "train") -> list[TaskItem]:
        if n < 0 or seed < 0:
            raise ValueError(f"n and seed must be non-negative, got n={n}, seed={seed}")
        rows = self.rows(split)
        if not rows:
            raise RuntimeError(f"task {self.name} has no {split} rows")
        picked: list[TaskItem] = []
        epoch = 0
        while len(picked) < n:
            order = list(range(len(rows)))
            random.Random(f"{self.name}/v{self.version}/{split}/s{seed}/e{epoch}").shuffle(order)
            picked += [self._build(split, rows[i]) for i in order[: n - len(picked)]]
            epoch += 1
        return picked

    def item(self, item_id: str) -> TaskItem:
        splits = "|".join(re.escape(s) for s in self.splits)
        match = re.fullmatch(rf"{re.escape(self.name)}/v(\d+)/({splits})/([^:/]+)(?::([0-9a-f]{{8}}))?", item_id)
        if match is None:
            raise MalformedItemIdError(
                f"item id {item_id!r} is not of the form {self.name}/v{self.version}/<split>/<row>[:<tag>] "
                f"with split one of {', '.join(self.splits)}"
            )
        version, split, key, tag = int(match[1]), match[2], match[3], match[4]
        if version != self.version:
            raise UnknownItemError(f"item {item_id} is from {self.name} v{version}; this node has v{self.version}")
        self.rows(split)
        row = self._by_key[split].get(key)
        if row is None:
            raise ItemOutOfRangeError(f"item {item_id}: {self.name} {split} has no row {key}")
        if tag is not None and content_tag(row.question) != tag:
            raise UnknownItemError(
                f"item {item_id}: this node's {self.name} {split} row {key} is another problem "
                "(the peers hold different copies of the data)"
            )
        return self._build(split, row)

    def _build(self, split: str, row: Row) -> TaskItem:
        return TaskItem(
            task_id=self.name,
            item_id=f"{self.name}/v{self.version}/{split}/{row.key}:{content_tag(row.question)}",
            split=split,
            question=row.question,
            prompt=self.prompt_of(row.question),
            answer=row.answer,
        )


def _check_sum(folder: Path, rel: str, data: bytes) -> None:
    """Refuses `data` (the file `folder/rel`) when `folder/SHA256SUMS` lists another hash for it."""
    sums = folder / "SHA256SUMS"
    if not sums.is_file():
        return
    listed = {}
    for line in sums.read_text().splitlines():
        digest, _, name = line.strip().partition(" ")
        listed[name.strip().lstrip("*")] = digest
    want = listed.get(rel)
    if want is not None and hashlib.sha256(data).hexdigest() != want:
        raise TaskSourceError(f"{folder / rel} does not match its entry in {sums}: the copy is damaged or edited")
