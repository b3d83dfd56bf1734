"""Five nodes joining through one bootstrap peer at the same moment form one swarm, not two (hivemind#624).

The OpenDiloco report: 4 peers started together with the same initial peers sometimes made
two DHTs of 2. Here 5 node processes start at once, before any of them has joined; each
then publishes one group, and every node must gather the other four's, bit for bit.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from ftis_swarm.wire import content_id

pytestmark = [pytest.mark.net, pytest.mark.slow]


def test_five_nodes_bootstrapping_at_once_see_every_peer(swarm):
    peers = swarm.bootstrap(ttl=120.0, max_clock_skew=5.0)
    nodes = [swarm.node(swarm.config(run_id="together", peers=peers)) for _ in range(5)]  # all started at once
    with ThreadPoolExecutor(max_workers=5) as pool:
        list(pool.map(lambda node: node.joined(), nodes))
        published = list(pool.map(lambda node: node.publish([f"from-{node.peer_id}"])[0], nodes))
    assert all(p["ok"] for p in published), published
    for i, node in enumerate(nodes):
        expected = {p["group_id"]: p["body"] for j, p in enumerate(published) if j != i}
        received: dict[str, bytes] = {}
        stop_at = time.monotonic() + 30.0
        while len(received) < len(expected) and time.monotonic() < stop_at:
            received.update((content_id(body), body) for body in node.gather(0.5)["bodies"])
        assert received == expected, (i, len(received))
