"""Churn: 5 tiny nodes, 2 SIGKILLed mid-run; the others keep completing rounds; the killed ones restart
with their identity, resume from their checkpoints, and are gathered from again within a few rounds.

Real processes on loopback (127.0.N.1 each): a bootstrap peer and five `ftis-node join` command lines (the
testnet's launcher), each with an identity file.
"""

from __future__ import annotations

import os
import re
import signal
import time

import pytest

from ftis_swarm.metrics import read_jsonl
from ftis_swarm.ops.testnet import TINY_FLAGS, NodeSpec, node_command, start_bootstrap, start_node, stop
from ftis_swarm.peers.ledger import short_peer

pytestmark = [pytest.mark.slow, pytest.mark.net]

NODES, VICTIMS = 5, (3, 4)
ROUNDS_DOWN = 2
"""Rounds each survivor completes while the victims are down."""
MAX_ROUNDS_TO_REGATHER = 8
"""Rounds of a survivor, from a victim's first round after its restart, within which it uses a group of it."""


def rows_of(run_dir):
    """The node's rounds (not round 0's line: the held-out evaluation before any update)."""
    path = run_dir / "metrics.jsonl"
    return [r for r in read_jsonl(path) if r["round"]] if path.exists() else []


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def peer_id_of(run_dir, after=0):
    ids = re.findall(r"^peer id (\S+)$", (run_dir / "stdout.log").read_text()[after:], flags=re.M)
    return ids[0] if ids else None


def first_use_after(rows, source, since):
    """Index of the first row that used a group of `source` fetched after `since` (its previous round
    ended after it), or None."""
    for i in range(1, len(rows)):
        if rows[i - 1]["time"] > since and any(k.endswith("@" + source) for k in rows[i]):
            return i
    return None


def test_survivors_go_on_and_killed_nodes_resume_and_are_gathered_from_again(tmp_path, tiny_model_dir):
    boot, maddrs = start_bootstrap(tmp_path)
    dirs = [tmp_path / f"node-{i}" for i in range(NODES)]
    specs = [NodeSpec(f"n{i}", str(tiny_model_dir), ("--lora-rank", "4") if i == 1 else ()) for i in range(NODES)]
    cmds = [node_command(s, index=i, run_dir=d, peers=maddrs, run_id="churn-test", rounds=500,
                         flags=TINY_FLAGS + ("--round-deadline", "1.5"),
                         extra=("--identity", str(d / "identity.key"), "--set", "swarm.fetch.poll_interval=0.5"))
            for i, (s, d) in enumerate(zip(specs, dirs))]
    procs = []
    try:
        procs = [start_node(c, d, s) for c, d, s in zip(cmds, dirs, specs)]
        wait_for(lambda: all(len(rows_of(d)) >= 2 for d in dirs), 600, "every node to finish two rounds")
        first_ids = [peer_id_of(d) for d in dirs]
        survivors = [i for i in range(NODES) if i not in VICTIMS]
        for v in VICTIMS:  # SIGKILL: the node and its p2pd, mid-round
            os.killpg(procs[v].proc.pid, signal.SIGKILL)
            procs[v].proc.wait()
        killed_at = time.time()
        done_before = {i: len(rows_of(dirs[i])) for i in survivors}
        wait_for(lambda: all(len(rows_of(dirs[i])) >= done_before[i] + ROUNDS_DOWN for i in survivors), 300,
                 f"the survivors to complete {ROUNDS_DOWN} rounds without the killed nodes")

        offsets = {v: (dirs[v] / "stdout.log").stat().st_size for v in VICTIMS}
        saved = {v: max(int(p.name.split("-")[1]) for p in (dirs[v] / "checkpoints").glob("ckpt-*")
                        if (p / "COMPLETE").is_file()) for v in VICTIMS}
        for v in VICTIMS:
            procs[v] = start_node(cmds[v], dirs[v], specs[v])
        wait_for(lambda: all(re.search(r"^round=", (dirs[v] / "stdout.log").read_text()[offsets[v]:], flags=re.M)
                             for v in VICTIMS), 300, "the restarted nodes to complete a round")
        for v in VICTIMS:
            assert peer_id_of(dirs[v], offsets[v]) == first_ids[v]  # the same identity
            assert f"resumed from ckpt-{saved[v]:08d}" in (dirs[v] / "node.log").read_text()
            assert [r["round"] for r in rows_of(dirs[v])][: saved[v] + 1] == list(range(1, saved[v] + 2))
        back = {v: rows_of(dirs[v])[saved[v]]["time"] for v in VICTIMS}  # end of its first round back

        def regathered():
            return all(first_use_after(rows_of(dirs[i]), short_peer(first_ids[v]), killed_at) is not None
                       for i in survivors for v in VICTIMS)

        wait_for(regathered, 300, "every survivor to use a group of each restarted node")
        for i in survivors:
            rows = rows_of(dirs[i])
            down = [r for r in rows if killed_at < r["time"] < min(back.values())]
            assert len(down) >= ROUNDS_DOWN, (i, len(down))  # kept completing rounds while the victims were down
            for v in VICTIMS:
                used = first_use_after(rows, short_peer(first_ids[v]), killed_at)
                after_back = sum(1 for r in rows[:used + 1] if r["time"] > back[v])
                assert after_back <= MAX_ROUNDS_TO_REGATHER, (i, v, after_back)
                assert short_peer(first_ids[v]) not in rows[-1]["banned_peers"]
        for p in procs:
            p.proc.send_signal(signal.SIGTERM)
        assert [p.proc.wait(timeout=300) for p in procs] == [0] * NODES
    finally:
        for p in procs:
            stop(p.proc)
        stop(boot)
