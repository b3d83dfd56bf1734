"""Which peers' groups an update takes: dedup against persisted updates, context, caps."""

from __future__ import annotations

import json

import numpy as np

from ftis_swarm.node.daemon import drop_rounds_after, select_peer_groups

from wire_samples import random_group


def groups_from(rng, sender_tag: str, n: int, length: int = 5):
    out = []
    for _ in range(n):
        g = random_group(rng, G=2, length=length)
        out.append(type(g).build(**{**{f: getattr(g, f) for f in (
            "run_id", "model_id", "policy_version", "created_at", "tokenizer_fp", "task_id", "item_id",
            "prompt_ids", "temperature", "completion_ids", "logp_gen")}, "sender": sender_tag}))
    return out


def test_caps_dedup_and_context():
    rng = np.random.default_rng(0)
    a, b = groups_from(rng, "peer-a", 4), groups_from(rng, "peer-b", 3)
    long = groups_from(rng, "peer-c", 1, length=5000)
    consumed = {a[0].group_id: None}
    kept, dropped = select_peer_groups(a + b + long, consumed, max_total=4, max_per_peer=2,
                                       context=5000)
    assert [g.sender for g in kept] == ["peer-a", "peer-a", "peer-b", "peer-b"]
    assert kept[0] is a[1] and kept[1] is a[2]  # a[0] was consumed before
    assert dropped == {"peer_already_consumed": 1, "peer_over_cap": 2, "peer_too_long": 1}


def test_resume_drops_the_rounds_after_the_checkpoint(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"round": r, "x": r * 10}) + "\n" for r in (1, 2, 3, 4)))
    drop_rounds_after(path, 2)
    assert [json.loads(ln)["round"] for ln in path.read_text().splitlines()] == [1, 2]
    drop_rounds_after(tmp_path / "absent.jsonl", 1)  # nothing to do, no error
