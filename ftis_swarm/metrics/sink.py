"""The metrics sink interface and its JSONL implementation.

A record is a flat mapping of names to numbers or short strings. Names may carry a source
after `@` (`frac_filtered@12D3KooW...`, docs/method.md's per-source metrics); sinks that need
labels (Prometheus) split it there.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
from pathlib import Path
from typing import Iterator, Mapping, Protocol, Union

from ftis_swarm.errors import UserError

Value = Union[float, int, str, bool, None, list]


class MetricsSinkError(UserError):
    """A sink that cannot start: its package is not installed, or its port is taken (one sentence)."""


def require_package(module: str, *, wanted_by: str, extra: str) -> None:
    """Raises MetricsSinkError when `module` cannot be imported; `wanted_by` names the config key."""
    if importlib.util.find_spec(module) is None:
        raise MetricsSinkError(
            f"{wanted_by} needs the {module} package, which is not installed: pip install 'ftis-swarm[{extra}]'"
        )


class MetricsSink(Protocol):
    def log(self, record: Mapping[str, Value]) -> None:
        """Records one round's metrics."""

    def close(self) -> None:
        """Flushes and releases whatever the sink holds."""


class JsonlSink:
    """Appends one JSON object per `log` call to a file; each line is flushed and fsynced.

    Non-finite floats are written as null (JSON has no NaN). Appending keeps earlier rounds
    when a node resumes from a checkpoint; a torn last line left by a killed writer is cut
    off first, so it cannot swallow the next record.
    """

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        _drop_torn_tail(self.path)
        self._f = open(self.path, "a", encoding="utf-8")

    def log(self, record: Mapping[str, Value]) -> None:
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()}
        self._f.write(json.dumps(clean, separators=(",", ":")) + "\n")
        self._f.flush()
        os.fsync(self._f.fileno())

    def close(self) -> None:
        if not self._f.closed:
            self._f.close()


class MultiSink:
    """Sends each record to several sinks."""

    def __init__(self, *sinks: MetricsSink) -> None:
        self.sinks = list(sinks)

    def log(self, record: Mapping[str, Value]) -> None:
        for s in self.sinks:
            s.log(record)

    def close(self) -> None:
        for s in self.sinks:
            s.close()


def _drop_torn_tail(path: Path) -> None:
    if not path.exists():
        return
    with open(path, "rb+") as f:
        data = f.read()
        if data and not data.endswith(b"\n"):
            f.truncate(data.rfind(b"\n") + 1)


def read_jsonl(path: Path | str) -> Iterator[dict]:
    """The records of a JSONL metrics file; a torn last line (a killed writer) is skipped."""
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue
