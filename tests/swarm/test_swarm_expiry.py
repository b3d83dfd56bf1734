"""Records expire: after its TTL a group is gone from gathers, and from the DHT itself."""

from __future__ import annotations

import time

import pytest

pytestmark = [pytest.mark.net, pytest.mark.slow]

TTL, SKEW = 4.0, 1.0


def test_group_is_gone_after_its_ttl(swarm):
    peers = swarm.bootstrap(ttl=TTL, max_clock_skew=SKEW)
    cfg = dict(run_id="expiry", peers=peers, ttl=TTL, max_clock_skew=SKEW, window=1.0, publish_timeout=2.0)
    a, b = swarm.node(swarm.config(**cfg)), swarm.node(swarm.config(**cfg))
    a.joined(), b.joined()

    [old] = a.publish(["old"])
    published_at = time.time()
    assert old["ok"]
    # b's background gatherer fetches it while it is fresh, but b does not gather yet
    while b.counters()["fetched_bytes"] == 0:
        assert time.time() < published_at + TTL - 1.0, "b did not fetch the group while it was fresh"
        time.sleep(0.1)
    assert b.counters()["fetched_bytes"] == len(old["body"])

    time.sleep(max(0.0, published_at + TTL + SKEW + 0.5 - time.time()))
    assert b.gather(0.5)["bodies"] == []  # went stale while waiting: dropped, and counted
    assert b.counters()["rejected_by_peer"] == {a.peer_id: {"stale": 1}}

    c = swarm.node(swarm.config(**cfg)).joined()  # reads the last TTL of windows on its first poll
    [new] = a.publish(["new"])
    assert new["ok"]
    bodies: list[bytes] = []
    stop_at = time.monotonic() + 20.0
    while not bodies and time.monotonic() < stop_at:
        bodies += c.gather(0.5)["bodies"]
    assert bodies == [new["body"]]
    assert c.counters()["rejected"] == {}  # it never saw the old pointer: the record itself expired
    assert a.counters()["serving_bodies"] == 1  # and its publisher no longer serves the old body
