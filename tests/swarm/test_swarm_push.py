"""Pushed pointers on a real testnet: groups are visible at once, a gather of a round ends when the round is in.

A bootstrap peer and three gossiping nodes that read the DHT only every 20 s, then a late
node with gossip off that polls the DHT: every group reaches every node; the gossiping
nodes see each other's groups within seconds, on the topic, and the late node's through
the DHT fallback; a gather of a round returns as soon as the live peers' rounds are in,
waits its deadline for a peer that is still live but silent, and stops waiting for it
two deadlines later.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from ftis_swarm.peers import faults
from ftis_swarm.wire import content_id

pytestmark = [pytest.mark.net, pytest.mark.slow]

DHT_EVERY, SHORT = 20.0, 5.0
RETRIED = {faults.BODY_BROKEN, faults.BODY_STALLED, faults.BODY_UNREACHABLE}  # unsigned: load, never the sender


def test_pushed_pointers_and_gathers_that_end_when_the_round_is_in(swarm):
    peers = swarm.bootstrap(ttl=120.0, max_clock_skew=5.0)
    cfg = swarm.config(run_id="push", peers=peers, dht_poll_interval=DHT_EVERY)
    a, b, c = nodes = [swarm.node(cfg) for _ in range(3)]
    for node in nodes:
        node.joined()
    published: dict[str, dict] = {}  # group id -> publish answer
    received: dict[int, dict[str, bytes]] = {i: {} for i in range(4)}

    def publish(node, items: list[str], rnd: int) -> None:
        for answer in node.publish(items, round=rnd):
            assert answer["ok"], answer
            published[answer["group_id"]] = {**answer, "by": node.peer_id}

    def gather(i: int, node, deadline: float, rnd=None) -> dict:
        answer = node.gather(deadline, round=rnd)
        for body in answer["bodies"]:
            assert content_id(body) not in received[i]
            received[i][content_id(body)] = body
        return answer

    def missing(i: int, node) -> set[str]:
        return {g for g, p in published.items() if p["by"] != node.peer_id} - received[i].keys()

    with ThreadPoolExecutor(max_workers=3) as pool:
        # warm-up: every node proves itself to the others (a gather of a round waits only for proven peers)
        list(pool.map(lambda i: publish(nodes[i], [f"warm-{i}"], 0), range(3)))
        latencies = []
        stop_at = time.monotonic() + 60.0
        while any(missing(i, n) for i, n in enumerate(nodes)) and time.monotonic() < stop_at:
            for answer in pool.map(lambda i: gather(i, nodes[i], 0.5), range(3)):
                latencies += [t - published[g]["started"] for g, t in answer["arrivals"].items()]
        assert not any(missing(i, n) for i, n in enumerate(nodes))
        assert len(latencies) == 6 and max(latencies) < 3.0, latencies  # pushed: well inside the 20-s DHT read

        # round 1: everyone publishes two groups; a 30-s gather returns once they are in
        list(pool.map(lambda i: publish(nodes[i], [f"r1-{i}-a", f"r1-{i}-b"], 1), range(3)))
        answers = list(pool.map(lambda i: gather(i, nodes[i], 30.0, 1), range(3)))
        assert all(x["elapsed"] < 15.0 for x in answers), [x["elapsed"] for x in answers]
        assert not any(missing(i, n) for i, n in enumerate(nodes))

        # round 2: c is silent; a and b wait for it until their deadline
        list(pool.map(lambda i: publish(nodes[i], [f"r2-{i}"], 2), range(2)))
        answers = list(pool.map(lambda i: gather(i, nodes[i], SHORT, 2), range(2)))
        assert all(x["elapsed"] >= SHORT - 0.05 for x in answers), [x["elapsed"] for x in answers]
        assert not missing(0, a) & {g for g, p in published.items() if p["by"] == b.peer_id}  # b's came in

        # two deadlines later c is no longer live: round 3 of a and b ends without it
        time.sleep(2 * SHORT)
        list(pool.map(lambda i: publish(nodes[i], [f"r3-{i}"], 3), range(2)))
        answers = list(pool.map(lambda i: gather(i, nodes[i], SHORT, 3), range(2)))
        assert all(x["elapsed"] < SHORT - 1.0 for x in answers), [x["elapsed"] for x in answers]

    for i, node in enumerate(nodes):
        counters = node.counters()
        assert counters["pointers_read"] == 0, counters  # every group so far came on the topic
        assert counters["pointers_gossiped"] == len([g for g, p in published.items() if p["by"] != node.peer_id])
        assert counters["gathers_complete"] >= 1
        # no honest peer sent anything it signed wrong; a fetch that broke under load was retried (every body came)
        assert set(counters["faults"]) <= RETRIED, counters["faults"]

    # a late node without gossip: the DHT gives it everything published before it came
    late = swarm.node(cfg.replace(gossip={"enabled": False})).joined()
    stop_at = time.monotonic() + 60.0
    while missing(3, late) and time.monotonic() < stop_at:
        gather(3, late, 1.0)
    assert not missing(3, late) and len(received[3]) == len(published) == 13
    publish(late, ["late-0"], 1)  # and its group reaches the others through their DHT reads
    stop_at = time.monotonic() + 3 * DHT_EVERY
    while missing(0, a) and time.monotonic() < stop_at:
        gather(0, a, 1.0)
    assert not missing(0, a)
    assert a.counters()["pointers_read"] == 1 and late.counters()["gossip_received"] == 0
