"""What a publish waits for: the nearest peers of a node's keys looked up once a window, not once a publish
(`dht.publishing`); with `publish_wait` gossiped, the stores after the call, still counted (`SwarmClient`)."""

from __future__ import annotations

import asyncio
import time

import pytest
from hivemind.dht.routing import DHTID

from ftis_swarm.swarm.dht.publishing import NearestPeers
from ftis_swarm.wire import content_id

from publish_steps import assert_steps


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


@pytest.mark.net
@pytest.mark.slow
def test_a_gossiped_publish_returns_before_the_stores_and_still_counts_them(swarm):
    """`publish_wait` gossiped: the call ends at the gossip hand-over (no replica counted), the stores
    go on in the background and are counted; a lone node's stores, which nobody can take, are counted
    failed (and said), not lost."""
    peers = swarm.bootstrap(ttl=120.0, max_clock_skew=5.0)
    cfg = swarm.config(run_id="gossiped", peers=peers)
    fast, reader = swarm.node(cfg.model_copy(update={"publish_wait": "gossiped"})), swarm.node(cfg)
    lone = swarm.node(swarm.config(run_id="gossiped-alone", peers=[], publish_wait="gossiped"))
    for node in (fast, reader, lone):
        node.joined()
    answers = fast.publish([f"g{i}" for i in range(3)], round=0)
    assert all(a["ok"] for a in answers) and answers[0]["replicas"] == 0, answers
    assert_steps(answers[0], wait="gossiped")
    got = set()
    stop_at = time.monotonic() + 30.0
    while len(got) < 3 and time.monotonic() < stop_at:
        got |= {content_id(body) for body in reader.gather(1.0)["bodies"]}
    assert got == {a["group_id"] for a in answers}
    counters = wait_for(fast, lambda c: c["background_stores"] == 1)  # both records held by a replica
    assert counters["background_stores_failed"] == 0 and counters["published_rounds"] == 1

    alone = lone.publish(["solo"], round=0)[0]
    assert alone["ok"] and alone["wait"] == "gossiped"  # handed to gossip; nobody to store it on
    counters = wait_for(lone, lambda c: c["background_stores_failed"] == 1)
    assert counters["background_stores"] == 0
    assert "was gossiped, but storing it in the DHT failed" in lone.log.read_text()


def wait_for(node, condition, seconds: float = 20.0) -> dict:
    stop_at = time.monotonic() + seconds
    while not condition(counters := node.counters()):
        assert time.monotonic() < stop_at, counters
        time.sleep(0.2)
    return counters
