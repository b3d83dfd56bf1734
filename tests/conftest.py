"""Shared fixtures. Area fixtures live in tests/<area>/conftest.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from record_peers import PUZZLE

from ftis_swarm.tasks.dataset import BUNDLED_DATA, HUB

# Every node, bootstrap peer and bench these tests start solves and checks the tests' trivial
# identity puzzle (environment variables reach the subprocesses); the default's cost is
# measured by `ftis-node bench hostile --phase identities`, never in a test.
for _key, _value in PUZZLE.model_dump().items():
    os.environ.setdefault(f"FTIS_SWARM__PUZZLE__{_key.upper()}", str(_value))


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The GSM8K and MATH-500 files in their original formats: the package's own copies, or
    the folder FTIS_DATA_DIR names. Tests that use it carry the `data` marker and fail, never
    skip, when a file is missing.
    """
    raw = os.environ.get("FTIS_DATA_DIR")
    path = Path(raw) if raw and raw != HUB else BUNDLED_DATA
    for rel in ("gsm8k/train.jsonl", "gsm8k/test.jsonl", "math500/test.jsonl"):
        if not (path / rel).is_file():
            pytest.fail(f"{path} lacks {rel}")
    return path
