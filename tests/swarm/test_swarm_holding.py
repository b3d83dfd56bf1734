"""Holders on real daemons: a departed publisher's groups and a capped publisher's groups still reach every peer."""

from __future__ import annotations

import time

import pytest

from ftis_swarm.wire import content_id

pytestmark = [pytest.mark.net, pytest.mark.slow]

HAVE_EVERY = 0.5
SLOW_HAVES = 16.0


def _gather_until(node, wanted: set[str], *, seconds: float) -> dict[str, bytes]:
    got: dict[str, bytes] = {}
    stop_at = time.monotonic() + seconds
    while not wanted <= got.keys() and time.monotonic() < stop_at:
        got.update({content_id(body): body for body in node.gather(1.0)["bodies"]})
    return got


def _wait_for(node, counter: str, at_least: int, *, seconds: float) -> int:
    stop_at = time.monotonic() + seconds
    while (n := node.counters()[counter]) < at_least and time.monotonic() < stop_at:
        time.sleep(0.2)
    return n


def test_a_departed_publishers_groups_reach_a_peer_that_gave_up_on_it_before_a_have_came(swarm):
    """The late peer rejects the gone publisher's pointers at its first failed dial (one attempt, no holder
    known yet); the holder's next have, SLOW_HAVES later, revives them and the holder serves them."""
    peers = swarm.bootstrap(ttl=120.0, max_clock_skew=5.0)
    publisher = swarm.node(swarm.config(run_id="departed", peers=peers)).joined()
    # haves looked for every SLOW_HAVES / 4 s, repeated every SLOW_HAVES s: the late peer's dial fails in between
    holder = swarm.node(swarm.config(run_id="departed", peers=peers, have_interval=SLOW_HAVES)).joined()
    groups = {a["group_id"]: a["body"] for a in publisher.publish(["q1", "q2"], tokens=200)}
    assert len(groups) == 2
    assert _gather_until(holder, set(groups), seconds=30.0) == groups
    assert all(a["ok"] for a in holder.publish(["own"]))  # a run member: the late peer dials it for the topic
    assert _wait_for(holder, "haves_sent", 1, seconds=SLOW_HAVES) == 1  # its first have: the next one is far
    publisher.kill()  # SIGKILL, node and p2pd: from now on only the holder has the bodies
    late = swarm.node(swarm.config(run_id="departed", peers=peers, max_fetch_attempts=1)).joined()
    got = _gather_until(late, set(groups), seconds=2 * SLOW_HAVES + 10.0)
    assert {gid: got.get(gid) for gid in groups} == groups  # bit for bit, from the holder
    counts, served = late.counters(), holder.counters()
    assert counts["rejected"] == {"fetch_failed": 2}, counts["rejected"]  # given up on first: no source then
    assert counts["pointers_revived"] == 2 and counts["haves_received"] >= 1
    assert counts["fetched_from_holders"] == 2
    assert served["held_served_bytes"] >= sum(len(b) for b in groups.values())


def test_a_capped_publisher_uploads_about_one_copy_and_every_peer_gets_it(swarm):
    """Three peers want one group of a publisher that may send one body a minute: holders serve the rest."""
    peers = swarm.bootstrap(ttl=120.0, max_clock_skew=5.0)
    # one own body a minute: what it serves is its cap plus one body at most
    publisher = swarm.node(swarm.config(run_id="capped", peers=peers, upload_bytes_per_window=1024,
                                        upload_window=60.0))
    fetchers = [swarm.node(swarm.config(run_id="capped", peers=peers, have_interval=HAVE_EVERY)) for _ in range(3)]
    for node in [publisher, *fetchers]:  # started together: the start, not the exchange, is what takes long
        node.joined()
    answer = publisher.publish(["wanted"], tokens=200)[0]
    assert answer["ok"], answer
    body = answer["body"]
    assert len(body) > 1024
    got = [_gather_until(node, {answer["group_id"]}, seconds=40.0) for node in fetchers]
    assert got == [{answer["group_id"]: body}] * 3  # every peer, bit for bit
    served = publisher.counters()["served_bytes"]
    assert len(body) <= served <= 2 * len(body), (served, len(body))  # not 3 copies: bounded by the cap
    from_holders = sum(node.counters()["fetched_from_holders"] for node in fetchers)
    assert from_holders >= 2, from_holders
