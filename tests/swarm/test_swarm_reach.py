"""Reach modes as p2pd flags and config, and what a node on loopback says of its own reach (the NAT
behaviour itself: test_swarm_nat.py)."""

from __future__ import annotations

import socket
import time

import pytest
from hivemind.p2p import P2P
from pydantic import ValidationError

from ftis_swarm.config import SwarmConfig
from ftis_swarm.swarm import reach
from ftis_swarm.swarm.dialback import Reachability
from ftis_swarm.swarm.gossip.pubsub import PUBSUB_FLAGS, PubsubP2P

LIMITS = dict(relay_service=True, max_circuits=3, max_reservations=7, data_limit=65536, time_limit=90.0)


def test_public_nodes_relay_within_their_limits_and_homes_relay_nothing() -> None:
    assert reach.daemon_flags("public", **LIMITS) == [
        "-relayService=1", "-relayMaxCircuits=3", "-relayMaxReservations=7", "-relayDataLimit=65536",
        "-relayTimeLimit=90s"]
    assert reach.daemon_flags("public", **{**LIMITS, "relay_service": False}) == ["-relayService=0"]
    assert reach.daemon_flags("relayed", **LIMITS) == ["-relayService=0", "-relayDiscovery=0",
                                                       "-forceReachabilityPrivate=1"]
    assert reach.daemon_flags("client", **LIMITS) == ["-relayService=0"]
    assert [reach.dht_is_server(m) for m in ("public", "relayed", "client")] == [True, False, False]


def test_the_flags_follow_hivemind_and_gossip_flags_on_the_command_line() -> None:
    cls = reach.with_flags(PubsubP2P, ["-relayDiscovery=0"])
    args = cls._make_process_args("p2pd", relay=True)
    assert args == ["p2pd", "-relay=1", *PUBSUB_FLAGS, "-relayDiscovery=0"]
    assert issubclass(cls, PubsubP2P) and reach.with_flags(P2P, []) is P2P


def test_auto_resolves_from_client_mode_and_a_contradiction_is_one_sentence() -> None:
    assert SwarmConfig().reach_mode == "public"
    assert SwarmConfig(client_mode=True).reach_mode == "relayed"
    assert SwarmConfig(client_mode=True, reachability="client").reach_mode == "client"
    with pytest.raises(ValidationError, match="client_mode accepts no incoming connections, so reachability"):
        SwarmConfig(client_mode=True, reachability="public")
    with pytest.raises(ValidationError, match="reachability"):
        SwarmConfig(reachability="sometimes")


def _closed_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _reach_after_check(node, *, seconds: float = 30.0) -> dict:
    stop_at = time.monotonic() + seconds
    while (reach := node.counters()["reach"])["checked"] is None and time.monotonic() < stop_at:
        time.sleep(0.2)
    return reach


@pytest.mark.net
@pytest.mark.slow
def test_each_node_says_the_mode_it_runs_in_how_it_was_decided_and_whether_peers_dialed_it(swarm) -> None:
    peers = swarm.bootstrap(ttl=120.0, max_clock_skew=5.0)
    dialable = swarm.node(swarm.config(run_id="reach", peers=peers)).joined()  # auto: the bootstrap dials it back
    host = swarm.host()  # auto, but its announced port is closed: nobody can dial it
    closed = _closed_port(host)
    hidden = swarm.node(swarm.config(run_id="reach", peers=peers, host=host, relay_wait=0.0,
                                     announce=[f"/ip4/{host}/tcp/{closed}"])).joined()
    told = swarm.node(swarm.config(run_id="reach", peers=peers, reachability="public")).joined()

    reach = dialable.counters()["reach"]
    port = int(dialable.maddrs[0].split("/tcp/")[1].split("/")[0])
    assert {k: reach[k] for k in ("configured", "mode", "decided_by", "dialable")} == {
        "configured": "auto", "mode": "public", "decided_by": "dial-back", "dialable": "yes"}, reach
    assert reach["dialback"] == {"asked": 1, "answered": 1, "reached": 1, "port": port} and reach["checks"] == 1, reach
    reach = hidden.counters()["reach"]
    assert (reach["mode"], reach["decided_by"], reach["dialable"]) == ("relayed", "dial-back", "no"), reach
    assert reach["dialback"] == {"asked": 1, "answered": 1, "reached": 0, "port": closed}, reach
    reach = _reach_after_check(told)  # a configured mode is checked too, once the node runs
    assert (reach["mode"], reach["decided_by"], reach["dialable"]) == ("public", "configured", "yes"), reach
    told_port = int(told.maddrs[0].split("/tcp/")[1].split("/")[0])
    asked = reach["dialback"]["asked"]  # the bootstrap, and the public nodes its DHT knows by then
    assert 1 <= asked <= 2 and reach["dialback"] == {"asked": asked, "answered": asked, "reached": asked,
                                                      "port": told_port}, reach


def test_a_check_that_no_peer_answered_leaves_dialable_unknown() -> None:
    reach = Reachability(configured="public", mode="public", decided_by="configured")
    assert reach.snapshot()["dialable"] == "unknown" and reach.snapshot()["checked"] is None
    assert reach.record_check(asked=3, answered=2, reached=0, port=4001) == "no"
    assert reach.mismatch and reach.snapshot()["mismatch"]  # public, and nobody could dial it
    assert reach.record_check(asked=3, answered=0, reached=0, port=4001) == "unknown"
    assert not reach.mismatch  # no answer contradicts nothing
    assert reach.record_check(asked=3, answered=3, reached=1, port=4001) == "yes"
    assert not reach.mismatch
    assert reach.snapshot()["checks"] == 3 and reach.snapshot()["dialback"]["answered"] == 3
