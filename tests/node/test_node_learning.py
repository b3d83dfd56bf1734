"""The learning half of a round (`node/learning.py`) and the version guard (`node/serving.py`), in process.

A real tiny model, its real transformers backend and learner; no swarm (the groups of a
"peer" are this backend's groups re-signed under another sender, as the wire would carry them).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from ftis_swarm.config import load_node_config
from ftis_swarm.lab.hostile.groups import rebuilt
from ftis_swarm.node.components import build_learner
from ftis_swarm.node.health import UpdateHealth
from ftis_swarm.node.learning import Learning, learn_round, node_admission
from ftis_swarm.node.rollouts import generate_own, group_header, round_items
from ftis_swarm.node.scoring import TaskCache
from ftis_swarm.node.serving import Serving
from ftis_swarm.peers.ledger import PeerLedger
from ftis_swarm.rollout import TransformersBackend
from ftis_swarm.tasks import get_task
from ftis_swarm.wire import tokenizer_fingerprint


@pytest.fixture()
def node(tiny_model_dir, tmp_path):
    cfg = load_node_config(None, {"model": str(tiny_model_dir), "run_dir": str(tmp_path), "prompts_per_round": 1,
                                  "sampling.group_size": 3, "sampling.max_new_tokens": 4, "seed": 7})
    _, tok, learner = build_learner(cfg, device="cpu")
    backend = TransformersBackend(model=learner.model, tokenizer=tok, header=group_header(cfg, "me"))
    learning = Learning(me="me", learner=learner, tokenizer=tok, tasks=TaskCache(),
                        admission=node_admission(cfg, tokenizer_fingerprint(tok)),
                        serving=Serving(learner, backend, shares_model=True), peer_ledger=PeerLedger(cfg.ledger),
                        health=UpdateHealth(cfg.max_failed_updates))
    return cfg, backend, learning


def test_own_stale_and_peer_groups_are_labelled_as_method_says(node):
    cfg, backend, learning = node
    task = get_task(cfg.task)
    stale = generate_own(backend, task, learning.tokenizer, cfg, 1, Counter())  # policy version 0
    assert [g.item_id for g in stale] == [it.item_id for it in round_items(task, cfg, 1)]
    learning.learner.policy_version += 1  # as after an optimiser step: the served weights move on
    learning.serving.after_update()
    assert backend.policy_version == 1
    fresh = generate_own(backend, task, learning.tokenizer, cfg, 2, Counter())
    peer = [rebuilt(g, sender="peer-1") for g in fresh]

    learned = learn_round(learning, 2, stale + fresh, peer)

    stale_item, fresh_item, peer_item = learned.items
    assert stale_item.group.policy_version == 0 and fresh_item.group.policy_version == 1
    assert stale_item.offpolicy.all() and not stale_item.peer_rows.any()  # weighted, never filtered
    assert not fresh_item.offpolicy.any() and not fresh_item.peer_rows.any()
    assert peer_item.offpolicy.all() and peer_item.peer_rows.all()
    assert np.array_equal([it.source[0] for it in learned.items], [0, 0, 1]) and learning.sources == {"peer-1": 1}
    assert learned.counts["stale_groups"] == 1 and learned.own_in_batch == 2
    assert learned.metrics["sequences"] == 9.0 and learned.health["update_failed"] == 0
    # the random tiny model never answers: no advantage, no step, and the served version stays
    assert learned.metrics["sequences_with_gradient"] == 0.0
    assert learning.learner.policy_version == backend.policy_version == 1


def test_the_served_version_follows_only_a_step(node):
    _, backend, learning = node
    learning.serving.after_update()  # no step taken
    assert backend.policy_version == learning.learner.policy_version == 0
    learning.learner.policy_version = 2  # the learner is ahead: a bug the guard must name, not hide
    with pytest.raises(RuntimeError, match="serves policy version 1 but the learner is at 2"):
        learning.serving.after_update()


def test_a_raising_update_is_a_failed_update_not_a_crash(node, monkeypatch):
    cfg, backend, learning = node
    own = generate_own(backend, get_task(cfg.task), learning.tokenizer, cfg, 1, Counter())

    def boom(*_, **__):
        raise RuntimeError("injected")

    monkeypatch.setattr(learning.learner, "update", boom)
    learned = learn_round(learning, 1, own, [])
    assert learned.health == {"update_failed": 1, "failed_updates_in_a_row": 1} and learned.metrics == {}
    assert backend.policy_version == learning.learner.policy_version == 0
