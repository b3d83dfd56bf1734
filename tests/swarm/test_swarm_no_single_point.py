"""No single point: a swarm whose bootstrap dies keeps exchanging, and newcomers join through any live peer.

Six nodes join through one bootstrap at once and must form one swarm (every node gathers
every other's group; hivemind#624 saw four peers form two swarms). Then the bootstrap is
SIGKILLed and the six keep exchanging rounds among themselves: the DHT and the gossip mesh
never needed it once the nodes had met. Two newcomers then join without it: one through a
live node's address alone, one with the dead bootstrap listed first in `peers` and a live
node second (several `--peers`, one dead). Both must exchange groups with the six.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from ftis_swarm.wire import content_id

pytestmark = [pytest.mark.net, pytest.mark.slow]

NODES = 6
ROUNDS_AFTER_KILL = 3
DEADLINE = 2.0
SEE_ALL_WITHIN = 30.0


def _publish(node, rnd: int) -> dict[str, bytes]:
    results = node.publish([f"round{rnd}-{node.peer_id}"], round=rnd)
    assert all(r["ok"] for r in results), results
    return {r["group_id"]: r["body"] for r in results}


def _gather_until(node, wanted: dict[str, bytes], *, seconds: float) -> tuple[dict[str, bytes], float]:
    """Bodies gathered until every one of `wanted` is in (or `seconds` passed), and the seconds it took."""
    received: dict[str, bytes] = {}
    started = time.monotonic()
    while not wanted.keys() <= received.keys() and time.monotonic() - started < seconds:
        received.update((content_id(b), b) for b in node.gather(0.5)["bodies"])
    return received, time.monotonic() - started


def _others(sent: list[dict[str, bytes]], i: int) -> dict[str, bytes]:
    """Every group in `sent` but node i's own."""
    return {g: b for j, groups in enumerate(sent) if j != i for g, b in groups.items()}


def _joined_after(node, started: float) -> float:
    node.joined()
    return time.monotonic() - started


def test_six_nodes_form_one_swarm_that_outlives_its_bootstrap_and_admits_newcomers_through_any_peer(swarm):
    peers = swarm.bootstrap(ttl=120.0, max_clock_skew=5.0)
    started = time.monotonic()
    nodes = [swarm.node(swarm.config(run_id="nosingle", peers=peers)) for _ in range(NODES)]  # all at once
    with ThreadPoolExecutor(max_workers=NODES + 2) as pool:
        list(pool.map(lambda node: node.joined(), nodes))
        joined_s = time.monotonic() - started
        first = list(pool.map(lambda node: _publish(node, 0), nodes))
        seen = list(pool.map(lambda i: _gather_until(nodes[i], _others(first, i), seconds=SEE_ALL_WITHIN),
                             range(NODES)))
        for i, (received, _) in enumerate(seen):
            expected = _others(first, i)
            assert {g: received.get(g) for g in expected} == expected, (i, len(received))
        print(f"one swarm of {NODES}: all joined {joined_s:.1f} s after their start, then each saw all others "
              f"within {', '.join(f'{s:.1f}' for _, s in seen)} s of its first publish")

        swarm.bootstrap_proc.kill()  # SIGKILL: the bootstrap and its p2pd
        rounds_with_peers = [0] * NODES
        for rnd in range(1, 1 + ROUNDS_AFTER_KILL):
            sent = list(pool.map(lambda node: _publish(node, rnd), nodes))
            got = list(pool.map(lambda i: _gather_until(nodes[i], _others(sent, i), seconds=4 * DEADLINE),
                                range(NODES)))
            for i, (received, _) in enumerate(got):
                expected = _others(sent, i)
                rounds_with_peers[i] += {g: received.get(g) for g in expected} == expected
        print(f"rounds with every peer's group after the bootstrap died, per node: {rounds_with_peers}")
        assert rounds_with_peers == [ROUNDS_AFTER_KILL] * NODES

        through_peer = swarm.node(swarm.config(run_id="nosingle", peers=nodes[1].maddrs[:1]))
        dead_first = swarm.node(swarm.config(run_id="nosingle", peers=[*peers, *nodes[2].maddrs[:1]]))
        started = time.monotonic()
        newcomers = [through_peer, dead_first]
        newcomer_s = list(pool.map(lambda node: _joined_after(node, started), newcomers))
        everyone = nodes + newcomers
        rnd = 1 + ROUNDS_AFTER_KILL
        sent = list(pool.map(lambda node: _publish(node, rnd), everyone))
        got = list(pool.map(lambda i: _gather_until(everyone[i], _others(sent, i), seconds=SEE_ALL_WITHIN),
                            range(len(everyone))))
    print(f"newcomers joined without the bootstrap in {newcomer_s[0]:.1f} s (through a live node), "
          f"{newcomer_s[1]:.1f} s (the dead bootstrap listed first); "
          f"then each saw all others within {', '.join(f'{s:.1f}' for _, s in got)} s")
    for i, (received, _) in enumerate(got):
        expected = _others(sent, i)
        assert {g: received.get(g) for g in expected} == expected, (i, len(received), everyone[i].tail())
    for node in newcomers:  # a live node answered the dial-back the dead bootstrap could not
        reach = node.counters()["reach"]
        assert (reach["mode"], reach["decided_by"], reach["dialback"]["reached"]) == ("public", "dial-back", 1), reach
