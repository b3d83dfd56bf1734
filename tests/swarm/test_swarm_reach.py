"""Reach modes as p2pd flags and config, and what a node on loopback says of its own reach (the NAT
behaviour itself: test_swarm_nat.py)."""

from __future__ import annotations

import logging
import socket
import time

import pytest
from hivemind.p2p import P2P
from pydantic import ValidationError

from ftis_swarm.config import SwarmConfig, TransportConfig
from ftis_swarm.swarm.gossip.pubsub import PUBSUB_FLAGS, PubsubP2P
from ftis_swarm.swarm.peer import reach
from ftis_swarm.swarm.peer.dialback import Reachability

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
    assert SwarmConfig().transport.reach_mode == "public"
    assert TransportConfig(client_mode=True).reach_mode == "relayed"
    assert TransportConfig(client_mode=True, reachability="client").reach_mode == "client"
    with pytest.raises(ValidationError, match="client_mode accepts no incoming connections, so reachability"):
        TransportConfig(client_mode=True, reachability="public")
    with pytest.raises(ValidationError, match="reachability"):
        TransportConfig(reachability="sometimes")


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


def _contradict(reach: Reachability, times: int, *, reached: int) -> None:
    for _ in range(times):
        reach.record_check(asked=2, answered=2, reached=reached, port=4001)


def test_an_auto_node_switches_only_after_enough_contradicting_rechecks_in_a_row() -> None:
    reach = Reachability(configured="auto", mode="public", decided_by="dial-back")
    _contradict(reach, 1, reached=0)
    assert reach.switch_due(2) is None and reach.snapshot()["contradicting"] == 1
    reach.record_check(asked=2, answered=0, reached=0, port=4001)  # nobody answered: the row goes on
    _contradict(reach, 1, reached=0)
    assert reach.switch_due(2) == "relayed" and reach.switch_due(3) is None
    _contradict(reach, 1, reached=2)  # a check that agrees with public ends the row
    assert reach.switch_due(1) is None and reach.snapshot()["contradicting"] == 0
    _contradict(reach, 2, reached=0)
    reach.record_switch("relayed")
    snap = reach.snapshot()
    assert (snap["mode"], snap["switches"], snap["contradicting"], snap["decided_by"]) == (
        "relayed", 1, 0, "dial-back recheck") and snap["switched_at"] > 0, snap
    _contradict(reach, 2, reached=1)  # the port opened again
    assert reach.switch_due(2) == "public"
    reach.record_switch_failed()
    assert reach.switch_due(2) is None and reach.snapshot()["switch_failures"] == 1


@pytest.mark.parametrize("configured, decided_by", [("public", "configured"), ("relayed", "configured"),
                                                    ("client", "configured"), ("auto", "client_mode")])
def test_a_configured_mode_never_switches(configured: str, decided_by: str) -> None:
    mode = "relayed" if configured == "auto" else configured
    reach = Reachability(configured=configured, mode=mode, decided_by=decided_by)
    _contradict(reach, 5, reached=0 if mode == "public" else 2)
    assert reach.mismatch and reach.snapshot()["contradicting"] == 5
    assert reach.switch_due(1) is None and not reach.can_switch


def test_the_switch_settings_are_validated() -> None:
    assert (TransportConfig().reach_switch_after, TransportConfig().reach_recheck_every) == (2, 300.0)
    with pytest.raises(ValidationError, match="reach_switch_after"):
        TransportConfig(reach_switch_after=0)
    with pytest.raises(ValidationError, match="reach_recheck_every"):
        TransportConfig(reach_recheck_every=0)


def _refusing(mode: str, start_dht):
    """`peer.daemon.start_dht`, but a daemon in `mode` does not start (SwarmError, as p2pd's failures are)."""
    from ftis_swarm.swarm.errors import SwarmError

    async def start(cfg, **kwargs):
        if cfg.transport.reach_mode == mode:
            raise SwarmError("the libp2p daemon did not start (a test's refusal)")
        return await start_dht(cfg, **kwargs)

    return start


@pytest.mark.net
def test_a_reopened_peer_keeps_its_identity_and_port_and_a_failed_reopen_falls_back(tmp_path, monkeypatch) -> None:
    """In process, on loopback, without peers: the restart itself (`peer.switch.reopen_peer`), not the NAT."""
    from record_peers import PUZZLE

    from ftis_swarm.swarm.errors import SwarmError
    from ftis_swarm.swarm.identity import NodeIdentity
    from ftis_swarm.swarm.peer import daemon
    from ftis_swarm.swarm.peer.start import open_peer
    from ftis_swarm.swarm.peer.switch import reopen_peer

    cfg = SwarmConfig(host="127.0.0.1", run_id="reopen", puzzle=PUZZLE, identity=tmp_path / "identity.key")
    handle = open_peer(cfg, thread_name="reopen-test")
    try:
        peer_id, port, loop = handle.peer_id, handle.bound_port(), handle.loop
        assert handle.mode == "public" and port > 0
        assert reopen_peer(handle, "client") is True
        assert (handle.mode, handle.peer_id, handle.bound_port(), handle.loop) == ("client", peer_id, port, loop)
        assert handle.reach.snapshot()["switches"] == 1
        with pytest.raises(SwarmError, match="already in use"):  # the lock was held across the restart
            NodeIdentity(cfg.identity)

        real_start = daemon.start_dht
        monkeypatch.setattr(daemon, "start_dht", _refusing("public", real_start))
        assert reopen_peer(handle, "public") is False  # no raise: back in its old mode
        assert (handle.mode, handle.peer_id, handle.bound_port()) == ("client", peer_id, port)
        assert handle.counters.snapshot()["reach_switch_failed"] == 1
        snap = handle.reach.snapshot()
        assert (snap["mode"], snap["switches"], snap["switch_failures"]) == ("client", 1, 1), snap
        maddrs = loop.run(handle.node.get_visible_maddrs(latest=True), timeout=10.0)  # the daemon answers
        assert any(f"/tcp/{port}" in str(m) for m in maddrs), maddrs

        async def no_daemon(cfg, **kwargs):
            raise SwarmError("no daemon at all (a test's refusal)")

        monkeypatch.setattr(daemon, "start_dht", no_daemon)
        with pytest.raises(SwarmError, match="restarted neither public nor client"):
            reopen_peer(handle, "public")
    finally:
        handle.close()


@pytest.mark.net
def test_a_client_whose_switch_fails_goes_on_in_its_old_mode_and_one_that_switches_serves_again(
        tmp_path, monkeypatch) -> None:
    """In process, on loopback, without peers: the client's side of a switch (`switch_reach_if_due`), its
    reach made to say two rechecks contradicted it (a node without peers is never rechecked)."""
    from record_peers import PUZZLE

    from ftis_swarm.swarm import SwarmClient
    from ftis_swarm.swarm.peer import daemon

    cfg = SwarmConfig(host="127.0.0.1", run_id="switch", puzzle=PUZZLE, identity=tmp_path / "identity.key")
    client = SwarmClient.start(cfg, tokenizer_fp="test-tokenizer")
    try:
        reach = client._peer.reach
        reach.decided_by = "dial-back"  # as if `auto` had probed
        assert client.switch_reach_if_due() is False  # nothing contradicted it yet
        _contradict(reach, 2, reached=0)
        real_start = daemon.start_dht
        monkeypatch.setattr(daemon, "start_dht", _refusing("relayed", real_start))
        assert client.switch_reach_if_due() is False  # fell back, did not raise
        counts = client.counters()
        assert (counts["reach"]["mode"], counts["reach_switch_failed"], counts["reach_switches"]) == ("public", 1, 0)
        assert client.switch_reach_if_due() is False and reach.snapshot()["contradicting"] == 0  # not again at once
        assert client.gather(0.5) == []  # the gatherer runs on the restarted daemon
        assert not client._poller.done()

        monkeypatch.setattr(daemon, "start_dht", real_start)
        old_node, port = client._node, client._peer.bound_port()
        reach.mode = "client"  # a relayed daemon needs relays among its peers: switch the other way, to public
        _contradict(reach, 2, reached=2)
        assert client.switch_reach_if_due() is True
        counts = client.counters()
        assert (counts["reach"]["mode"], counts["reach"]["switches"], counts["reach_switches"]) == ("public", 1, 1)
        assert client._node is client._peer.node and client._node is not old_node and not client._poller.done()
        assert client.visible_maddrs == client._peer.visible_maddrs and client._peer.bound_port() == port
        assert client.gather(0.5) == []
    finally:
        client.shutdown()


@pytest.mark.net
def test_a_relayed_node_without_an_address_yet_waits_for_its_slot_instead_of_failing(caplog) -> None:
    """A relayed daemon announces only circuits; its public-looking address is dropped, and with a bootstrap
    that relays nothing it never has one. hivemind's ValueError for that ended the start before."""
    from record_peers import PUZZLE

    from ftis_swarm.swarm.peer import daemon, start

    boot = start.open_peer(SwarmConfig(host="127.0.0.1", run_id="noaddr", puzzle=PUZZLE, relay_service=False),
                             thread_name="noaddr-boot")
    try:
        port = start._free_port("127.0.0.1")
        cfg = SwarmConfig(host="127.0.0.1", run_id="noaddr", puzzle=PUZZLE, reachability="relayed",
                          peers=boot.visible_maddrs, relay_wait=1.0, port=port, announce=[f"/ip4/11.0.0.9/tcp/{port}"])
        with caplog.at_level(logging.WARNING, logger="ftis_swarm.swarm.peer"):
            node = start.open_peer(cfg, thread_name="noaddr-node")
        try:
            assert (node.mode, node.visible_maddrs) == ("relayed", [])
            assert any("no relay slot on the bootstrap peers after 1 s" in r.getMessage() for r in caplog.records)
            assert daemon.visible_maddrs(node.loop, node.node) == []  # still none, still no error
        finally:
            node.close()
    finally:
        boot.close()


def _unreachable_first(times: int, start_dht, calls: list[str]):
    """`peer.daemon.start_dht`, but the first `times` daemons not in client mode (not a probe) reach no peer."""
    from ftis_swarm.swarm.errors import PeersUnreachable

    async def start(cfg, **kwargs):
        calls.append(cfg.transport.reach_mode)
        if cfg.transport.reach_mode != "client" and sum(mode != "client" for mode in calls) <= times:
            raise PeersUnreachable("none of the --peers could be reached (a test's refusal)")
        return await start_dht(cfg, **kwargs)

    return start


@pytest.mark.net
def test_the_daemon_after_a_probe_starts_again_when_it_reaches_no_peer_and_a_configured_one_does_not(
        monkeypatch, caplog) -> None:
    """In process, on loopback: the probe reached the bootstrap, so the node's own daemon is tried again
    (`AFTER_PROBE_PAUSES`) before its failure goes to the user; without a probe there is nothing to retry."""
    from record_peers import PUZZLE

    from ftis_swarm.swarm.errors import PeersUnreachable
    from ftis_swarm.swarm.peer import daemon, start

    monkeypatch.setattr(start, "AFTER_PROBE_PAUSES", (0.1, 0.2))
    real_start = daemon.start_dht
    boot = start.open_peer(SwarmConfig(host="127.0.0.1", run_id="retry", puzzle=PUZZLE), thread_name="retry-boot")
    try:
        cfg = SwarmConfig(host="127.0.0.1", run_id="retry", puzzle=PUZZLE, peers=boot.visible_maddrs)
        calls: list[str] = []
        monkeypatch.setattr(daemon, "start_dht", _unreachable_first(2, real_start, calls))
        with caplog.at_level(logging.WARNING, logger="ftis_swarm.swarm.peer"):
            node = start.open_peer(cfg, thread_name="retry-node")
        try:
            assert calls == ["client", "public", "public", "public"]  # the probe, two refusals, the start
            snap = node.reach.snapshot()
            assert (snap["mode"], snap["decided_by"], snap["dialback"]["reached"]) == ("public", "dial-back", 1)
            retries = [r for r in caplog.records if "reached none of the peers the probe reached" in r.getMessage()]
            assert [r.levelno for r in retries] == [logging.WARNING, logging.WARNING]
            assert boot.peer_id in node.askable_peers()
        finally:
            node.close()

        calls.clear()
        monkeypatch.setattr(daemon, "start_dht", _unreachable_first(3, real_start, calls))
        with pytest.raises(PeersUnreachable, match="could be reached"):  # three in a row: the user hears of it
            start.open_peer(cfg, thread_name="retry-node")
        assert calls == ["client", "public", "public", "public"]

        calls.clear()
        monkeypatch.setattr(daemon, "start_dht", _unreachable_first(1, real_start, calls))
        with pytest.raises(PeersUnreachable):
            start.open_peer(cfg.replace(transport={"reachability": "public"}), thread_name="retry-node")
        assert calls == ["public"]  # configured public: no probe, so no retry
    finally:
        boot.close()
