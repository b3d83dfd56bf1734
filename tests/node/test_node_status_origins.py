"""`ftis-node status` shows, per network origin, its identities and its share of the peers' tokens taken
(issue 40): from a real intake's take to the document and the CLI's table."""

from __future__ import annotations

import json

import numpy as np
from rich.console import Console
from wire_samples import groups_from

from ftis_swarm.cli.status_cmd import status_tables
from ftis_swarm.node.status import StatusBoard
from ftis_swarm.ops.status import read_status
from ftis_swarm.peers.intake import Budget, PeerIntake
from ftis_swarm.peers.ledger import PeerLedger

ORIGINS = {**{f"crowd-{i}": "127.0.9.0/24" for i in range(6)}, "honest-a": "10.0.0.0/24", "honest-b": "10.1.0.0/24"}


def test_the_status_shows_each_origins_identities_and_share_of_the_tokens_taken(tmp_path):
    rng = np.random.default_rng(0)
    groups = [g for peer in ORIGINS for g in groups_from(rng, peer, 4, length=5)]  # 10 tokens a group
    budget = Budget(max_groups=64, max_groups_per_peer=8, max_tokens=400, max_tokens_per_peer=200, context=4096,
                    strangers_share=1.0, max_tokens_per_origin=100, max_groups_per_origin=32)
    intake = PeerIntake(budget, seed="me")
    board = StatusBoard(run_dir=tmp_path, run_id="run-x", model="tiny", task="arith", peer_id="QmMe", rounds=10,
                        version="0.1.0")
    for r in (1, 2):
        taken = intake.take(groups if r == 1 else [], {}, lambda peer: True, origin=ORIGINS.get, draw=r)
        board.observe_origins(taken.by_origin)
        board.observe({"round": r, "own_groups": 2}, PeerLedger().snapshot())
    doc = json.loads((tmp_path / "status.json").read_text())
    rows = {o["origin"]: o for o in doc["origins"]}
    crowd = rows["origin:127.0.9.0/24"]
    # six identities, one origin's cap of 100 tokens between them a round (the rest waited for the second)
    assert crowd["tokens"] == 200 and crowd["groups"] == 20 and crowd["identities"] == 6
    assert rows["origin:10.0.0.0/24"] == {"origin": "origin:10.0.0.0/24", "tokens": 40, "groups": 4, "share": 40 / 280,
                                          "identities": 1}
    assert abs(sum(o["share"] for o in doc["origins"]) - 1.0) < 1e-9 and doc["origins"][0] == crowd  # most first
    console = Console(width=200, record=True)
    for part in status_tables(read_status(str(tmp_path))):
        console.print(part)
    text = console.export_text()
    assert "origin:127.0.9.0/24" in text and "0.71" in text  # 200 of the 280 peer tokens taken
