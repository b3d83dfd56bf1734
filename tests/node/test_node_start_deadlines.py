"""A node's start never waits without a word: a silent hub or bootstrap peer ends it in one sentence, in time.

"Silent" for real: a TCP server on 127.0.0.1 that accepts every connection and never sends
a byte (what a hung proxy or a half-dead mirror does). The real CLI runs in a child process
(huggingface_hub reads `HF_ENDPOINT` at import), with INFO lines on stderr, so the test
reads when the wait began from the progress line's timestamp and when it ended from the
process's exit.
"""

from __future__ import annotations

import datetime
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

from ftis_swarm.models.tiny import build_tiny_qwen2

SOME_PEER = "QmaCpDMGvV2BGHeYERUEnRQAwe3N8SzbUtfsmvsqQLuvuJ"
"""A well-formed peer id that no test peer has."""
MARGIN = 30.0
"""Seconds a wait may end after its deadline: imports and shutdown on a loaded 2-core machine (measured: 4 s)."""


class SilentServer:
    """Accepts TCP connections on 127.0.0.1 and holds them open without a byte, until closed."""

    def __init__(self) -> None:
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._sock.getsockname()[1]
        self.accepted = 0
        self._held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self.accepted += 1
            self._held.append(conn)

    def close(self) -> None:
        self._sock.close()
        for conn in self._held:
            conn.close()


@pytest.fixture
def silent() -> Iterator[SilentServer]:
    server = SilentServer()
    yield server
    server.close()


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k.upper() not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")}
    return dict(env, HF_HUB_CACHE=str(tmp_path / "hub"), FTIS_CACHE_DIR=str(tmp_path / "ftis"), **extra)


def _join(tmp_path: Path, env: dict[str, str], *args: str) -> tuple[subprocess.CompletedProcess, float]:
    """Runs `ftis-node --log-level info join ...`; returns it and the wall-clock time it ended at."""
    cmd = [sys.executable, "-m", "ftis_swarm.cli", "--log-level", "info", "join", "--run-dir", str(tmp_path / "run"),
           "--host", "127.0.0.1", "--no-table", "--rounds", "1", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    return proc, time.time()


def _one_error(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1, proc.stderr[-3000:]
    return errors[0]


def _waited(proc: subprocess.CompletedProcess, progress: str, ended: float) -> float:
    """Seconds from the INFO line containing `progress` (its timestamp) to the end of the process."""
    line = next((ln for ln in proc.stderr.splitlines() if progress in ln and " INFO " in ln), None)
    assert line is not None, f"no progress line {progress!r}: {proc.stderr[-3000:]}"
    began = datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
    return ended - began


@pytest.mark.slow
def test_join_with_a_silent_hub_ends_in_one_sentence_after_its_deadline(tmp_path, silent):
    env = _env(tmp_path, HF_ENDPOINT=f"http://127.0.0.1:{silent.port}")
    proc, ended = _join(tmp_path, env, "--model", "someone/not-cached", "--set", "hub_timeout=3")
    error = _one_error(proc)
    assert error.startswith("error: model 'someone/not-cached' did not load: "
                            f"the hub at http://127.0.0.1:{silent.port} sent nothing for 3 s (hub_timeout) "
                            "and someone/not-cached is not in the hub cache")
    assert "local checkpoint folder" in error and "HF_HUB_OFFLINE=1" in error
    waited = _waited(proc, "loading someone/not-cached from the hub at", ended)
    print(f"silent hub, hub_timeout=3: {waited:.1f} s from the progress line to the exit")
    assert 3.0 <= waited <= 3.0 + MARGIN
    assert silent.accepted >= 1  # the hub was asked, and said nothing
    assert "Retrying" not in proc.stderr  # no back-off after the deadline


LOAD = r"""
import sys, time
from ftis_swarm.models import load_model
started = time.monotonic()
model, tok = load_model("someone/tiny-qwen", hub_timeout=2)
print("loaded", model.config.hidden_size, f"{time.monotonic() - started:.1f}")
"""


@pytest.mark.slow
def test_a_cached_model_loads_from_the_cache_when_the_hub_goes_silent(tmp_path, silent):
    env = _env(tmp_path, HF_ENDPOINT=f"http://127.0.0.1:{silent.port}")
    folder = build_tiny_qwen2(tmp_path / "tiny", hidden_size=32, num_layers=1, seed=3)
    repo = Path(env["HF_HUB_CACHE"]) / "models--someone--tiny-qwen"
    revision = "0" * 40
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(revision)
    (repo / "snapshots").mkdir()
    os.symlink(folder, repo / "snapshots" / revision)
    proc = subprocess.run([sys.executable, "-c", LOAD], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("loaded 32 ")
    assert f"the hub at http://127.0.0.1:{silent.port} sent nothing for 2 s (hub_timeout); loading " \
           "someone/tiny-qwen from the hub cache" in proc.stderr
    assert silent.accepted >= 1


def test_the_hub_deadline_ends_a_body_that_stops_and_every_later_request_at_once():
    """A hub that answers, then stops sending the body: the read waits the deadline, then the hub is silent."""
    from huggingface_hub import get_session

    from ftis_swarm.models.hub import hub_deadline

    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def answer_then_stall() -> None:
        conn, _ = server.accept()
        held.append(conn)
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\nfirst bytes")

    threading.Thread(target=answer_then_stall, daemon=True).start()
    url = f"http://127.0.0.1:{server.getsockname()[1]}/file"
    try:
        with hub_deadline(1.0) as watch:
            started = time.monotonic()
            with pytest.raises(Exception, match=r"the hub sent nothing for 1 s \(GET .*/file\)"):
                get_session().get(url)
            waited = time.monotonic() - started
            assert 1.0 <= waited < 1.0 + MARGIN
            assert watch.silent == f"GET {url}"
            started = time.monotonic()
            with pytest.raises(Exception, match="the hub went silent earlier"):
                get_session().get(url)  # not tried again: nothing on the wire, no back-off
            assert time.monotonic() - started < 0.5
    finally:
        server.close()
        for conn in held:
            conn.close()
    assert get_session().timeout.read is None  # huggingface_hub's own client is back


def test_a_shorter_timeout_of_the_request_itself_does_not_mark_the_hub_silent(silent):
    """huggingface_hub's best-effort telemetry asks with 3 s of its own: its timeout is not the hub's silence."""
    from huggingface_hub import get_session

    from ftis_swarm.models.hub import hub_deadline

    url = f"http://127.0.0.1:{silent.port}/api/agent-harnesses"
    with hub_deadline(30.0) as watch:
        started = time.monotonic()
        with pytest.raises(Exception) as raised:
            get_session().get(url, timeout=0.5)
        assert type(raised.value).__name__ == "ReadTimeout" and time.monotonic() - started < 0.5 + MARGIN
        assert watch.silent is None


@pytest.mark.slow
@pytest.mark.net
@pytest.mark.parametrize("join_timeout, expected", [
    (3, "error: the libp2p daemon did not start within swarm.transport.join_timeout=3 s while dialing the --peers "),
    (30, "error: none of the --peers could be reached "),  # p2pd gives up on the peer by itself first
])
def test_join_through_a_silent_bootstrap_peer_ends_in_one_sentence_within_its_deadline(
        tmp_path, silent, tiny_model_dir, join_timeout, expected):
    peer = f"/ip4/127.0.0.1/tcp/{silent.port}/p2p/{SOME_PEER}"
    proc, ended = _join(tmp_path, _env(tmp_path), "--model", str(tiny_model_dir), "--peers", peer,
                        "--set", f"swarm.transport.join_timeout={join_timeout}")
    error = _one_error(proc)
    assert error.startswith(expected) and peer in error
    waited = _waited(proc, "dialing 1 bootstrap peer(s) and joining the DHT", ended)
    print(f"silent bootstrap peer, join_timeout={join_timeout}: {waited:.1f} s from the progress line to the exit")
    assert waited <= join_timeout + MARGIN
    assert silent.accepted >= 1
