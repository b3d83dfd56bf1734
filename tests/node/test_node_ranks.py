"""A node over two processes (torchrun, FSDP2 on gloo) in a swarm with a single-process peer.

The real command lines: `ftis-node bootstrap`, `ftis-node join --nproc-per-node 2` (which
becomes torchrun) and a plain `ftis-node join`, on 127.0.0.1 with tiny Qwen2 models.
"""

from __future__ import annotations

import subprocess
import time

import pytest
from transformers import AutoModelForCausalLM

from ftis_swarm.metrics import read_jsonl
from ftis_swarm.models.tiny import build_tiny_qwen2
from ftis_swarm.ops.testnet import NodeSpec, node_command, start_bootstrap, start_node, stop

pytestmark = [pytest.mark.slow, pytest.mark.net]
ROUNDS = 2
FLAGS = ("--task", "arith", "--prompts-per-round", "2", "--group-size", "4", "--max-new-tokens", "6",
         "--checkpoint-every", "1", "--threads", "1")


def _wait(procs, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while any(p.proc.poll() is None for p in procs) and time.monotonic() < deadline:
        time.sleep(0.5)


def _peers_seen(rows: list[dict]) -> set[str]:
    return {k.partition("@")[2] for r in rows for k in r if "@" in k} - {"self"}


def test_a_two_rank_node_trains_in_a_swarm_and_resumes_in_one_process(tmp_path) -> None:
    models = tmp_path / "models"
    sharded_model = build_tiny_qwen2(models / "b", hidden_size=64, num_layers=2, seed=2)
    peer_model = build_tiny_qwen2(models / "a", hidden_size=32, num_layers=1, seed=1)
    two_ranks = NodeSpec("two-ranks", str(sharded_model), ("--lr", "1e-3", "--nproc-per-node", "2"))
    one_rank = NodeSpec("two-ranks", str(sharded_model), ("--lr", "1e-3"))
    boot, maddrs = start_bootstrap(tmp_path)
    procs = []
    try:  # the single-process peer runs rounds until stopped; the two-rank node joins while it does
        peer_cmd = node_command(NodeSpec("one-process", str(peer_model), ("--lr", "1e-3")), index=1,
                                run_dir=tmp_path / "node-1", peers=maddrs, run_id="ranks", rounds=100,
                                flags=FLAGS + ("--round-deadline", "2"))
        peer = start_node(peer_cmd, tmp_path / "node-1", NodeSpec("one-process", str(peer_model)))
        procs.append(peer)
        while not peer.poll_metrics() and peer.proc.poll() is None:
            time.sleep(0.5)
        cmd = node_command(two_ranks, index=0, run_dir=tmp_path / "node-0", peers=maddrs, run_id="ranks",
                           rounds=ROUNDS, flags=FLAGS + ("--round-deadline", "4"))
        procs.append(start_node(cmd, tmp_path / "node-0", two_ranks))
        _wait(procs[1:], 600)
        time.sleep(3)  # one more round of the peer's, to fetch the two-rank node's last groups
    finally:
        for p in reversed(procs):
            stop(p.proc)
        stop(boot)
    logs = {p.spec.name: (p.run_dir / "stdout.log").read_text()[-3000:] for p in procs}
    assert [p.proc.returncode for p in procs] == [0, 0], logs
    # their rounds (round 0's line is the held-out evaluation before any update, rank 0's)
    two, one = ([r for r in read_jsonl(tmp_path / n / "metrics.jsonl") if r["round"]] for n in ("node-0", "node-1"))
    assert [r["round"] for r in two] == list(range(1, ROUNDS + 1))
    assert all(r["peer_groups"] > 0 for r in two), two
    assert sum(r["peer_groups"] for r in one) > 0, one
    # every round's update ran on both ranks over own and peers' groups (tiny random models earn no
    # reward, so the advantages are 0 and no step is taken: the learner tests cover the step itself)
    assert all(r["sequences"] == 4 * (r["own_groups"] + r["peer_groups"]) and r["frac_nonpositive_adv"] == 1.0
               for r in two)
    # only rank 0 joined the swarm: the peer saw one other sender, and rank 1 only followed
    assert len(_peers_seen(one)) == 1
    assert "released by rank 0" in (tmp_path / "node-0" / "node-rank1.log").read_text()
    ckpt = tmp_path / "node-0" / "checkpoints" / f"ckpt-{ROUNDS:08d}"
    assert (ckpt / "COMPLETE").is_file()
    assert AutoModelForCausalLM.from_pretrained(ckpt / "model").config.hidden_size == 64  # loads with transformers

    # the same command in one process resumes the two ranks' checkpoint (alone now, one more round)
    cmd = node_command(one_rank, index=0, run_dir=tmp_path / "node-0", peers=[], run_id="ranks",
                       rounds=ROUNDS + 1, flags=FLAGS + ("--round-deadline", "0.5"))
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"starting at round {ROUNDS + 1}" in proc.stdout
    rows = list(read_jsonl(tmp_path / "node-0" / "metrics.jsonl"))
    assert [r["round"] for r in rows] == list(range(0, ROUNDS + 2))
