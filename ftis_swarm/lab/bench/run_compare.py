"""Two run directories of the same command, compared: weights, optimiser state, per-round logs.

What `bench resume` reports: tensors compared bit for bit (their bytes, so NaNs and -0.0
count), the largest absolute difference where they differ, and the per-round records
without the fields that read the clock (`time`, `time_*`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ftis_swarm.metrics import read_jsonl

CLOCK_KEYS = ("time",)
"""Record keys that read the clock; with every `time_*` key, left out of the comparison."""


def tensor_files(ckpt: Path) -> dict[str, Any]:
    """Every tensor of the `*.safetensors` files under `ckpt`, named `<folder>/<tensor>` (`model/...`, `adapter/...`)."""
    from safetensors.torch import load_file

    out: dict[str, Any] = {}
    for f in sorted(ckpt.rglob("*.safetensors")):
        out.update({f"{f.parent.name}/{k}": v for k, v in load_file(f).items()})
    return out


def initial_weights(model: str) -> dict[str, Any]:
    """The starting model's tensors by name (a local folder, or an embedded model's converted one)."""
    from ftis_swarm.models import resolve_model

    folder = Path(resolve_model(model))
    return {k.split("/", 1)[1]: v for k, v in tensor_files(folder).items()} if folder.is_dir() else {}


def trained_tensors(final: dict[str, Any], initial: dict[str, Any]) -> int:
    """Tensors of `final` (`tensor_files` names) whose bits differ from the same tensor of `initial`."""
    return sum(1 for key, t in final.items() if key.split("/", 1)[1] in initial
               and not torch.equal(_bits(t), _bits(initial[key.split("/", 1)[1]])))


def flat_tensors(obj: Any, prefix: str = "") -> dict[str, Any]:
    """Every tensor and number of a nested state (an optimiser's `state_dict`), by its path."""
    if isinstance(obj, torch.Tensor):
        return {prefix: obj}
    if isinstance(obj, dict):
        return {k: v for key, val in obj.items() for k, v in flat_tensors(val, f"{prefix}/{key}").items()}
    if isinstance(obj, (list, tuple)):
        return {k: v for i, val in enumerate(obj) for k, v in flat_tensors(val, f"{prefix}/{i}").items()}
    return {prefix: torch.tensor(float(obj), dtype=torch.float64)} if isinstance(obj, (int, float)) else {}


def _bits(t: Any) -> Any:
    """The tensor's bytes: equal exactly when the values are bit for bit (NaNs and -0.0 included)."""
    return t.detach().contiguous().reshape(-1).view(torch.uint8)  # (numel * itemsize,)


def compare_tensors(a: dict[str, Any], b: dict[str, Any]) -> tuple[int, int, float]:
    """(tensors, tensors not bit-identical or missing on one side, largest absolute difference)."""
    differing, worst = 0, 0.0
    for key in a.keys() | b.keys():
        x, y = a.get(key), b.get(key)
        if x is None or y is None or x.shape != y.shape or x.dtype != y.dtype:
            differing += 1
            worst = float("inf")
            continue
        if not torch.equal(_bits(x), _bits(y)):
            differing += 1
            worst = max(worst, float((x.double() - y.double()).abs().max()))
    return len(a.keys() | b.keys()), differing, worst


def log_rows(run_dir: Path, name: str) -> list[dict]:
    """The records of a run's JSONL file without their clock fields."""
    path = run_dir / name
    rows = list(read_jsonl(path)) if path.exists() else []
    return [{k: v for k, v in r.items() if k not in CLOCK_KEYS and not k.startswith("time_")} for r in rows]


def compare_logs(a: list[dict], b: list[dict]) -> tuple[int, list[str], float]:
    """(rows differing, keys differing in any row, largest relative difference of a numeric field)."""
    differing, keys, worst = abs(len(a) - len(b)), set(), 0.0
    for x, y in zip(a, b):
        bad = {k for k in x.keys() | y.keys() if x.get(k) != y.get(k)}
        differing += bool(bad)
        keys |= bad
        for k in bad:
            u, v = x.get(k), y.get(k)
            if isinstance(u, (int, float)) and isinstance(v, (int, float)):
                worst = max(worst, abs(u - v) / max(abs(u), abs(v), 1e-12))
    return differing, sorted(keys), worst
