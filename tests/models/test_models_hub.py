"""A hub model on a machine that cannot reach the hub: refused in one sentence, or loaded from the cache.

The hub is made unreachable for real: `HF_ENDPOINT` names a port on 127.0.0.1 that nothing
listens on (a refused connection), in a child process, as huggingface_hub reads its settings
at import.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k.upper() not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")}
    return dict(env, HF_ENDPOINT=f"http://127.0.0.1:{_closed_port()}", HF_HUB_CACHE=str(tmp_path / "hub"),
                FTIS_CACHE_DIR=str(tmp_path / "ftis"), **extra)


def _join(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ftis_swarm.cli", "join", "--model", "Qwen2.5-1.5B", "--run-dir",
                           str(tmp_path / "run"), "--rounds", "1"], capture_output=True, text=True, env=env,
                          timeout=120)


def test_join_with_an_uncached_model_and_no_hub_names_the_ways_out(tmp_path):
    proc = _join(tmp_path, _env(tmp_path))
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr  # no retry warnings before it
    assert lines[0].startswith("error: model 'Qwen2.5-1.5B' (Qwen/Qwen2.5-1.5B) is not in the hub cache")
    assert "cannot be reached" in lines[0] and "Connection refused" in lines[0]
    for way_out in ("local checkpoint folder", "hf download Qwen/Qwen2.5-1.5B", "HF_HUB_OFFLINE=1"):
        assert way_out in lines[0]
    assert not (tmp_path / "run").exists()  # refused before anything was written


def test_join_offline_with_an_uncached_model_says_so(tmp_path):
    proc = _join(tmp_path, _env(tmp_path, HF_HUB_OFFLINE="1"))
    assert proc.returncode == 2
    assert "is not in the hub cache and HF_HUB_OFFLINE is set" in proc.stderr
    assert "local checkpoint folder" in proc.stderr and "cannot be reached" not in proc.stderr


LOAD = r"""
import sys
from ftis_swarm.models import load_model
model, tok = load_model("someone/tiny-qwen")
print("loaded", model.config.hidden_size, tok("2+3").input_ids[:2])
"""


def _fill_hub_cache(cache: Path, hub_id: str, folder: Path) -> None:
    """The hub cache's layout for `hub_id` at one revision, as `hf download` leaves it."""
    repo = cache / ("models--" + hub_id.replace("/", "--"))
    revision = "0" * 40
    shutil.copytree(folder, repo / "snapshots" / revision)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(revision)


@pytest.mark.parametrize("offline", [False, True])
def test_a_cached_model_loads_from_the_cache_without_the_hub(tmp_path, tiny_qwen, offline):
    env = _env(tmp_path, **({"HF_HUB_OFFLINE": "1"} if offline else {}))
    _fill_hub_cache(Path(env["HF_HUB_CACHE"]), "someone/tiny-qwen", tiny_qwen)
    proc = subprocess.run([sys.executable, "-c", LOAD], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("loaded 64 ")  # the tiny model, from the cache
    assert "Retrying" not in proc.stderr and "requesting" not in proc.stderr  # no request was tried
