"""Sinks for the tools people already watch runs in: TensorBoard and Weights & Biases.

Both are optional packages (the `tensorboard` and `wandb` extras); a node whose config asks
for one that is not installed stops before it loads anything, with one sentence
(`check_installed`). Each record's numbers are logged at the step of its `round`; a
per-source key `name@source` becomes the tag `name/source`, so TensorBoard groups a
metric's per-peer curves together.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Mapping, Optional

from ftis_swarm.metrics.sink import Value, require_package

log = logging.getLogger(__name__)


def check_installed(*, tensorboard: bool, wandb: bool) -> None:
    """MetricsSinkError (one sentence) for each sink asked for whose package is missing."""
    if tensorboard:
        require_package("tensorboard", wanted_by="tensorboard = true", extra="tensorboard")
    if wandb:
        require_package("wandb", wanted_by="wandb_project", extra="wandb")


def _scalars(record: Mapping[str, Value]) -> dict[str, float]:
    out = {}
    for key, value in record.items():
        if isinstance(value, bool):
            value = float(value)
        if isinstance(value, (int, float)) and key != "round":
            out[key.replace("@", "/")] = float(value)
    return out


class TensorBoardSink:
    """Event files under `log_dir` (`tensorboard --logdir <run_dir>/tensorboard`)."""

    def __init__(self, log_dir: Path) -> None:
        check_installed(tensorboard=True, wandb=False)
        from torch.utils.tensorboard import SummaryWriter

        self._writer = SummaryWriter(log_dir=str(log_dir))
        self._step = 0

    def log(self, record: Mapping[str, Value]) -> None:
        round_idx = record.get("round")
        self._step = int(round_idx) if isinstance(round_idx, int) else self._step + 1
        for tag, value in _scalars(record).items():
            self._writer.add_scalar(tag, value, self._step)
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


class WandbSink:
    """One W&B run per run directory; a resumed node continues the same run (its id is kept in the directory)."""

    def __init__(self, project: str, *, run_dir: Path, config: Optional[dict[str, Any]] = None) -> None:
        check_installed(tensorboard=False, wandb=True)
        import uuid

        import wandb

        id_file = run_dir / "wandb-run-id"
        run_id = id_file.read_text().strip() if id_file.is_file() else uuid.uuid4().hex[:16]
        id_file.write_text(run_id)
        self._run = wandb.init(project=project, id=run_id, resume="allow", dir=str(run_dir), name=run_dir.name,
                               config=config or {})
        log.info("logging to W&B project %s, run %s", project, run_id)

    def log(self, record: Mapping[str, Value]) -> None:
        round_idx = record.get("round")
        self._run.log(_scalars(record), step=int(round_idx) if isinstance(round_idx, int) else None)

    def close(self) -> None:
        self._run.finish()
