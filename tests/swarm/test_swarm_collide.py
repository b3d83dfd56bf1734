"""A pointer that names another publisher's group id ends no node (issue 38's remote crash), on real daemons.

A bootstrap, an honest publisher, a reader with a budget of one group a gather, and a hostile
peer that signs one round pointer of its own naming the honest publisher's two groups (their
ids and hashes: it serves the honest bodies, whose sender is the honest publisher). Before
the fix `Selection` raised `KeyError` (offers were kept per publisher, their gathers and
tiers by group id alone): here in the stream that settled the copier's refused body and in
every poll after it, so the reader gathered nothing; in `ftis-node join` the same raise
came out of a gather and ended the node. Now both
publishers' offers are offers of their own: the reader gathers on, takes each honest group
once, bit for bit, never charges the honest publisher, and charges the copier only what
its bodies prove (`sender_mismatch`: the body names another sender).
"""

from __future__ import annotations

import base64
import time

import pytest

from ftis_swarm.wire import content_id

pytestmark = [pytest.mark.net, pytest.mark.slow]


def test_a_pointer_naming_another_publishers_group_id_ends_no_node(swarm):
    peers = swarm.bootstrap(ttl=120.0, max_clock_skew=5.0)
    cfg = swarm.config(run_id="collide", peers=peers)
    reader, honest = swarm.node(cfg), swarm.node(cfg)
    reader.joined()
    honest.joined()
    hostile = swarm.hostile(peers, cfg, identities=1)
    reader.budget(max_groups=1, max_groups_per_peer=1, max_tokens=256, max_tokens_per_peer=256,
                  strangers_share=1.0)  # one group (4 x 64 tokens) a gather

    answers = honest.publish(["a", "b"], tokens=64)
    assert all(a["ok"] for a in answers), answers
    bodies = {a["group_id"]: a["body"] for a in answers}
    copied = hostile.request({"op": "publish_groups",
                              "bodies": [base64.b64encode(b).decode() for b in bodies.values()]})
    assert sorted(copied["group_ids"]) == sorted(bodies)  # the same ids, under the hostile peer's pointer
    stop_at = time.monotonic() + 30.0
    while (lambda c: c["pointers_gossiped"] + c["pointers_read"])(reader.counters()) < 4:
        assert time.monotonic() < stop_at, reader.counters()
        time.sleep(0.2)

    got: list[str] = []
    for r in range(6):  # one group a gather: offers are chosen, carried and dropped across gathers
        answer = reader.gather(2.0, round=r)
        assert reader.popen.poll() is None, reader.tail()
        got += [content_id(body) for body in answer["bodies"]]
        for body in answer["bodies"]:
            assert body == bodies[content_id(body)]  # the honest bytes
    assert sorted(got) == sorted(bodies)  # each honest group once, whoever's pointer brought it first
    counters = reader.counters()
    rejected = counters["rejected_by_peer"]
    assert honest.peer_id not in rejected, rejected  # the genuine publisher is never charged
    assert set(rejected.get(hostile.peer_id, {})) <= {"sender_mismatch"}, rejected
    assert counters["faults"] == {}  # nothing else charged to anyone
