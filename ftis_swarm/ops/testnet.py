"""A local testnet: a bootstrap peer and N heterogeneous nodes, each its own process, on loopback.

The nodes are started with the real `ftis-node join` command line, so the testnet runs
exactly what an operator runs. Each process listens on a loopback address of its own
(`loopback_host`: the bootstrap peer on 127.0.1.1, node i on 127.0.(i + 2).1), so each is
its own network origin (a /24) and the quotas by origin (docs/swarm.md) treat them as the
separate machines they stand for. Presets:

- `default`: the embedded SmolLM2-135M-Instruct fully fine-tuned, the same with a LoRA
  adapter, and a sibling (by default `smollm2-mini`, the smaller SmolLM2; `sibling=` picks
  another), then again round-robin, on `arith`.
- `tiny`: tiny random Qwen2 models built from a config with the real Qwen tokenizer, for
  seconds-long smoke runs of the machinery (their rewards are 0: nothing to learn).

`qwen_peer` adds one node on another tokenizer to either preset: a tiny model on the Qwen
vocabulary taught arith's answer form (`ops/taught.py`), and every node fetches the groups
of other tokenizers (`swarm.fetch.other_tokenizers`), so the SmolLM2 nodes learn from its groups
through character-aligned chunks and it from theirs (docs/method.md, "Peers with another
tokenizer").

Every node serves its status page on a free port of 127.0.0.1 (`--status-port 0`; the address
in `<run_dir>/status.url`). The parent only launches and watches: it reads each node's
metrics.jsonl to show progress,
and samples the disk the nodes' run directories take (`DiskWatch`: at the end and at its peak).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from ftis_swarm.learner.checkpoint import tree_bytes
from ftis_swarm.metrics import read_jsonl

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NodeSpec:
    name: str
    model: str
    flags: tuple[str, ...] = ()


@dataclass(frozen=True)
class Preset:
    specs: tuple[NodeSpec, ...]
    flags: tuple[str, ...]
    rounds: int
    also: tuple[NodeSpec, ...] = ()
    """Nodes started besides the `nodes` drawn from `specs` (the Qwen-vocabulary peer): each runs until the
    others have ended (`ALSO_ROUNDS`), then is stopped as an operator stops a node (SIGTERM)."""


ALSO_ROUNDS = 1_000_000
"""Rounds a `Preset.also` node is given: a tiny model's round takes a second where SmolLM2's take tens, so it runs
until the preset's nodes end instead of a number of rounds of its own."""


DEFAULT_FLAGS = ("--task", "arith", "--prompts-per-round", "2", "--group-size", "8", "--max-new-tokens", "16",
                 "--temperature", "0.7", "--round-deadline", "4", "--checkpoint-every", "2", "--threads", "1")
TINY_FLAGS = ("--task", "arith", "--prompts-per-round", "2", "--group-size", "4", "--max-new-tokens", "6",
              "--round-deadline", "2", "--checkpoint-every", "1", "--threads", "1")

STATUS_FLAGS = ("--status-port", "0")
"""Every testnet node serves its status page, on a free port of 127.0.0.1."""


OTHER_TOKENIZERS = ("--set", "swarm.fetch.other_tokenizers=true")
"""Every node's flags with a peer on another tokenizer: fetch its groups (off by default)."""


def preset(name: str, workdir: Path, *, sibling: Optional[str] = None, qwen_peer: bool = False) -> Preset:
    """The node line-up of a preset; `tiny` builds its models under `workdir/models`.

    `sibling`: the model of the default preset's third node (default `smollm2-slim`); `qwen_peer`: one more node,
    on the Qwen vocabulary (module docstring), and every node fetches other tokenizers' groups.
    """
    pre = _preset(name, workdir, sibling=sibling)
    if not qwen_peer:
        return pre
    from ftis_swarm.ops.taught import build_tiny_arith_model

    qwen = build_tiny_arith_model(workdir / "models" / "qwen-arith")
    return Preset(pre.specs, pre.flags + OTHER_TOKENIZERS, pre.rounds,
                  also=(NodeSpec("qwen-tiny", str(qwen), ("--lr", "1e-3")),))


def _preset(name: str, workdir: Path, *, sibling: Optional[str]) -> Preset:
    if name == "default":
        third = sibling or "smollm2-slim"
        specs = (
            NodeSpec("smollm2-full", "smollm2-135m", ("--lr", "2e-5")),
            NodeSpec("smollm2-lora", "smollm2-135m", ("--lora-rank", "16", "--lr", "2e-4")),
            NodeSpec(third if third in ("smollm2-slim", "smollm2-mini") else "sibling", third, ("--lr", "2e-5")),
        )
        return Preset(specs, DEFAULT_FLAGS, rounds=5)
    if name == "tiny":
        from ftis_swarm.models.tiny import build_tiny_qwen2

        small = build_tiny_qwen2(workdir / "models" / "tiny-a", hidden_size=32, num_layers=1, seed=1)
        large = build_tiny_qwen2(workdir / "models" / "tiny-b", hidden_size=64, num_layers=2, seed=2)
        specs = (
            NodeSpec("tiny-full", str(small), ("--lr", "1e-3")),
            NodeSpec("tiny-lora", str(large), ("--lora-rank", "4", "--lr", "1e-3")),
            NodeSpec("tiny-large", str(large), ("--lr", "1e-3")),
        )
        return Preset(specs, TINY_FLAGS, rounds=2)
    raise ValueError(f"unknown preset {name!r}; expected 'default' or 'tiny'")


@dataclass
class NodeProc:
    spec: NodeSpec
    run_dir: Path
    proc: subprocess.Popen
    rounds_seen: int = 0
    last: dict = field(default_factory=dict)
    new_rows: list[dict] = field(default_factory=list)
    """The rows the last `poll_metrics` found."""

    @property
    def status_url(self) -> Optional[str]:
        """The node's status page, once it serves one (node/status_page.py)."""
        path = self.run_dir / "status.url"
        return path.read_text().strip() or None if path.exists() else None

    def poll_metrics(self) -> list[dict]:
        path = self.run_dir / "metrics.jsonl"
        rows = list(read_jsonl(path)) if path.exists() else []
        self.new_rows = rows[self.rounds_seen :]
        self.rounds_seen = max(self.rounds_seen, len(rows))
        if rows:
            self.last = rows[-1]
        return self.new_rows


def _cli() -> list[str]:
    return [sys.executable, "-m", "ftis_swarm.cli"]


def loopback_host(index: int) -> str:
    """The loopback address of node `index` (the bootstrap peer is -1): 127.0.(index + 2).1."""
    if not -1 <= index <= 252:
        raise ValueError(f"node index {index} is outside -1 .. 252")
    return f"127.0.{index + 2}.1"


def start_bootstrap(workdir: Path, *, timeout: float = 60.0,
                    env: Optional[dict[str, str]] = None) -> tuple[subprocess.Popen, list[str]]:
    """Starts `ftis-node bootstrap` on its own loopback address (in `env`, default this one) and waits
    for its multiaddrs."""
    maddrs_file = workdir / "bootstrap.maddrs"
    maddrs_file.unlink(missing_ok=True)
    logf = open(workdir / "bootstrap.log", "w")
    proc = subprocess.Popen(_cli() + ["bootstrap", "--host", loopback_host(-1), "--maddrs-file", str(maddrs_file)],
                            stdout=logf, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if maddrs_file.exists() and maddrs_file.read_text().strip():
            return proc, maddrs_file.read_text().split()
        if proc.poll() is not None:
            raise RuntimeError(f"the bootstrap peer exited with status {proc.returncode}; see {workdir / 'bootstrap.log'}")
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"the bootstrap peer did not print its address within {timeout:.0f} s")


def node_command(spec: NodeSpec, *, index: int, run_dir: Path, peers: list[str], run_id: str, rounds: int,
                 flags: tuple[str, ...], extra: tuple[str, ...] = (), global_flags: tuple[str, ...] = ()) -> list[str]:
    """The `ftis-node [global flags] join ...` line of one node: preset flags, then the node's, then `extra`."""
    cmd = _cli() + list(global_flags) + ["join", "--model", spec.model, "--run-dir", str(run_dir), "--rounds", str(rounds),
                    "--run-id", run_id, "--seed", str(index), "--host", loopback_host(index),
                    "--no-table"]
    for maddr in peers:
        cmd += ["--peers", maddr]
    return cmd + list(flags) + list(spec.flags) + list(extra)


def start_node(cmd: list[str], run_dir: Path, spec: NodeSpec, *, cpus: Optional[set[int]] = None) -> NodeProc:
    """Starts one node process; `cpus` pins it (and its children) to those cores."""
    run_dir.mkdir(parents=True, exist_ok=True)
    out = open(run_dir / "stdout.log", "a")
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                            preexec_fn=pin)
    return NodeProc(spec, run_dir, proc)


def stop(proc: subprocess.Popen, *, timeout: float = 30.0) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class DiskWatch:
    """Samples the bytes under some directories every `every` seconds in a thread; `peak` and `last`.

    A sample is a walk of the trees (a few dozen files a node), so a write shorter than `every`
    between two samples can be missed: the peak is a lower bound, the checkpoint arithmetic
    (docs/node.md) the upper one.
    """

    def __init__(self, dirs: Callable[[], list[Path]], *, every: float = 0.2) -> None:
        self._dirs, self._every = dirs, every
        self.peak = self.last = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="disk-watch", daemon=True)

    def sample(self) -> int:
        self.last = sum(tree_bytes(d) for d in self._dirs())
        self.peak = max(self.peak, self.last)
        return self.last

    def _run(self) -> None:
        while not self._done.wait(self._every):
            self.sample()

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        """Stops sampling, after a last sample."""
        self._done.set()
        self._thread.join()
        self.sample()


@dataclass
class TestnetResult:
    run_dirs: list[Path]
    exit_codes: list[int]
    wall_seconds: float
    disk_end_bytes: int = 0
    """Bytes the nodes' run directories hold at the end (checkpoints, logs, metrics)."""
    disk_peak_bytes: int = 0
    """The most they held at a sample during the run (`DiskWatch`)."""


def run_testnet(*, workdir: Path, nodes: int, rounds: Optional[int], pre: Preset, extra: tuple[str, ...] = (),
                on_progress: Optional[Callable[[list[NodeProc]], None]] = None, poll: float = 1.0,
                global_flags: tuple[str, ...] = (), seed: int = 0) -> TestnetResult:
    """Runs the testnet to the end; the nodes' run directories are `workdir/node-<i>-<name>`.

    Node i runs with seed `1000 * seed + i`, so testnets of different seeds share no node
    seed. `global_flags` go before `join` on every node's command line (`--log-level debug`).
    """
    t0 = time.perf_counter()
    workdir.mkdir(parents=True, exist_ok=True)
    run_id = f"testnet-{int(time.time())}"
    boot, maddrs = start_bootstrap(workdir)
    procs: list[NodeProc] = []
    disk = DiskWatch(lambda: [p.run_dir for p in procs])
    try:
        disk.start()
        for i, spec in enumerate([pre.specs[i % len(pre.specs)] for i in range(nodes)] + list(pre.also)):
            run_dir = workdir / f"node-{i}-{spec.name}"
            cmd = node_command(spec, index=1000 * seed + i, run_dir=run_dir, peers=maddrs, run_id=run_id,
                               rounds=(rounds or pre.rounds) if i < nodes else ALSO_ROUNDS,
                               flags=pre.flags + STATUS_FLAGS, extra=extra, global_flags=global_flags)
            procs.append(start_node(cmd, run_dir, spec))
        while any(p.proc.poll() is None for p in procs[:nodes]):
            time.sleep(poll)
            for p in procs:
                p.poll_metrics()
            if on_progress:
                on_progress(procs)
        for p in procs[nodes:]:  # the preset's nodes are done: the others end their round and leave
            stop(p.proc, timeout=120.0)
        for p in procs:
            p.poll_metrics()
        if on_progress:
            on_progress(procs)
    finally:
        for p in procs:
            stop(p.proc)
        stop(boot)
        disk.close()
    return TestnetResult([p.run_dir for p in procs], [p.proc.returncode for p in procs],
                         time.perf_counter() - t0, disk_end_bytes=disk.last, disk_peak_bytes=disk.peak)
