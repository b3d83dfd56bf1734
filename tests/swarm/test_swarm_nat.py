"""Home nodes behind real NAT (tests/helpers/nat_support.py) exchange groups with each other.

The topology is ftis_swarm/lab/bench/nat_testbed.py's: the bootstrap and a public node on
a public segment, two home nodes each behind its own MASQUERADE router (one with
--random-fully, one with a rate-limited uplink). Nobody can dial a home node; two home
nodes reach each other only through a relay on the bootstrap, or over a connection one of
them opened. The first test adds the control home3, whose router forwards its port.
"""

from __future__ import annotations

import time

import pytest
from nat_support import nat_testbed

from ftis_swarm.wire import content_id

pytestmark = [pytest.mark.net, pytest.mark.slow]

FETCH_DEADLINE = 30.0
FORWARDED_PORT = 31338


def _gather_until(node, expected: dict[str, bytes], *, seconds: float) -> dict[str, bytes]:
    received: dict[str, bytes] = {}
    stop_at = time.monotonic() + seconds
    while not expected.keys() <= received.keys() and time.monotonic() < stop_at:
        for body in node.gather(1.0)["bodies"]:
            received[content_id(body)] = body
    return received


def _forwarded(bed) -> dict:
    """home3's settings: it listens on the port its router forwards, and announces the router's address."""
    return dict(port=FORWARDED_PORT, announce=[f"/ip4/{bed.public_addr('home3')}/tcp/{FORWARDED_PORT}"])


def test_auto_finds_home_nodes_behind_nat_and_they_fetch_each_others_groups_through_the_relay(swarm) -> None:
    """home3 is the control: behind NAT too, but its router forwards its port, so `auto` must find it public."""
    with nat_testbed(forward_port=FORWARDED_PORT) as bed:
        peers = swarm.bootstrap(ttl=120.0, max_clock_skew=5.0, host=bed.addr("boot"),
                                prefix=tuple(bed.wrap("boot", [])))
        roles = ("pub", "home1", "home2", "home3")  # each in auto: it asks the bootstrap to dial it back
        started = time.monotonic()
        nodes = {role: swarm.node(swarm.config(run_id="nat", peers=peers, host=bed.addr(role), relay_wait=60.0,
                                               **(_forwarded(bed) if role == "home3" else {})),
                                  prefix=tuple(bed.wrap(role, []))) for role in roles}
        for node in nodes.values():
            node.joined()
        published = {}
        for role, node in nodes.items():
            results = node.publish([f"{role}-a", f"{role}-b"])
            assert all(r["ok"] for r in results), results
            published[role] = {r["group_id"]: r["body"] for r in results}
        for role, node in nodes.items():
            expected = {gid: body for other, bodies in published.items() if other != role
                        for gid, body in bodies.items()}
            received = _gather_until(node, expected, seconds=FETCH_DEADLINE)
            assert received == expected, (role, node.counters(), node.tail())
        print(f"all groups crossed {time.monotonic() - started:.1f} s after the nodes started")
        # home1 reaches home2 through the relay only: no hole punch on this testbed (lab/bench/reach_punch.py)
        to_home2 = nodes["home1"].connections()[nodes["home2"].peer_id]
        assert to_home2 and all("/p2p-circuit" in m for m in to_home2), to_home2
        paths = nodes["home1"].counters()["reach"]["peers"]
        assert paths["relayed"] >= 1 and paths["direct"] >= 2, paths  # home2; the bootstrap and pub at least
        for role, mode in {"pub": "public", "home1": "relayed", "home2": "relayed", "home3": "public"}.items():
            first_lines = nodes[role].tail(None)
            assert "peers dialed back port" in first_lines and f"starting {mode}" in first_lines, first_lines
            assert f"reachability {mode} (" in first_lines, first_lines
            reach = nodes[role].counters()["reach"]
            assert (reach["configured"], reach["mode"], reach["decided_by"]) == ("auto", mode, "dial-back"), reach


def test_a_home_node_without_a_relay_slot_is_fetched_by_public_peers_and_said_plainly_by_homes(swarm) -> None:
    """No node holds others' bodies here (`hold_bytes` 0): the publisher is the only source, as
    without holders (tests/swarm/test_swarm_holding.py has a holder serve a publisher's groups)."""
    with nat_testbed() as bed:
        peers = swarm.bootstrap(ttl=120.0, max_clock_skew=5.0, host=bed.addr("boot"),
                                prefix=tuple(bed.wrap("boot", [])))
        roles = {"pub": "public", "home1": "relayed", "home2": "client"}
        nodes = {role: swarm.node(swarm.config(run_id="nat", peers=peers, host=bed.addr(role), reachability=mode,
                                               relay_wait=60.0, max_fetch_attempts=2, hold_bytes=0),
                                  prefix=tuple(bed.wrap(role, []))) for role, mode in roles.items()}
        for node in nodes.values():
            node.joined()
        results = nodes["home2"].publish(["home2-a", "home2-b"])
        assert all(r["ok"] for r in results), results
        expected = {r["group_id"]: r["body"] for r in results}
        # the public node streams them back over the connection home2 opened to it
        assert _gather_until(nodes["pub"], expected, seconds=FETCH_DEADLINE) == expected
        # the other home node cannot: it says so in a WARNING and a counter, and gets nothing
        stop_at = time.monotonic() + FETCH_DEADLINE
        while nodes["home1"].counters()["publishers_unreachable"] == 0 and time.monotonic() < stop_at:
            assert nodes["home1"].gather(1.0)["bodies"] == []
        counters = nodes["home1"].counters()
        assert counters["publishers_unreachable"] == 1, counters  # once, not once per group
        # both groups refused after their failed fetches (a dial that a loaded loop times out ends `stalled`)
        assert counters["rejected"].get("fetch_failed", 0) + counters["rejected"].get("stalled", 0) == 2, counters
        warnings = [line for line in nodes["home1"].tail(None).splitlines()
                    if " WARN" in line and "cannot fetch the groups of" in line]
        assert warnings and nodes["home2"].peer_id in warnings[0], nodes["home1"].tail()


SWITCH_BOUND = 40.0
"""Seconds from closing home3's port to it running relayed: 2 rechecks 2 s apart (each up to 3 dial
timeouts), the restart and its relay slot, with room for a loaded machine."""


def _publish_until_mode(node, mode: str, *, round: int) -> tuple[float, int]:
    """Publishes a round every 0.5 s (each publish first switches if one is due) until `node` runs `mode`,
    at most `SWITCH_BOUND` s; (seconds it took, the next round)."""
    started = time.monotonic()
    while time.monotonic() - started < SWITCH_BOUND:
        node.publish([f"while-{round}"], round=round)
        round += 1
        if node.counters()["reach"]["mode"] == mode:
            break
        time.sleep(0.5)
    return time.monotonic() - started, round


def _seconds_dark(log: str, mode: str) -> float:
    return float(log.split(f"reachability {mode} after ")[-1].split(" s without serving")[0])


def test_a_public_home_whose_port_closes_switches_to_relayed_and_the_other_home_still_gets_its_groups(swarm) -> None:
    """And back: once the port opens again it switches to public, and its groups still cross."""
    with nat_testbed(forward_port=FORWARDED_PORT) as bed:
        peers = swarm.bootstrap(ttl=120.0, max_clock_skew=5.0, host=bed.addr("boot"),
                                prefix=tuple(bed.wrap("boot", [])))
        home3 = swarm.node(swarm.config(run_id="nat", peers=peers, host=bed.addr("home3"), relay_wait=30.0,
                                        reach_recheck_every=2.0, reach_switch_after=2, **_forwarded(bed)),
                           prefix=tuple(bed.wrap("home3", [])))
        home1 = swarm.node(swarm.config(run_id="nat", peers=peers, host=bed.addr("home1"), reachability="relayed",
                                        relay_wait=30.0), prefix=tuple(bed.wrap("home1", [])))
        home3.joined(), home1.joined()
        assert home3.counters()["reach"]["mode"] == "public"
        before = {r["group_id"]: r["body"] for r in home3.publish(["before-a", "before-b"], round=0)}
        assert _gather_until(home1, before, seconds=FETCH_DEADLINE) == before

        bed.close_forward("home3")
        switched, round = _publish_until_mode(home3, "relayed", round=1)
        counters = home3.counters()
        reach = counters["reach"]
        assert (reach["configured"], reach["mode"], reach["decided_by"]) == ("auto", "relayed", "dial-back recheck"), \
            (reach, home3.tail())
        assert (reach["switches"], reach["switch_failures"], counters["reach_switches"],
                counters["reach_switch_failed"]) == (1, 0, 1, 0), counters
        assert reach["switched_at"] is not None and reach["dialable"] == "no", reach
        log = home3.tail(None)
        assert "reachability auto: 2 rechecks disagree; switching from public to relayed" in log, log[-3000:]
        assert "reserved a relay slot" in log.split("switching from public to relayed")[1], log[-3000:]
        visible = _crosses(home3, home1, round=round)
        print(f"home3 switched to relayed {switched:.1f} s after its port closed, "
              f"{_seconds_dark(log, 'relayed'):.1f} s without serving; its next round at home1 in {visible:.2f} s")

        bed.open_forward("home3")
        switched, round = _publish_until_mode(home3, "public", round=round + 1)
        counters = home3.counters()
        reach = counters["reach"]
        assert (reach["mode"], reach["switches"], reach["dialable"], counters["reach_switches"]) == (
            "public", 2, "yes", 2), (reach, home3.tail())
        log = home3.tail(None)
        assert "reachability auto: 2 rechecks disagree; switching from relayed to public" in log, log[-3000:]
        visible = _crosses(home3, home1, round=round)
        print(f"home3 switched back to public {switched:.1f} s after its port opened, "
              f"{_seconds_dark(log, 'public'):.1f} s without serving; its next round at home1 in {visible:.2f} s")


def _crosses(publisher, consumer, *, round: int) -> float:
    """A round `publisher` publishes now reaches `consumer`, bit for bit; seconds from the publish to the
    last group's acceptance there."""
    results = publisher.publish([f"after-{round}-a", f"after-{round}-b"], round=round)
    assert all(r["ok"] for r in results), results
    sent = {r["group_id"]: r["body"] for r in results}
    received, arrivals = {}, {}
    stop_at = time.monotonic() + FETCH_DEADLINE
    while not sent.keys() <= received.keys() and time.monotonic() < stop_at:
        got = consumer.gather(0.5)
        received.update({content_id(body): body for body in got["bodies"]})
        arrivals.update(got["arrivals"])
    assert sent.keys() <= received.keys(), (consumer.counters(), consumer.tail(), publisher.tail())
    assert all(received[gid] == body for gid, body in sent.items())
    return max(arrivals[gid] for gid in sent) - results[0]["started"]
