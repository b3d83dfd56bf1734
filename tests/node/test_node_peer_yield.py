"""What the swarm gave a node (node/peer_yield.py): its peers' samples through the gradient against those
fetched, and the bytes of the groups that carried none, in the record, the status document and
`ftis-node status`.

A real node on the loopback transport is sent, as the peer B, three groups for one of its own
prompts: one with a right and two wrong answers (signal), one whose answers are all wrong (no
signal: every advantage 0), and that one again under another id (the same content: the intake
drops it). In `nois` mode every sample with a non-zero advantage goes through the gradient.
"""

from __future__ import annotations

import json

import numpy as np
from typer.testing import CliRunner

from ftis_swarm.cli.main import app
from ftis_swarm.config import load_node_config
from ftis_swarm.node.daemon import Node
from ftis_swarm.peers.loopback import LoopbackHub
from ftis_swarm.wire import Group, encode_group


def rebuilt(g: Group, **changes) -> Group:
    fields = dict(run_id=g.run_id, sender=g.sender, model_id=g.model_id, policy_version=g.policy_version,
                  created_at=g.created_at, tokenizer_fp=g.tokenizer_fp, task_id=g.task_id, item_id=g.item_id,
                  prompt_ids=g.prompt_ids, temperature=g.temperature, completion_ids=g.completion_ids,
                  logp_gen=g.logp_gen)
    return Group.build(**{**fields, **changes})


def answered(node: Node, own: Group, answers: list[str]) -> Group:
    """B's group for the prompt of `own`: one completion per answer text."""
    tok = node.parts.tokenizer
    ids = [np.asarray(tok.encode(a, add_special_tokens=False) + [tok.eos_token_id], dtype=np.uint32) for a in answers]
    return rebuilt(own, sender="B", completion_ids=ids, logp_gen=[np.full(len(c), -1.0, dtype=np.float32) for c in ids])


def test_useful_peer_samples_and_zero_signal_bytes_in_the_record_the_status_and_the_cli(tmp_path, tiny_model_dir):
    cfg = load_node_config(None, {
        "model": str(tiny_model_dir), "run_dir": str(tmp_path / "a"), "rounds": 1, "prompts_per_round": 1,
        "sampling.group_size": 3, "sampling.max_new_tokens": 4, "round_deadline": 0.1, "learner.lr": 1e-3,
        "threads": 1, "eval_every": 0, "learner.ftis.mode": "nois", "learner.strangers_share": 1.0,
        "learner.max_peer_tokens": 1000, "learner.max_peer_tokens_per_peer": 1000})
    hub = LoopbackHub()
    node = Node(cfg, swarm=hub.member("A"))
    try:
        published = node.publish_round(1)
        own = published.own[0]
        answer = int(node.parts.task.item(own.item_id).answer)
        signal = answered(node, own, [f"{answer}", f"{answer + 1}", f"{answer + 2}"])
        flat = answered(node, own, [f"{answer + 1}", f"{answer + 2}", f"{answer + 3}"])
        again = rebuilt(flat, created_at=flat.created_at + 1.0)  # another id, the same content
        for g in (signal, flat, again):
            hub.inject("B", encode_group(g))
        record = node.learn_published(published).record
    finally:
        node.close()
    assert record["gathered"] == 3 and record["peer_groups"] == 2 and record["peer_duplicate"] == 1
    assert record["offpolicy_used"] == 3  # the right answer and both wrong ones of the group with signal
    assert record["peer_samples_fetched"] == 9 and record["useful_peer_frac"] == 3 / 9
    assert record["zero_signal_groups"] == 2
    sizes = [len(encode_group(g)) for g in (signal, flat, again)]
    assert record["zero_signal_bytes"] == sizes[1] + sizes[2] and record["peer_bytes"] == sum(sizes)

    row = json.loads((cfg.run_dir / "status.json").read_text())["rounds"][-1]
    assert (row["peer_samples_used"], row["peer_samples_fetched"], row["useful_peer_frac"]) == (3, 9, 3 / 9)
    assert (row["zero_signal_bytes"], row["peer_bytes"]) == (sizes[1] + sizes[2], sum(sizes))
    out = CliRunner().invoke(app, ["status", str(cfg.run_dir)], env={"COLUMNS": "250"})
    assert out.exit_code == 0, out.output
    line = next(ln for ln in out.output.splitlines() if ln.strip("│ ").startswith("1 "))
    assert "3 / 9" in line and "0.33" in line
    assert f"{(sizes[1] + sizes[2]) / 1e3:.1f} / {sum(sizes) / 1e3:.1f}" in line
