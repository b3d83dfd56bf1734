"""SIGKILL a node mid-round and start it again: it resumes from its last complete checkpoint.

Real processes on loopback (127.0.N.1 each): a bootstrap peer and two nodes on tiny models, started with
the real `ftis-node join` command line (the testnet's launcher).
"""

from __future__ import annotations

import os
import re
import signal
import time

import pytest

from ftis_swarm.learner.checkpoint import CheckpointManager
from ftis_swarm.metrics import read_jsonl
from ftis_swarm.ops.testnet import TINY_FLAGS, NodeSpec, node_command, start_bootstrap, start_node, stop

pytestmark = [pytest.mark.slow, pytest.mark.net]

ROUNDS = 12
"""Node a's rounds: enough that its first life is still running when it is killed (a round of the tiny
model takes about 0.35 s on a fast host: with 5, all were done within a second of the round-2 checkpoint)."""
B_EXTRA = 10_000


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def rounds_of(run_dir):
    path = run_dir / "metrics.jsonl"
    return [r["round"] for r in read_jsonl(path)] if path.exists() else []


def ledger(run_dir):
    return {r["round"]: set(r["peer_groups"]) for r in read_jsonl(run_dir / "consumed.jsonl")}


def persisted_peer_group(run_dir) -> bool:
    """Whether a complete checkpoint of round 2 or later covers a round that consumed a peer group (the
    checkpoint's write can outlast a fixed sleep on a loaded machine, and a manager's constructor would clear
    the node's temporary directory: look at the marker files only)."""
    try:
        rounds = ledger(run_dir)
    except (OSError, ValueError):  # not written yet, or a line being written
        return False
    done = [int(m.parent.name.split("-")[1]) for m in (run_dir / "checkpoints").glob("ckpt-*/COMPLETE")]
    first = min((r for r, ids in rounds.items() if ids), default=None)
    return first is not None and any(k >= max(2, first) for k in done)


def test_killed_node_resumes_and_no_group_enters_two_persisted_updates(tmp_path, tiny_model_dir):
    boot, maddrs = start_bootstrap(tmp_path)
    specs = [NodeSpec("a", str(tiny_model_dir)), NodeSpec("b", str(tiny_model_dir), ("--lora-rank", "4"))]
    dirs = [tmp_path / "node-a", tmp_path / "node-b"]
    # b runs longer than a, so it is still publishing while a restarts; it is stopped with SIGTERM. (Alone, b's
    # gathers end at once: its rounds take a second or less, hence so many.)
    # a's rounds wait up to 10 s: b is a stranger to it (no standing yet), and a gather ends at its deadline
    # without a stranger's group that has not arrived (b's first publish may come late on a loaded machine)
    cmds = [node_command(s, index=i, run_dir=d, peers=maddrs, run_id="resume-test", rounds=ROUNDS + B_EXTRA * i,
                         flags=TINY_FLAGS + ("--round-deadline", "10" if i == 0 else "3"))
            for i, (s, d) in enumerate(zip(specs, dirs))]
    procs = []
    try:
        # b first, and a only once b has published a round: a gather without any known peer ends at once, so
        # a started beside b could finish its rounds before b's first groups arrive (a round of the tiny model
        # takes about 0.35 s on a fast host)
        procs = [start_node(cmds[1], dirs[1], specs[1])]
        wait_for(lambda: len(rounds_of(dirs[1])) >= 1, 600, "node b's first round")
        procs.insert(0, start_node(cmds[0], dirs[0], specs[0]))
        # then a complete checkpoint of round 2 or later that persisted a consumed peer group
        wait_for(lambda: persisted_peer_group(dirs[0]), 600, "node a's checkpoint of a round with a peer group")
        # at once: into the next round (generating, publishing or gathering) or a little later
        os.killpg(procs[0].proc.pid, signal.SIGKILL)
        procs[0].proc.wait()
        first_life = ledger(dirs[0])
        resumed_from = CheckpointManager(dirs[0] / "checkpoints").latest()
        k = int(resumed_from.name.split("-")[1])
        assert 2 <= k < ROUNDS, f"a was killed after round {k} of {ROUNDS}: no round left to redo"

        # The first life kept one checkpoint (the default); the second keeps two, for the fallback below.
        procs[0] = start_node(cmds[0] + ["--set", "keep_checkpoints=2"], dirs[0], specs[0])
        assert procs[0].proc.wait(timeout=900) == 0
        # redone rounds replace the lost ones; round 0's held-out evaluation was not redone (it came before round 1)
        assert rounds_of(dirs[0]) == list(range(0, ROUNDS + 1))
        evaluated = [r["round"] for r in read_jsonl(dirs[0] / "metrics.jsonl") if "heldout_acc" in r]
        assert evaluated == [0, 10, ROUNDS]  # eval_every 10, and the last round
        assert f"resumed from {resumed_from.name}" in (dirs[0] / "node.log").read_text()
        lives = re.findall(r"^peer id (\S+)$", (dirs[0] / "stdout.log").read_text(), flags=re.M)
        assert len(lives) == 2 and lives[0] == lives[1]  # no --identity: the run directory's key, kept
        second_life = ledger(dirs[0])
        persisted = set().union(*(ids for r, ids in first_life.items() if r <= k))
        redone = set().union(*(ids for r, ids in second_life.items() if r > k))
        assert persisted and redone, "no peer group consumed on one side of the kill: the check would be empty"
        assert not persisted & redone
        for r in range(1, ROUNDS + 1):  # within the final history, every group id appears once
            for q in range(r + 1, ROUNDS + 1):
                assert not second_life[r] & second_life[q]
        assert CheckpointManager(dirs[0] / "checkpoints").latest().name == f"ckpt-{ROUNDS:08d}"

        # A latest checkpoint damaged after it was complete (a disk fault, not a kill): with two kept, the
        # node falls back to the one before.
        latest = CheckpointManager(dirs[0] / "checkpoints").latest()
        weights = next((latest / "model").glob("*.safetensors"))
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
        longer = [*cmds[0]]
        longer[longer.index("--rounds") + 1] = str(ROUNDS + 1)
        procs[0] = start_node(longer, dirs[0], specs[0])
        assert procs[0].proc.wait(timeout=900) == 0
        assert f"resumed from ckpt-{ROUNDS - 1:08d}" in (dirs[0] / "node.log").read_text()
        assert rounds_of(dirs[0]) == list(range(0, ROUNDS + 2))

        # SIGTERM: b ends its round, checkpoints it and leaves with status 0.
        procs[1].proc.send_signal(signal.SIGTERM)
        assert procs[1].proc.wait(timeout=300) == 0
        b_last = rounds_of(dirs[1])[-1]
        assert CheckpointManager(dirs[1] / "checkpoints").latest().name == f"ckpt-{b_last:08d}"
        assert b_last < ROUNDS + B_EXTRA
    finally:
        for p in procs:
            stop(p.proc)
        stop(boot)
