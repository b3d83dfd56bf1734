"""Atomic checkpoints: a node killed at any moment restarts from its last complete one.

Layout of `<root>/ckpt-<round:08d>/`:

- `model/` (full fine-tune: `save_pretrained`, loads with transformers unchanged) or
  `adapter/` (LoRA: loads with peft unchanged; its `adapter_config.json` names the base
  model as the node was given it, a folder made absolute, so that `ftis-node eval` loads it
  from any working directory), with the tokenizer beside it when given
- `optimizer.pt`, `rng.pt`: the optimiser's state and torch's RNG states, CPU and every CUDA
  device (tensors only)
- `state.json`: round, policy version, consumed group ids and whatever the node adds
- `COMPLETE`: sha256 of every other file; written last

A save writes everything into a temporary directory, fsyncs each file and the directory,
renames it into place, then writes `COMPLETE` (itself through a temporary file and a
rename). A checkpoint without a valid `COMPLETE`, or whose files do not match it, is
ignored: the one before it is used. Temporary directories left by a killed save are
removed on the next start.

Disk: `keep` complete checkpoints stay (1 by default). Old ones are deleted only after the
new one is complete, so a save in progress never leaves fewer than `keep`, and the disk
holds `keep + 1` checkpoints at its peak, during a save. Checkpoint directories that are not
among the kept complete ones (a save killed after its rename, a corrupted one) are deleted
with them.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

import torch

from ftis_swarm.learner.state import CheckpointError

log = logging.getLogger(__name__)

MARKER = "COMPLETE"
_PREFIX = "ckpt-"
_TMP = ".tmp-"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(root: Path) -> None:
    for dirpath, _, files in os.walk(root):
        for name in files:
            with open(Path(dirpath) / name, "rb") as f:
                os.fsync(f.fileno())
        _fsync_dir(Path(dirpath))


def tree_bytes(root: Path) -> int:
    """Bytes of the files under `root` (0 when it does not exist); files vanishing meanwhile count 0."""
    total = 0
    for dirpath, _, files in os.walk(root):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                pass
    return total


class CheckpointManager:
    def __init__(self, root: Path, *, keep: int = 1) -> None:
        if keep < 1:
            raise ValueError(f"keep={keep}: a node keeps at least one complete checkpoint")
        self.root = Path(root)
        self.keep = keep
        self.root.mkdir(parents=True, exist_ok=True)
        for tmp in self.root.glob(_TMP + "*"):
            shutil.rmtree(tmp, ignore_errors=True)

    def save(self, *, round_idx: int, learner: Any, state: dict, tokenizer: Any = None,
             base_model: str | None = None) -> Path:
        """Writes checkpoint `round_idx` atomically and prunes old ones; returns its path.

        `base_model`: for an adapter, the base model's name as it loads anywhere (a short name,
        a hub id or an absolute folder), recorded in `adapter_config.json` in place of the
        path the model was loaded from.
        """
        final = self.root / f"{_PREFIX}{round_idx:08d}"
        tmp = self.root / f"{_TMP}{final.name}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        weights = tmp / ("adapter" if learner.is_lora else "model")
        learner.save_weights(weights)
        if learner.is_lora and base_model is not None:
            adapter_cfg = weights / "adapter_config.json"
            adapter_cfg.write_text(json.dumps({**json.loads(adapter_cfg.read_text()),
                                               "base_model_name_or_path": base_model}, indent=2))
        if tokenizer is not None:
            tokenizer.save_pretrained(weights)
        torch.save(learner.optimizer_state(), tmp / "optimizer.pt")
        rng = {"torch": torch.get_rng_state()}
        if torch.cuda.is_available():
            rng["cuda"] = torch.cuda.get_rng_state_all()  # a list of per-device states
        torch.save(rng, tmp / "rng.pt")
        full_state = dict(state, round=round_idx, policy_version=learner.policy_version)
        (tmp / "state.json").write_text(json.dumps(full_state))
        _fsync_tree(tmp)
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        _fsync_dir(self.root)
        self._mark_complete(final)
        self._prune()
        return final

    def _mark_complete(self, ckpt: Path) -> None:
        files = {str(p.relative_to(ckpt)): _sha256(p) for p in sorted(ckpt.rglob("*")) if p.is_file()}
        tmp = ckpt / (MARKER + ".tmp")
        with open(tmp, "w") as f:
            json.dump({"files": files}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, ckpt / MARKER)
        _fsync_dir(ckpt)

    def is_complete(self, ckpt: Path) -> bool:
        """True when `COMPLETE` parses and every file it lists has its recorded hash."""
        try:
            files = json.loads((ckpt / MARKER).read_text())["files"]
            return bool(files) and all(_sha256(ckpt / rel) == digest for rel, digest in files.items())
        except (OSError, ValueError, KeyError, TypeError):
            return False

    def complete(self) -> list[Path]:
        """Complete checkpoints, newest first."""
        dirs = sorted((p for p in self.root.glob(_PREFIX + "*") if p.is_dir()), reverse=True)
        out = []
        for d in dirs:
            if self.is_complete(d):
                out.append(d)
            else:
                log.warning("ignoring incomplete or corrupted checkpoint %s", d)
        return out

    def latest(self) -> Path | None:
        found = self.complete()
        return found[0] if found else None

    def round_of(self, ckpt: Path | None) -> int:
        """The round checkpoint `ckpt` closed; 0 for None (no checkpoint: no round survived)."""
        return 0 if ckpt is None else int(self.state_of(ckpt)["round"])

    def state_of(self, ckpt: Path) -> dict:
        """The node state saved with `ckpt` (`state.json`: round, policy version and the caller's fields)."""
        return json.loads((ckpt / "state.json").read_text())

    def _prune(self) -> None:
        kept = set(self.complete()[: self.keep])
        for old in self.root.glob(_PREFIX + "*"):
            if old.is_dir() and old not in kept:
                shutil.rmtree(old, ignore_errors=True)

    def disk_bytes(self) -> int:
        """Bytes under the checkpoint root (complete checkpoints and any save in progress)."""
        return tree_bytes(self.root)

    def load(self, ckpt: Path, learner: Any) -> dict:
        """Restores weights, optimiser and RNG into `learner`; returns the saved state."""
        weights = ckpt / ("adapter" if learner.is_lora else "model")
        if not weights.is_dir():
            kind = "an adapter" if learner.is_lora else "a full model"
            raise CheckpointError(f"{ckpt} does not hold {kind}: was the node's --lora-rank changed?")
        learner.load_checkpoint(weights, ckpt / "optimizer.pt")
        rng = torch.load(ckpt / "rng.pt", weights_only=True)
        torch.set_rng_state(rng["torch"])
        if "cuda" in rng and torch.cuda.is_available() and len(rng["cuda"]) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(rng["cuda"])
        state = self.state_of(ckpt)
        learner.policy_version = int(state["policy_version"])
        return state
