"""The GSM8K and MATH-500 copies shipped in the package: whole, licensed, checked, packaged, used by default."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from ftis_swarm.config import tomllib
from ftis_swarm.tasks import get_task
from ftis_swarm.tasks.dataset import BUNDLED_DATA, TaskSourceError

ROOT = Path(__file__).resolve().parents[2]
FILES = {"gsm8k/train.jsonl": 7473, "gsm8k/test.jsonl": 1319, "math500/test.jsonl": 500}


@pytest.mark.data
def test_shipped_files_match_their_checksums_and_carry_their_licences():
    listed = dict(line.split()[::-1] for line in (BUNDLED_DATA / "SHA256SUMS").read_text().splitlines())
    assert set(listed) == set(FILES)
    for rel, digest in listed.items():
        assert hashlib.sha256((BUNDLED_DATA / rel).read_bytes()).hexdigest() == digest, rel
    for folder in ("gsm8k", "math500"):
        licence = (BUNDLED_DATA / folder / "LICENSE").read_text()
        assert licence.startswith("MIT License") and "Copyright (c)" in licence


@pytest.mark.data
def test_tasks_read_the_shipped_rows_by_default(monkeypatch):
    monkeypatch.delenv("FTIS_DATA_DIR", raising=False)
    gsm8k, math500 = get_task("gsm8k"), get_task("math500")
    assert gsm8k.data_dir == math500.data_dir == BUNDLED_DATA
    sizes = {"gsm8k/train.jsonl": gsm8k.size("train"), "gsm8k/test.jsonl": gsm8k.size("test"),
             "math500/test.jsonl": math500.size("test")}
    assert sizes == FILES
    item = gsm8k.item("gsm8k/v1/test/0")
    assert item.question.startswith("Janet") and item.answer == "18"


def test_a_damaged_copy_is_refused(tmp_path):
    for rel in FILES:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(BUNDLED_DATA / rel, tmp_path / rel)
    shutil.copyfile(BUNDLED_DATA / "SHA256SUMS", tmp_path / "SHA256SUMS")
    task = get_task("math500", data_dir=tmp_path)
    assert task.size("test") == 500  # an intact copy with its checksums loads
    with open(tmp_path / "math500/test.jsonl", "r+b") as f:
        f.seek(100)
        f.write(b"7")
    with pytest.raises(TaskSourceError, match="math500/test.jsonl does not match its entry"):
        get_task("math500", data_dir=tmp_path).size("test")


def test_the_package_data_globs_cover_every_shipped_file():
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["ftis_swarm.tasks"]
    tasks_dir = BUNDLED_DATA.parent
    shipped = {p.relative_to(tasks_dir) for p in BUNDLED_DATA.rglob("*") if p.is_file()}
    covered = {p.relative_to(tasks_dir) for g in globs for p in tasks_dir.glob(g)}
    assert shipped == covered and len(shipped) == 7  # README, SHA256SUMS, 2 licences, 3 files
