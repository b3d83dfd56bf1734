"""A budget on a real testnet: a node fetches only what its update takes, and a group not chosen costs nothing.

A bootstrap peer and three nodes; two publish a round of four groups (256 completion tokens
each) as one pointer, the third has room for three groups and two per peer, all of it the
strangers' share. Its gather
takes one group of each stranger in turn: exactly three bodies, never more than two of one
publisher, the other five not fetched and not charged; they stay on offer for the next
gather, which takes three more, and then the two left end, never offered again. Each group's
publish-to-visible comes in legs (`fetch.legs`) that add up to it, as `bench scale` sums them.
"""

from __future__ import annotations

import time

import pytest

from ftis_swarm.lab.bench.scale_legs import leg_spans
from ftis_swarm.wire import content_id, decode_group

pytestmark = [pytest.mark.net, pytest.mark.slow]


def test_a_gather_with_a_budget_fetches_only_what_the_update_takes(swarm):
    peers = swarm.bootstrap(ttl=120.0, max_clock_skew=5.0)
    cfg = swarm.config(run_id="budget", peers=peers)
    reader, b, c = nodes = [swarm.node(cfg) for _ in range(3)]
    for node in nodes:
        node.joined()
    reader.budget(max_groups=8, max_groups_per_peer=8, max_tokens=768, max_tokens_per_peer=512,
                  strangers_share=1.0)  # no earned peer here: the whole budget is the strangers' share
    published, started = {}, {}
    for node in (b, c):
        answers = node.publish([f"{node.peer_id}-{i}" for i in range(4)], round=0)
        assert all(a["ok"] and a["gossiped"] and a["replicas"] >= 1 for a in answers), answers  # handed, stored
        published.update({a["group_id"]: (node.peer_id, a["body"]) for a in answers})
        started.update({a["group_id"]: a["started"] for a in answers})
    assert {decode_group(body).num_completion_tokens for _, body in published.values()} == {256}
    stop_at = time.monotonic() + 30.0
    while reader.counters()["pointers_gossiped"] + reader.counters()["pointers_read"] < 8:
        assert time.monotonic() < stop_at, reader.counters()
        time.sleep(0.2)

    answer = reader.gather(10.0, round=0)
    got = [content_id(body) for body in answer["bodies"]]
    assert len(got) == 3 and set(got) <= published.keys()
    assert sorted([published[g][0] for g in got].count(p) for p in (b.peer_id, c.peer_id)) == [1, 2]
    assert all(body == published[content_id(body)][1] for body in answer["bodies"])  # bit for bit
    assert answer["elapsed"] < 5.0  # no earned peer to wait for: it ends once the chosen bodies are in
    assert sorted(answer["legs"]) == sorted(got)
    for group_id, legs in answer["legs"].items():
        times = [started[group_id], *legs.values()]  # publish start, seen, chosen, started, began, received, accepted
        assert times == sorted(times), legs
        assert legs["accepted"] == answer["arrivals"][group_id]
        assert legs["chosen"] > legs["seen"]  # strangers are chosen when the gather opens, not on arrival
        spans = leg_spans(started[group_id], legs)
        assert sum(spans.values()) == pytest.approx(legs["accepted"] - started[group_id], abs=1e-6)
    counters = reader.counters()
    assert (counters["chosen"], counters["fetched_bodies"], counters["not_chosen"]) == (3, 3, 0)  # five carried
    assert counters["fetched_bytes"] == sum(len(published[g][1]) for g in got)
    assert counters["rejected"] == {} and counters["faults"] == {}  # left out is not charged
    stop_at = time.monotonic() + 30.0  # without a budget: each fetches the other's four (in the background)
    while min(node.counters()["fetched_bodies"] for node in (b, c)) < 4 and time.monotonic() < stop_at:
        time.sleep(0.2)
    others = [node.counters() for node in (b, c)]
    assert [o["fetched_bodies"] for o in others] == [4, 4]
    served = sum(o["served_bytes"] for o in others)
    assert served == counters["fetched_bytes"] + sum(o["fetched_bytes"] for o in others)  # the five never left

    again = [content_id(body) for body in reader.gather(10.0, round=1)["bodies"]]  # the five, carried: three more
    assert len(again) == 3 and set(again) <= published.keys() - set(got)
    assert sorted([published[g][0] for g in again].count(p) for p in (b.peer_id, c.peer_id)) == [1, 2]
    assert reader.counters()["not_chosen"] == 2  # the two left end with their second gather
    assert reader.gather(1.0, round=2)["bodies"] == []  # nothing new; none is offered again
    assert reader.counters()["not_chosen"] == 2
