"""A hostile peer with its validators off, in its own process: nothing it forges is accepted.

Raw record stores (overwrites of an honest subkey, forged signatures, replays with a
changed expiry or under another key, its own record under the victim's key, far-future
expiries, oversize, malformed and schema-breaking records, whole dictionaries) are refused
by every honest peer, the honest record stays byte-identical everywhere, and a node that
joins afterwards still reads it. Pointers that are validly signed but lead to bad bodies
(wrong hash, wrong size, garbage, another sender, another tokenizer, stale, too big, never
served) are each rejected and counted under their reason, one of another run is refused
at store time, and the hostile peer gets no more than its per-gather cap.
"""

from __future__ import annotations

import base64
import time

import pytest

from ftis_swarm.wire import content_id

pytestmark = [pytest.mark.net, pytest.mark.slow]

CAP = 3
TTL, SKEW = 60.0, 5.0
EXPECTED_REJECTIONS = {
    "hash_mismatch": 1, "size_mismatch": 1, "malformed": 2, "sender_mismatch": 2, "pointer_mismatch": 2,
    "tokenizer": 1, "stale": 1, "future": 1, "oversize": 1, "fetch_failed": 1,
}


def gather_until(node, want: int, *, limit: float = 40.0) -> list[list[str]]:
    """Group ids of each gather (1 s deadline) until `want` groups came or `limit` passed."""
    gathers: list[list[str]] = []
    stop_at = time.monotonic() + limit
    while sum(map(len, gathers)) < want and time.monotonic() < stop_at:
        gathers.append([content_id(body) for body in node.gather(1.0)["bodies"]])
    return gathers


def rejections_settled(node, peer: str, *, limit: float = 30.0) -> dict:
    """The node's rejections of `peer` once they stop changing: an absent body is rejected only after its
    retries (`max_fetch_attempts`, each after a back-off), which may end after every good group is in."""
    stop_at = time.monotonic() + limit
    while True:
        seen = node.counters()["rejected_by_peer"]
        if seen.get(peer) == EXPECTED_REJECTIONS or time.monotonic() > stop_at:
            return seen
        time.sleep(0.5)


def test_hostile_records_and_bodies_are_refused(swarm):
    peers = swarm.bootstrap(ttl=TTL, max_clock_skew=SKEW)
    cfg = dict(run_id="hostile", peers=peers, ttl=TTL, max_clock_skew=SKEW, max_groups_per_peer_per_gather=CAP)
    honest = swarm.node(swarm.config(**cfg))
    hostile = swarm.hostile(peers, swarm.config(**cfg), identities=1)
    honest.joined()
    hostile_id = hostile.peer_id

    [victim] = honest.publish(["victim-item"])
    assert victim["ok"]
    attack = hostile.request({"op": "attack_records", "victim": honest.peer_id, "group_id": victim["group_id"]})
    assert set(attack["asked"]) >= {honest.peer_id}  # the bootstrap and the honest node
    assert len(attack["asked"]) == 2
    answers = attack["answers"]
    assert answers.pop("valid_control") == [[True]] * 2  # the same peers take a well-formed record
    assert len(answers) == 15
    for name, per_peer in answers.items():
        assert len(per_peer) == 2 and all(a is None or a == [False] for a in per_peer), (name, per_peer)

    held = hostile.request({"op": "inspect", "key": attack["key"], "group_id": victim["group_id"]})
    assert len(held) == 2
    originals = {tuple(v["honest"]) for v in held.values()}
    assert len(originals) == 1 and None not in originals  # unchanged, same value and expiry everywhere
    assert all(v["invalid"] == 0 and v["records"] == 1 for v in held.values()), held

    bad = hostile.request({"op": "publish_bad", "victim": honest.peer_id,
                           "victim_body": base64.b64encode(victim["body"]).decode(), "cap": CAP})
    assert bad["stored"].pop("another_run") == [[False]] * 2  # under this run's key: `unbound_key`
    assert all(per_peer == [[True]] * 2 for per_peer in bad["stored"].values()), bad["stored"]
    good = set(bad["good"])

    late = swarm.node(swarm.config(**cfg)).joined()  # reads through a DHT where the hostile peer serves forgeries
    gathers = gather_until(late, 1 + len(good))
    received = [gid for gids in gathers for gid in gids]
    assert sorted(received) == sorted(good | {victim["group_id"]})  # each once, the honest group included
    assert max(len(set(gids) & good) for gids in gathers) <= CAP  # the hostile peer's cap per gather
    assert late.gather(1.0)["bodies"] == []

    assert rejections_settled(late, hostile_id) == {hostile_id: EXPECTED_REJECTIONS}
    counters = late.counters()
    assert counters["gathered"] == 1 + len(good)
    assert counters["deferred"] >= len(good) - CAP  # held back for a later gather, not dropped
    # the honest node, up all along, gets the same: the good groups, CAP per gather, and the same rejections
    gathers = gather_until(honest, len(good))
    assert sorted(gid for gids in gathers for gid in gids) == sorted(good)
    assert len(gathers[0]) == CAP  # its inbox filled up while it was not gathering
    assert rejections_settled(honest, hostile_id) == {hostile_id: EXPECTED_REJECTIONS}
