"""The status board and page without a swarm: a real ledger's accounts, a real HTTP server, the real CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections import Counter

import pytest

from ftis_swarm.config import LedgerConfig
from ftis_swarm.node.status import StatusBoard, reach_metrics
from ftis_swarm.node.status_page import StatusServer
from ftis_swarm.ops.status import StatusReadError, read_status
from ftis_swarm.peers.ledger import PeerLedger
from ftis_swarm.swarm.peer.dialback import Reachability

HONEST, FORGER, QUIET = "QmHonestPeer000000000000000000000000000000000001", "QmForgerPeer0000000000000000000000000000000002", \
    "QmQuietPeer00000000000000000000000000000000000003"


def record(r: int, **extra) -> dict:
    return {"round": r, "reward": 0.5, "accuracy": 0.5, "frac_filtered": 0.25, "ess": 0.9, "sequences": 16,
            "offpolicy_sequences": 8, "own_groups": 2, "peer_groups": 2, "time_generate": 1.0, "time_gather": 2.0,
            "time_learn": 3.0, "time_round": 6.0, "policy_version": r, **extra}


@pytest.fixture()
def board(tmp_path):
    ledger = PeerLedger(LedgerConfig(ban_threshold=20))
    ledger.credit(HONEST, 5)  # before the node started (a resumed node): not in the kept rounds' share
    b = StatusBoard(run_dir=tmp_path, run_id="run-x", model="tiny", task="arith", peer_id="QmMe", rounds=10,
                    version="0.1.0", accounts=ledger.snapshot())
    ledger.credit(HONEST, 2)
    ledger.settle_update({HONEST: Counter(groups=2)})  # its groups entered an update: tenure 1
    ledger.charge(QUIET, "swarm_hash_mismatch")  # 10 points: below a ban
    b.observe(record(1), ledger.snapshot())
    ledger.credit(HONEST, 2)
    ledger.charge(FORGER, "forgery")  # 20 points: banned at once
    ckpt = tmp_path / "checkpoints" / "ckpt-00000002"
    ckpt.mkdir(parents=True)
    (ckpt / "COMPLETE").write_text("{}")
    (ckpt / "optimizer.pt").write_bytes(b"x" * 4000)
    (tmp_path / "checkpoints" / "ckpt-00000003").mkdir()  # a save in progress: no marker
    b.observe(record(2, reward=0.75), ledger.snapshot())
    return b


def test_the_document_shows_rounds_peers_standing_bans_and_disk(board, tmp_path):
    doc = json.loads((tmp_path / "status.json").read_text())
    assert doc == board.last
    assert doc["node"]["round"] == 3 and doc["node"]["state"] == "running" and doc["node"]["run_id"] == "run-x"
    assert [r["round"] for r in doc["rounds"]] == [1, 2] and doc["rounds"][1]["reward"] == 0.75
    assert doc["rounds"][0]["peer_share"] == 0.5 and doc["rounds"][0]["filtered"] == 0.25
    peers = {p["peer"]: p for p in doc["peers"]}
    assert [p["peer"] for p in doc["peers"]][0] == HONEST  # best score first
    # 4 of HONEST's groups in the two rounds' updates, against 4 own and those 4: the 5 before do not count
    assert peers[HONEST]["share"] == 0.5 and peers[HONEST]["credit"] == 9.0 and not peers[HONEST]["refused"]
    assert peers[HONEST]["tenure"] == 1 and peers[QUIET]["tenure"] == 0
    assert peers[FORGER]["refused"] and peers[FORGER]["why"] == "forgery" and peers[FORGER]["bans"] == 1
    assert 0 < peers[FORGER]["banned_for"] <= 60 and peers[FORGER]["faults"] == {"forgery": 1}
    assert not peers[QUIET]["refused"] and peers[QUIET]["why"] is None and peers[QUIET]["cost"] == 10.0
    assert doc["reachability"]["dialable"] == "unknown" and doc["reachability"]["mode"] == "public"  # nothing measured
    assert [c["name"] for c in doc["disk"]["checkpoints"]] == ["ckpt-00000002"]  # the unmarked one is not listed
    assert doc["disk"]["checkpoints"][0]["bytes"] == 4002 and doc["disk"]["checkpoints_bytes"] == 4002
    assert doc["disk"]["run_dir_bytes"] > 4002
    assert "identity" not in json.dumps(doc)


def test_the_page_and_the_cli_show_the_same_document(board, tmp_path):
    server = StatusServer(lambda: board.last, port=0)
    try:
        assert server.url.startswith("http://127.0.0.1:")
        page = urllib.request.urlopen(server.url, timeout=5).read().decode()
        assert "<title>ftis-node status</title>" in page and "status.json" in page and "__REFRESH_MS__" not in page
        assert read_status(server.url) == board.last == read_status(str(tmp_path))
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(server.url + "secrets", timeout=5)
        assert err.value.code == 404
        for target in (server.url, str(tmp_path)):
            out = subprocess.run([sys.executable, "-m", "ftis_swarm.cli", "status", target], capture_output=True,
                                 text=True, timeout=120, env=dict(os.environ, COLUMNS="200"))
            assert out.returncode == 0, out.stderr
            assert "round 3 of 10" in out.stdout and "ckpt-00000002 (round 2)" in out.stdout
            assert "00000002" in out.stdout and FORGER not in out.stdout and "forgery" in out.stdout  # short ids
    finally:
        server.close()


def test_a_target_without_a_status_is_one_sentence(tmp_path):
    with pytest.raises(StatusReadError, match="give a node's run directory, or the URL of its status page"):
        read_status(str(tmp_path / "nowhere"))
    (tmp_path / "status.json").write_text('{"rounds": []}')
    with pytest.raises(StatusReadError, match="is not a status document"):
        read_status(str(tmp_path))
    out = subprocess.run([sys.executable, "-m", "ftis_swarm.cli", "status", "http://127.0.0.1:9/"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stderr.startswith("error: cannot read http://127.0.0.1:9/status.json")
    assert len(out.stderr.strip().splitlines()) == 1


def test_the_decided_mode_and_the_last_dial_back_are_in_the_status_and_the_metrics(tmp_path):
    reach = Reachability(configured="auto", mode="relayed", decided_by="dial-back")
    reach.record_check(asked=2, answered=2, reached=0, port=4321)
    b = StatusBoard(run_dir=tmp_path, run_id="run-x", model="tiny", task="arith", peer_id="QmMe", rounds=10,
                    version="0.1.0", reach=reach.snapshot())
    assert b.write()["reachability"]["mode"] == "relayed"
    reach.record_check(asked=2, answered=2, reached=1, port=4321)  # the port opened later
    b.observe(record(1), {}, reach=reach.snapshot())
    shown = json.loads((tmp_path / "status.json").read_text())["reachability"]
    assert {k: shown[k] for k in ("configured", "mode", "decided_by", "dialable")} == {
        "configured": "auto", "mode": "relayed", "decided_by": "dial-back", "dialable": "yes"}
    assert shown["note"] == "1 of 2 peers dialed port 4321 back at the last check"
    assert reach_metrics(reach.snapshot()) == {"reach_mode": "relayed", "reach_public": False, "reach_dialable": "yes",
                                               "reach_mismatch": True,  # relayed, but a peer reached its port
                                               "reach_dialback_answered": 2, "reach_dialback_reached": 1,
                                               "reach_switches": 0}
    out = subprocess.run([sys.executable, "-m", "ftis_swarm.cli", "status", str(tmp_path)], capture_output=True,
                         text=True, timeout=120, env=dict(os.environ, COLUMNS="200"))
    assert out.returncode == 0, out.stderr
    assert "mode relayed (auto, decided by dial-back, switched 0 time(s)), can peers dial me: yes (1 of 2 peers " \
        "dialed port 4321" in out.stdout
    reach.record_switch("public")  # the next rechecks agreed: the node switched
    b.observe(record(2), {}, reach=reach.snapshot())
    shown = json.loads((tmp_path / "status.json").read_text())["reachability"]
    assert (shown["mode"], shown["decided_by"], shown["switches"]) == ("public", "dial-back recheck", 1), shown
    assert "switched mode 1 time(s), last at" in shown["note"], shown
    assert reach_metrics(reach.snapshot())["reach_switches"] == 1
    # how it reaches its peers (the swarm's counters add it to the reach snapshot): metrics, page and terminal
    with_paths = {**reach.snapshot(), "peers": {"direct": 3, "relayed": 2}}
    assert {k: v for k, v in reach_metrics(with_paths).items() if k.startswith("reach_peers")} == {
        "reach_peers_direct": 3, "reach_peers_relayed": 2}
    b.observe(record(3), {}, reach=with_paths)
    assert json.loads((tmp_path / "status.json").read_text())["reachability"]["peers"] == {"direct": 3, "relayed": 2}
    out = subprocess.run([sys.executable, "-m", "ftis_swarm.cli", "status", str(tmp_path)], capture_output=True,
                         text=True, timeout=120, env=dict(os.environ, COLUMNS="200"))
    assert "peers connected directly 3, through a relay only 2" in out.stdout, out.stdout
