"""Where derived checkpoints live, and how they get there without a half-written one.

Conversions (the embedded GGUF to a transformers checkpoint, the smaller sibling) run once
per machine and are reused. A checkpoint is written into a temporary folder next to its
final place and renamed into place in one step, so a crash or a second process racing the
first never leaves a partial checkpoint where a later run would load it.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

log = logging.getLogger(__name__)


def cache_dir() -> Path:
    """`$FTIS_CACHE_DIR`, else `~/.cache/ftis-swarm`; created on first use."""
    raw = os.environ.get("FTIS_CACHE_DIR")
    path = Path(raw).expanduser() if raw else Path.home() / ".cache" / "ftis-swarm"
    path.mkdir(parents=True, exist_ok=True)
    return path


def cached_checkpoint(name: str, build: Callable[[Path], None]) -> Path:
    """The folder `<cache>/models/<name>`, made by `build(tmp_dir)` the first time it is asked for."""
    final = cache_dir() / "models" / name
    if final.is_dir():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=final.parent))
    try:
        log.info("building %s once into %s", name, final)
        build(tmp)
        tmp.chmod(0o755)
        try:
            os.rename(tmp, final)
        except OSError:
            if not final.is_dir():
                raise
            log.info("another process built %s first; using its copy", name)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final
