"""Churn: one of four nodes is SIGKILLed mid-exchange; the others keep publishing and gathering on time."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from ftis_swarm.wire import content_id

pytestmark = [pytest.mark.net, pytest.mark.slow]

DEADLINE = 2.0


def test_sigkill_one_of_four_mid_exchange(swarm):
    peers = swarm.bootstrap(ttl=120.0, max_clock_skew=5.0)
    nodes = [swarm.node(swarm.config(run_id="churn", peers=peers)) for _ in range(4)]
    for node in nodes:
        node.joined()
    victim, survivors = nodes[3], nodes[:3]
    published: dict[int, dict[str, bytes]] = {i: {} for i in range(4)}
    received: dict[int, dict[str, bytes]] = {i: {} for i in range(3)}
    elapsed: list[float] = []

    def publish(i: int, rnd: int) -> None:
        results = nodes[i].publish([f"round{rnd}-node{i}"])
        assert all(r["ok"] and r["replicas"] >= 1 for r in results), results
        published[i].update({r["group_id"]: r["body"] for r in results})

    def gather(i: int) -> None:
        started = time.monotonic()
        answer = nodes[i].gather(DEADLINE)
        elapsed.append(answer["elapsed"])
        assert time.monotonic() - started < DEADLINE + 5.0  # the request itself, transport included
        for body in answer["bodies"]:
            assert content_id(body) not in received[i]
            received[i][content_id(body)] = body

    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(lambda i: publish(i, 0), range(4)))
        list(pool.map(gather, range(3)))
        exchanges = [pool.submit(lambda i: (publish(i, 1), gather(i)), i) for i in range(3)]
        publish(3, 1)
        victim.kill()  # SIGKILL (node and p2pd) right after it announced a group, while the others exchange
        for future in exchanges:
            future.result()
        for rnd in (2, 3):
            list(pool.map(lambda i: publish(i, rnd), range(3)))
            list(pool.map(gather, range(3)))

    stop_at = time.monotonic() + 30.0
    for i in range(3):
        wanted = {gid for j in range(3) if j != i for gid in published[j]}
        while not wanted <= received[i].keys() and time.monotonic() < stop_at:
            gather(i)
    assert max(elapsed) < DEADLINE + 1.0, elapsed
    for i in range(3):
        from_survivors = {gid: body for j in range(3) if j != i for gid, body in published[j].items()}
        assert len(from_survivors) == 8
        assert {gid: received[i][gid] for gid in from_survivors if gid in received[i]} == from_survivors
        rest = {gid: body for gid, body in received[i].items() if gid not in from_survivors}
        assert rest.items() <= published[3].items()  # the dead node's groups, if any came: bit for bit
        assert not received[i].keys() & published[i].keys()
    assert published[3] and len(published[0]) == 4
