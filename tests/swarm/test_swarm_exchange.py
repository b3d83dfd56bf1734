"""A bootstrap peer and 3 nodes in separate processes: everyone gathers everyone else's groups, bit for bit."""

from __future__ import annotations

import signal
import sys
import time

import pytest

from ftis_swarm.swarm.identity import load_identity
from ftis_swarm.wire import content_id

pytestmark = [pytest.mark.net, pytest.mark.slow]


def test_three_nodes_exchange_groups_bit_for_bit(swarm, tmp_path):
    identity = tmp_path / "bootstrap.key"
    peers = swarm.bootstrap(ttl=120.0, max_clock_skew=5.0, identity=identity)
    assert all(m.endswith(f"/p2p/{load_identity(identity).peer_id}") for m in peers)  # the file is its identity

    nodes = [swarm.node(swarm.config(run_id="exchange", peers=peers, client_mode=(i == 2))) for i in range(3)]
    # meanwhile, a second process on the same identity refuses to start: one sentence, exit status 2
    twin = swarm.proc([sys.executable, "-m", "ftis_swarm.cli", "bootstrap", "--host", "127.0.0.1",
                       "--identity", str(identity)], name="twin")
    for node in nodes:
        node.joined()
    assert twin.popen.wait(timeout=120) == 2
    message = twin.tail().strip()
    assert message.startswith("error: identity") and "already in use" in message and "\n" not in message
    published = {}  # node index -> {group id: body}
    for i, node in enumerate(nodes):
        results = node.publish([f"item-{i}-a", f"item-{i}-b"], tokens=64 if i else 4000)
        assert all(r["ok"] and r["replicas"] >= 1 for r in results), results
        published[i] = {r["group_id"]: r["body"] for r in results}
        assert all(content_id(body) == gid for gid, body in published[i].items())

    for i, node in enumerate(nodes):
        expected = {gid: body for j, bodies in published.items() if j != i for gid, body in bodies.items()}
        received: list[bytes] = []
        stop_at = time.monotonic() + 30.0
        while len(received) < len(expected) and time.monotonic() < stop_at:
            answer = node.gather(1.0)
            assert answer["elapsed"] < 1.0 + 1.0
            received += answer["bodies"]
        assert len(received) == len(expected) == 4  # nothing twice, nothing of its own
        assert {content_id(body): body for body in received} == expected
        assert node.gather(0.5)["bodies"] == []  # dedup across calls
        counters = node.counters()
        assert counters["published"] == 2 and counters["gathered"] == 4
        assert counters["rejected"] == {} and counters["publish_failed"] == 0

    # the bootstrap logged the nodes joining, and stops cleanly on SIGTERM
    boot = swarm.bootstrap_proc
    log = boot.tail()
    assert all(f"peer joined: {node.peer_id}" in log for node in nodes), log
    boot.popen.send_signal(signal.SIGTERM)
    assert boot.popen.wait(timeout=30) == 0
    assert "stopped" in boot.tail()
