"""Reach modes as p2pd flags and config (the NAT behaviour itself: test_swarm_nat.py)."""

from __future__ import annotations

import pytest
from hivemind.p2p import P2P
from pydantic import ValidationError

from ftis_swarm.config import SwarmConfig
from ftis_swarm.swarm import reach
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
