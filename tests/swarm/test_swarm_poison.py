"""Poisoned groups against a real 3-node testnet: the hostile peer (`ftis_swarm.lab.hostile.peer`, its own
process) publishes validly signed groups of every attack in `ftis_swarm/lab/hostile/groups.py`
before three tiny nodes (real `ftis-node join` processes) start; each node counts each
attack under its reason, no hostile sample reaches an update, and every node's weights
stay finite.

The nodes run with a ban threshold no attack reaches and a token budget every attack but the
flood fits, so that every group is counted under its own reason whatever round it arrives
in (the flood is dropped by the intake, or never chosen from its pointer by the swarm's
budget, whichever sees it over the budget first); bans are tested in tests/node/test_node_ledger.py, the budget's deferral in
tests/node/test_node_selection.py, and both show in `ftis-node bench attacks`.
"""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from ftis_swarm.lab.hostile.groups import ATTACKS, attack_groups
from ftis_swarm.metrics import read_jsonl
from ftis_swarm.models import load_model
from ftis_swarm.ops.testnet import TINY_FLAGS, node_command, preset, start_node, stop
from ftis_swarm.peers.ledger import short_peer
from ftis_swarm.rollout import GroupHeader, TransformersBackend
from ftis_swarm.wire import encode_group

pytestmark = [pytest.mark.net, pytest.mark.slow]

RUN_ID = "poison"
TTL, SKEW, WINDOW = 600.0, 30.0, 30.0
ROUNDS = 3
EXPECTED = {  # metrics key summed over a node's rounds -> groups
    "rejected_not_train_split": 1, "rejected_eval_task": 1, "rejected_item_out_of_range": 1,
    "rejected_unknown_item": 1, "rejected_prompt_mismatch": 1, "charged_forgery": 1,
}


def test_poisoned_groups_are_refused_and_never_reach_an_update(swarm, tmp_path):
    maddrs = swarm.bootstrap(ttl=TTL, max_clock_skew=SKEW)
    cfg = swarm.config(run_id=RUN_ID, peers=maddrs, ttl=TTL, max_clock_skew=SKEW, window=WINDOW)
    hostile = swarm.hostile(maddrs, cfg, identities=1)
    hostile_id = hostile.peer_id

    pre = preset("tiny", tmp_path)
    model, tok = load_model(pre.specs[0].model)
    backend = TransformersBackend(model=model, tokenizer=tok, header=GroupHeader(RUN_ID, hostile_id, "tiny"))
    groups = attack_groups(backend, tok, seed=0, token_bound=len(tok))
    assert list(groups) == list(ATTACKS)
    bodies = [base64.b64encode(encode_group(g)).decode() for g in groups.values()]
    published = hostile.request({"op": "publish_groups", "bodies": bodies}, timeout=120.0)
    assert all(per_peer == [[True]] for per_peer in published["stored"]), published["stored"]  # the bootstrap took each

    config = tmp_path / "node.toml"
    # room for every attack group in one update: only the flood is over the token budget (the hostile
    # peer has no standing: the whole budget is the strangers' share here)
    config.write_text("[ledger]\nban_threshold = 100000.0\n[learner]\nmax_peer_tokens = 20000\n"
                      "max_peer_tokens_per_peer = 10000\nstrangers_share = 1.0\n")
    nodes = []
    try:
        for i, spec in enumerate(pre.specs):
            cmd = node_command(spec, index=i, run_dir=tmp_path / f"node-{i}", peers=maddrs, run_id=RUN_ID,
                               rounds=ROUNDS, flags=TINY_FLAGS, extra=("--config", str(config)))
            nodes.append(start_node(cmd, tmp_path / f"node-{i}", spec))
        for n in nodes:
            n.proc.wait(timeout=600)
    finally:
        for n in nodes:
            stop(n.proc)
    assert [n.proc.returncode for n in nodes] == [0, 0, 0], [(n.run_dir / "stdout.log").read_text()[-2000:]
                                                            for n in nodes]

    hostile_src = short_peer(hostile_id)
    for n in nodes:
        rows = [r for r in read_jsonl(n.run_dir / "metrics.jsonl") if r["round"]]  # round 0: the held-out evaluation
        assert [r["round"] for r in rows] == list(range(1, ROUNDS + 1))
        counted = {key: sum(r.get(key, 0) for r in rows) for key in EXPECTED}
        assert counted == EXPECTED, (n.spec.name, counted)
        assert rows[-1]["swarm_rejected_malformed"] == 1  # T = 1e-300, refused by the wire decoder
        # the flood, over what is left of the budget: never chosen from its pointer (not fetched), or fetched
        # with room left then and dropped by the intake; once either way
        over = sum(r.get("peer_over_budget", 0) for r in rows)
        assert over == 1 or (over == 0 and rows[-1]["swarm_not_chosen"] >= 1), (over, rows[-1]["swarm_not_chosen"])
        forged_round = next(r for r in rows if r.get("charged_forgery"))
        assert forged_round["withheld_forgery"] == 16  # all of the forged group's samples, none used
        assert forged_round[f"forgery_mean@{hostile_src}"] == pytest.approx(2.0, abs=1e-3)
        assert all(r.get(f"used@{hostile_src}", 0) == 0 for r in rows)  # no hostile sample reached an update
        assert all(r.get(f"max_weight_used@{hostile_src}", 0.0) <= 2.0 for r in rows)
        assert rows[-1]["banned_peers"] == []
        ckpt = sorted((n.run_dir / "checkpoints").glob("ckpt-*"))[-1]
        tensors = {k: v for f in ckpt.rglob("*.safetensors") for k, v in load_file(f).items()}
        assert tensors and all(torch.isfinite(v).all() for v in tensors.values())
