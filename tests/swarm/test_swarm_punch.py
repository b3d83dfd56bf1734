"""Two relayed homes punch a hole through their NATs, and bodies then travel over the direct connection.

The testbed variant where it can work (ftis_swarm/lab/bench/reach_punch.py says why the
default one never does): both routers keep the homes' ports (no --random-fully) and drop
unsolicited SYNs instead of resetting them, and five public IPs (boot, pub, pub2 .. pub4)
can see each home's address; libp2p trusts it once four have. p2pd tries the punch when a
relayed connection between the homes opens, and not again while it lives: the test has
the homes exchange only once each is connected to four public IPs.
"""

from __future__ import annotations

import json
import time

import pytest
from nat_support import nat_testbed

from ftis_swarm.lab.bench.reach import iface_bytes
from ftis_swarm.wire import content_id

pytestmark = [pytest.mark.net, pytest.mark.slow]

PUNCH_DEADLINE = 40.0
"""Seconds from the first exchange until the homes hold a direct connection (one DCUtR of 3 tries, each
up to 5 s, after the homes' addresses are confirmed)."""
ATTEMPTS = 3
"""Fresh testbeds the test gives the punch: p2pd tries one DCUtR per relayed connection, and it came
in 3 of 4 runs of `bench reach --phase punch` in this variant (and failed one CI run of this test), so
a miss in all three (about 1 in 64 at that rate) says the punch is broken, not unlucky."""
TOKENS = 4096
"""Tokens per completion: a group of about 130 KiB, far above the DHT traffic of one publish."""


def _public_ips(node) -> set[str]:
    return {m.split("/")[2] for ms in node.connections().values() for m in ms if "/p2p-circuit" not in m}


def _direct(node, other_id: str) -> list[str]:
    return [m for m in node.connections().get(other_id, []) if "/p2p-circuit" not in m]


def _exchange(publisher, consumer, items: list[str], *, round: int) -> int:
    """`publisher`'s groups of `round` reach `consumer` bit for bit; their bytes."""
    sent = {r["group_id"]: r["body"] for r in publisher.publish(items, tokens=TOKENS, round=round)}
    received: dict[str, bytes] = {}
    stop_at = time.monotonic() + 30.0
    while not sent.keys() <= received.keys() and time.monotonic() < stop_at:
        received.update({content_id(b): b for b in consumer.gather(1.0)["bodies"]})
    assert {gid: received.get(gid) for gid in sent} == sent, (consumer.counters(), consumer.tail())
    return sum(len(body) for body in sent.values())


def test_relayed_homes_punch_a_hole_and_fetch_each_others_bodies_directly(swarm) -> None:
    misses = []
    for _ in range(ATTEMPTS):
        with nat_testbed(random_fully=False, extra_public=3, drop_unsolicited=True) as bed:
            missed = _punch_and_fetch(swarm, bed)
            swarm.kill_all()
        if missed is None:
            return
        misses.append(missed)
    raise AssertionError(f"no hole punched in {ATTEMPTS} fresh testbeds: {misses}")


def _punch_and_fetch(swarm, bed) -> object:
    """None once the homes punched a hole and bodies crossed it; what they held when no punch came in time."""
    peers = swarm.bootstrap(ttl=120.0, max_clock_skew=5.0, host=bed.addr("boot"),
                            prefix=tuple(bed.wrap("boot", [])))
    roles = {**{role: "public" for role in bed.public_hosts if role != "boot"}, "home1": "relayed",
             "home2": "relayed"}
    nodes = {role: swarm.node(swarm.config(run_id="punch", peers=peers, host=bed.addr(role), reachability=mode,
                                           relay_wait=60.0), prefix=tuple(bed.wrap(role, [])))
             for role, mode in roles.items()}
    for node in nodes.values():
        node.joined()
    home1, home2 = nodes["home1"], nodes["home2"]
    stop_at = time.monotonic() + 30.0
    while min(len(_public_ips(home1)), len(_public_ips(home2))) < 4 and time.monotonic() < stop_at:
        time.sleep(0.5)
    assert len(_public_ips(home1)) >= 4 and len(_public_ips(home2)) >= 4, (home1.connections(), home2.connections())
    for round, (publisher, consumer) in enumerate([(home1, home2), (home2, home1)]):
        _exchange(publisher, consumer, [f"first-{round}"], round=round)  # through the relay at first
    stop_at = time.monotonic() + PUNCH_DEADLINE
    while not (_direct(home1, home2.peer_id) and _direct(home2, home1.peer_id)) and time.monotonic() < stop_at:
        time.sleep(1.0)
    direct = {"home1": _direct(home1, home2.peer_id), "home2": _direct(home2, home1.peer_id)}
    # each home sees the other at the other's router's address: a hole punched through both NATs
    assert direct == {"home1": [m for m in direct["home1"] if m.startswith(f"/ip4/{bed.router_addr('home2')}/")],
                      "home2": [m for m in direct["home2"] if m.startswith(f"/ip4/{bed.router_addr('home1')}/")]}
    if not (direct["home1"] and direct["home2"]):
        return json.dumps(direct)
    # the counters say it as p2pd does: home2 and the public peers direct, nobody through the relay only
    paths = home1.counters()["reach"]["peers"]
    seen = home1.connections()
    assert paths == {"direct": len(seen), "relayed": 0} and paths["direct"] >= 2, (paths, seen)

    # the next bodies travel over the punched connection: r1 forwards them from r2, the relay carries little
    bed.count_direct("home1", "home2")
    direct_before, relay_before = bed.direct_bytes("home1"), iface_bytes(bed, "boot")
    body_bytes = _exchange(home2, home1, ["after-a", "after-b"], round=2)
    direct_bytes = bed.direct_bytes("home1") - direct_before
    relay_bytes = iface_bytes(bed, "boot") - relay_before
    print(f"bodies {body_bytes} B: {direct_bytes} B forwarded between the routers, {relay_bytes} B at the relay")
    assert direct_bytes >= body_bytes and relay_bytes < body_bytes / 2, (direct_bytes, relay_bytes, body_bytes)
    return None
