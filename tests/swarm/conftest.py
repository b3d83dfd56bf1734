"""Real swarm processes on loopback: the bootstrap CLI, honest nodes, a hostile node.

Each process listens on an address of its own, 127.0.N.1 (`Swarm.host`): each is its own
network origin (a /24), as separate machines would be, so the quotas by origin apply to a
test's swarm as to a real one.

Every process starts in its own session (process group), so its p2pd child goes with it;
the `swarm` fixture SIGKILLs every group it started when the test ends, pass or fail.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator, Optional

import pytest
from record_peers import PUZZLE, Peer

from ftis_swarm.config import SwarmConfig, WireConfig

HERE = Path(__file__).parent
LOOPBACK = "127.0.0.1"
_spec = importlib.util.spec_from_file_location("node_proc", HERE / "node_proc.py")
node_proc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(node_proc)  # the honest node's script: its tokenizer and vocabulary are the swarm's


class Proc:
    """A child process speaking JSON lines on stdin/stdout (stderr goes to a log file)."""

    def __init__(self, argv: list[str], *, log: Path):
        self.log = log
        self._log_file = open(log, "w")
        self.popen = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log_file,
                                      text=True, start_new_session=True)
        self._lines: queue.Queue[Optional[str]] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.popen.stdout:  # type: ignore[union-attr]
            self._lines.put(line)
        self._lines.put(None)

    def read(self, timeout: float) -> object:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no answer from {self.log.stem} within {timeout} s; log: {self.tail()}") from None
        if line is None:
            raise AssertionError(f"{self.log.stem} exited ({self.popen.wait()}); log: {self.tail()}")
        return json.loads(line)

    def send(self, obj: dict) -> None:
        self.popen.stdin.write(json.dumps(obj) + "\n")  # type: ignore[union-attr]
        self.popen.stdin.flush()  # type: ignore[union-attr]

    def request(self, obj: dict, timeout: float = 60.0) -> object:
        self.send(obj)
        return self.read(timeout)

    def tail(self, limit: Optional[int] = 3000) -> str:
        """The end of its log (all of it for `limit=None`)."""
        self._log_file.flush()
        text = self.log.read_text()
        return text if limit is None else text[-limit:]

    def kill(self) -> None:
        """SIGKILL the whole process group (the node and its p2pd)."""
        if self.popen.poll() is None or _group_alive(self.popen.pid):
            try:
                os.killpg(self.popen.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass  # the group ended between the check and the kill
        self.popen.wait()
        self._log_file.close()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


class Node(Proc):
    """An honest node (tests/swarm/node_proc.py)."""

    def __init__(self, cfg: SwarmConfig, *, log: Path, prefix: tuple[str, ...] = ()):
        super().__init__([*prefix, sys.executable, str(HERE / "node_proc.py"), cfg.model_dump_json()], log=log)
        self.cfg = cfg
        self.peer_id = ""
        self.maddrs: list[str] = []

    def joined(self, timeout: float = 90.0) -> "Node":
        hello = self.read(timeout)
        self.peer_id, self.maddrs = hello["peer_id"], hello["maddrs"]
        return self

    def publish(self, items: list[str], *, tokens: int = 64, round: int = 0) -> list[dict]:
        """One group per item, the groups of `round`; each answer's "body" is the encoded group (bytes)."""
        answers = self.request({"op": "publish", "items": items, "tokens": tokens, "round": round})
        return [{**a, "body": base64.b64decode(a["body"])} for a in answers]

    def gather(self, deadline: float, *, round: Optional[int] = None) -> dict:
        """{"bodies": [encoded groups], "elapsed": seconds the gather call took in the node,
        "arrivals": {group id: unix time its body was accepted}}."""
        answer = self.request({"op": "gather", "deadline": deadline, "round": round}, timeout=deadline + 30.0)
        return {**answer, "bodies": [base64.b64decode(b) for b in answer["bodies"]]}

    def counters(self) -> dict:
        return self.request({"op": "counters"})

    def connections(self) -> dict[str, list[str]]:
        """{peer id: the remote multiaddr of each connection its p2pd holds to it} (`SwarmClient.connections`)."""
        return self.request({"op": "connections"})

    def budget(self, **fields: float) -> None:
        """Sets the client's budget (`peers.intake.Budget` fields; context is not asked)."""
        assert self.request({"op": "budget", **fields}) == {"ok": True}


class Hostile(Proc):
    """The hostile peer (ftis_swarm.lab.hostile.peer): its own peer id, its signing identities, its body servers."""

    peer_id: str
    identities: list[str]
    body_peers: dict[str, str]


class Swarm:
    """Starts processes for one test and kills them all at its end."""

    def __init__(self, tmp_path: Path):
        self.tmp_path = tmp_path
        self.procs: list[Proc] = []
        self._hosts = 0

    def host(self) -> str:
        """A loopback address no other process of this test listens on: its own origin."""
        self._hosts += 1
        return f"127.0.{self._hosts}.1"

    def bootstrap(self, *, ttl: float, max_clock_skew: float, identity: Optional[Path] = None,
                  host: str = LOOPBACK, prefix: tuple[str, ...] = ()) -> list[str]:
        """Runs the real `ftis-node bootstrap` CLI and returns its multiaddrs (from --maddrs-file);
        `prefix` runs it inside something (a network namespace)."""
        maddrs_file = self.tmp_path / f"bootstrap{len(self.procs)}.maddrs"
        if host == LOOPBACK:  # an address (a network origin) of its own
            host = self.host()
        argv = [*prefix, sys.executable, "-m", "ftis_swarm.cli", "bootstrap", "--host", host,
                "--maddrs-file", str(maddrs_file), "--ttl", str(ttl), "--max-clock-skew", str(max_clock_skew)]
        if identity is not None:
            argv += ["--identity", str(identity)]
        proc = Proc(argv, log=self.tmp_path / f"bootstrap{len(self.procs)}.log")
        self.procs.append(proc)
        deadline = time.monotonic() + 90.0
        while not maddrs_file.exists():
            assert proc.popen.poll() is None, f"bootstrap exited: {proc.tail()}"
            assert time.monotonic() < deadline, f"bootstrap did not start: {proc.tail()}"
            time.sleep(0.1)
        maddrs = maddrs_file.read_text().split()
        assert maddrs and all(m.startswith(f"/ip4/{host}/tcp/") for m in maddrs), maddrs
        self.bootstrap_proc = proc
        return maddrs

    def node(self, cfg: SwarmConfig, *, prefix: tuple[str, ...] = ()) -> Node:
        """Starts a node (call `.joined()` on it to wait for its hello), on an address of its own
        unless `cfg.transport.host` names one other than `LOOPBACK`; `prefix` as for `bootstrap`."""
        if cfg.transport.host == LOOPBACK:
            cfg = cfg.replace(transport={"host": self.host()})
        node = Node(cfg, log=self.tmp_path / f"node{len(self.procs)}.log", prefix=prefix)
        self.procs.append(node)
        return node

    def hostile(self, peers: list[str], cfg: SwarmConfig, *, identities: int) -> "Hostile":
        """Starts `python -m ftis_swarm.lab.hostile.peer` against this swarm and waits for its hello."""
        records = cfg.records
        settings = dict(peers=peers, run_id=cfg.run_id, ttl=records.ttl, max_clock_skew=records.max_clock_skew,
                        window=records.window, member_shards=records.member_shards, max_bytes=cfg.wire.max_bytes,
                        tokenizer_fp=node_proc.TOKENIZER_FP, vocab_size=node_proc.VOCAB_SIZE,
                        identities=identities, puzzle=cfg.puzzle.model_dump(), host=self.host())
        proc = Hostile([sys.executable, "-m", "ftis_swarm.lab.hostile.peer", json.dumps(settings)],
                       log=self.tmp_path / f"hostile{len(self.procs)}.log")
        self.procs.append(proc)
        hello = proc.read(120.0)
        proc.peer_id, proc.identities, proc.body_peers = hello["peer_id"], hello["identities"], hello["body_peers"]
        return proc

    def proc(self, argv: list[str], name: str) -> Proc:
        proc = Proc(argv, log=self.tmp_path / f"{name}{len(self.procs)}.log")
        self.procs.append(proc)
        return proc

    @staticmethod
    def config(*, run_id: str, peers: list[str], ttl: float = 120.0, max_clock_skew: float = 5.0,
               **overrides: object) -> SwarmConfig:
        """A loopback node config with fast polling and 256 KiB groups at most; `overrides` by a key's name
        in its section (`relay_wait=60.0` sets `transport.relay_wait`), or a top-level key."""
        fields: dict = dict(host=LOOPBACK, run_id=run_id, peers=peers, ttl=ttl, max_clock_skew=max_clock_skew,
                            window=2.0, poll_interval=0.25, publish_timeout=5.0, fetch_timeout=5.0,
                            wire=WireConfig(max_bytes=256 * 1024), puzzle=PUZZLE)
        fields.update(overrides)
        tree: dict = {}
        for key, value in fields.items():
            section, _, name = SwarmConfig.MOVED_KEYS.get(key, key).rpartition(".")
            (tree.setdefault(section, {}) if section else tree)[name] = value
        return SwarmConfig.model_validate(tree)

    def kill_all(self) -> None:
        for proc in self.procs:
            proc.kill()


@pytest.fixture(scope="module")
def alice() -> Peer:
    """An identity that signs records as an honest publisher (record_peers.Peer)."""
    return Peer()


@pytest.fixture(scope="module")
def bob() -> Peer:
    return Peer()


@pytest.fixture
def swarm(tmp_path: Path) -> Iterator[Swarm]:
    s = Swarm(tmp_path)
    try:
        yield s
    finally:
        s.kill_all()
