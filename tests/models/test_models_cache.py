"""The cache: built once, renamed into place, nothing left behind by a failed build."""

from __future__ import annotations

from pathlib import Path

import pytest

from ftis_swarm.models.cache import cache_dir, cached_checkpoint


def test_cache_dir_follows_the_environment(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("FTIS_CACHE_DIR", str(tmp_path / "c"))
    assert cache_dir() == tmp_path / "c" and (tmp_path / "c").is_dir()
    monkeypatch.delenv("FTIS_CACHE_DIR")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "ftis-swarm"


def test_built_once_then_reused(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("FTIS_CACHE_DIR", str(tmp_path))
    calls: list[Path] = []

    def build(out: Path) -> None:
        calls.append(out)
        (out / "config.json").write_text("{}")

    first = cached_checkpoint("thing-v1", build)
    second = cached_checkpoint("thing-v1", build)
    assert first == second == tmp_path / "models" / "thing-v1"
    assert len(calls) == 1 and calls[0] != first  # written elsewhere, then renamed
    assert (first / "config.json").read_text() == "{}"
    assert oct(first.stat().st_mode & 0o777) == oct(0o755)


def test_a_failed_build_leaves_nothing(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("FTIS_CACHE_DIR", str(tmp_path))

    def broken(out: Path) -> None:
        (out / "half.safetensors").write_bytes(b"partial")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        cached_checkpoint("thing-v1", broken)
    assert list((tmp_path / "models").iterdir()) == []
