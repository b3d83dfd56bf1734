"""The nearest peers of a node's keys are looked up once a window, not once a publish (`dht.publishing`)."""

from __future__ import annotations

import asyncio

from hivemind.dht.routing import DHTID

from ftis_swarm.swarm.dht.publishing import NearestPeers


class Lookups:
    """Stands in for a DHTNode's lookup only (the stores are tested on real daemons): answers and counts."""

    num_replicas = 5

    def __init__(self, found: dict):
        self.found, self.asked = found, []

    async def find_nearest_nodes(self, kids, *, k_nearest, exclude_self):
        assert k_nearest == 5 and exclude_self
        self.asked.append(list(kids))
        return {kid: self.found.get(kid, {}) for kid in kids}


def test_a_key_is_looked_up_once_until_it_expires_or_is_forgotten():
    a, b, lonely = DHTID.generate(), DHTID.generate(), DHTID.generate()
    node = Lookups({a: {"x": "peer-1", "y": "peer-2"}, b: {"z": "peer-3"}})
    now = [0.0]
    cache = NearestPeers(seconds=30.0, clock=lambda: now[0])
    run = asyncio.run
    assert run(cache.find(node, [a, b])) == {a: ["peer-1", "peer-2"], b: ["peer-3"]}
    now[0] = 29.0
    assert run(cache.find(node, [a, b])) == {a: ["peer-1", "peer-2"], b: ["peer-3"]}
    assert node.asked == [[a, b]]  # the second publish of the window: no lookup
    cache.forget(b)  # too few of b's peers took a record
    run(cache.find(node, [a, b]))
    assert node.asked == [[a, b], [b]]
    now[0] = 61.0  # a's lookup is 61 s old, b's 32 s: both expired
    run(cache.find(node, [a, b]))
    assert node.asked[-1] == [a, b]
    assert run(cache.find(node, [lonely])) == {lonely: []} and run(cache.find(node, [lonely])) == {lonely: []}
    assert node.asked[-2:] == [[lonely], [lonely]]  # nobody found: asked again next time
