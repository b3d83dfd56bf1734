"""Shared fixtures. Area fixtures live in tests/<area>/conftest.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """FTIS_DATA_DIR, holding gsm8k/ and math500/ in their original formats.

    Tests that use it carry the `data` marker and fail, never skip, when the files are missing.
    """
    raw = os.environ.get("FTIS_DATA_DIR")
    if not raw:
        pytest.fail("FTIS_DATA_DIR is not set: point it at a folder with gsm8k/ and math500/ (see README)")
    path = Path(raw)
    for rel in ("gsm8k/train.jsonl", "gsm8k/test.jsonl", "math500/test.jsonl"):
        if not (path / rel).is_file():
            pytest.fail(f"FTIS_DATA_DIR={path} lacks {rel}")
    return path
