"""Fixtures of the models tests: a private cache dir, a tiny Qwen2, the converted SmolLM2 (slow)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ftis_swarm.models.tiny import build_tiny_qwen2


@pytest.fixture(scope="session")
def tiny_qwen(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_qwen2(tmp_path_factory.mktemp("tiny-qwen2"), seed=0)


@pytest.fixture(scope="session")
def smollm2_cache(tmp_path_factory: pytest.TempPathFactory):
    """A fresh FTIS_CACHE_DIR holding the SmolLM2 conversion, made once for the session (about 40 s)."""
    from ftis_swarm.models.smollm2 import converted_smollm2

    cache = tmp_path_factory.mktemp("ftis-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FTIS_CACHE_DIR", str(cache))
        converted = converted_smollm2()
        yield cache, converted
