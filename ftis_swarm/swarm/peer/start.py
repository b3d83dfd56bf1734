"""`open_peer`: the local peer's start, from its identity to a joined daemon that knows its reach.

With `reachability` auto (and neither `client_mode` nor an empty `peers`) a short-lived
client-mode daemon first asks the `peers` to dial its port back (`dialback.py`); the node's
own daemon then starts `public` if one could, else `relayed`, and is started again after
each of `AFTER_PROBE_PAUSES` when it reaches none of the peers the probe reached. Every
start ends with the daemon's services (`start_services`): answering dial-backs (public)
and the rechecks (with peers).
"""

from __future__ import annotations

import logging
import socket
import time
from typing import Optional

from hivemind.utils.multiaddr import Multiaddr

from ftis_swarm.config import SwarmConfig
from ftis_swarm.peers.policy import ALLOW_ALL, PeerPolicy
from ftis_swarm.swarm.counters import SwarmCounters
from ftis_swarm.swarm.dht.validators import RecordChecker
from ftis_swarm.swarm.errors import PeersUnreachable, SwarmError
from ftis_swarm.swarm.identity import NodeIdentity
from ftis_swarm.swarm.peer import daemon
from ftis_swarm.swarm.peer.dialback import Reachability, ask_peers, serve_dialback, watch_reachability
from ftis_swarm.swarm.peer.handle import PeerHandle
from ftis_swarm.swarm.peer.loop import LoopThread
from ftis_swarm.swarm.puzzle import PuzzleVerifier, load_or_solve

logger = logging.getLogger(__name__)
MAX_DIALBACK_PEERS = 5
"""Peers of `cfg.transport.peers` asked to dial a starting `auto` node back (Petals asks up to 5 too)."""
AFTER_PROBE_PAUSES = (1.0, 3.0)
"""Seconds to wait before starting the node's daemon again when it reached none of the peers
that the probe's daemon, on the same port, reached a moment before (a pause before each retry)."""


def open_peer(cfg: SwarmConfig, *, thread_name: str, policy: PeerPolicy = ALLOW_ALL,
              counters: Optional[SwarmCounters] = None) -> PeerHandle:
    """Checks addresses, takes the identity (solving its puzzle for the run if it has none yet),
    starts p2pd and the DHT peer, and joins `cfg.transport.peers`.

    With `reachability` auto (and neither `client_mode` nor an empty `peers`) it first asks
    the `peers` to dial it back (`dialback.py`) from a short-lived client-mode daemon, and
    starts `public` if one could, else `relayed`. A public peer answers dial-back questions.
    Raises SwarmError (one sentence) for a bad address, a busy identity, or peers that do
    not answer within `cfg.transport.join_timeout`.
    """
    net = cfg.transport
    daemon.check_maddrs(net.peers, what="peer", need_peer_id=True)
    daemon.check_maddrs(net.announce, what="announce address", need_peer_id=False)
    configured, first_check = net.reachability, 0.0
    if net.reachability == "auto" and not net.client_mode and net.peers:
        if not net.port:  # the probe and the node listen on one port: the answer is about the node's
            cfg = cfg.replace(transport={"port": _free_port(net.host)})
        mode, answers = _probe_reachability(cfg, thread_name=thread_name)
        cfg = cfg.replace(transport={"reachability": mode})
        first_check = net.reach_recheck_every
        handle = _start_after_probe(cfg, thread_name=thread_name, policy=policy, counters=counters)
    else:
        handle = _start_peer(cfg, thread_name=thread_name, policy=policy, counters=counters)
    handle.reach = Reachability(configured=configured, mode=handle.mode, decided_by=_decided_by(configured, cfg))
    if first_check:
        handle.reach.record_check(**answers)
        handle.reach.decided_by = "dial-back" if answers["answered"] else "dial-back unanswered"
    start_services(handle, first_check=first_check)
    return handle


def _start_after_probe(cfg: SwarmConfig, *, thread_name: str, policy: PeerPolicy,
                       counters: Optional[SwarmCounters]) -> PeerHandle:
    """`_start_peer` for the daemon that follows a dial-back probe on the same port.

    The probe's daemon reached the peers, so a start that reaches none of them a moment
    later failed for a passing reason, not for peers that are gone. CI saw it once in many
    runs behind NAT, within a second of the start; the cause is not pinned down (the new
    daemon dials the same peers from the same port while the probe's connections close).
    It is tried again after each of `AFTER_PROBE_PAUSES`, with a WARNING, before the error
    goes to the user.
    """
    for pause in AFTER_PROBE_PAUSES:
        try:
            return _start_peer(cfg, thread_name=thread_name, policy=policy, counters=counters)
        except PeersUnreachable as exc:
            logger.warning("reachability auto: the daemon reached none of the peers the probe reached a moment "
                           "ago (%s); starting it again in %.1f s", exc, pause)
            time.sleep(pause)
    return _start_peer(cfg, thread_name=thread_name, policy=policy, counters=counters)


def start_services(handle: PeerHandle, *, first_check: float) -> None:
    """What a node's daemon runs besides the DHT: answering dial-backs (public) and the rechecks (with peers)."""
    if handle.mode == "public":
        handle.loop.run(serve_dialback(handle.node.p2p), timeout=10.0)
    if handle.cfg.transport.peers:
        handle.watch = handle.loop.submit(watch_reachability(
            handle.node.p2p, handle.reach, askable=handle.askable_peers, port=handle.listen_port(),
            every=handle.cfg.transport.reach_recheck_every, first=first_check))


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _decided_by(configured: str, cfg: SwarmConfig) -> str:
    if configured != "auto":
        return "configured"
    return "client_mode" if cfg.transport.client_mode else "no peers"


def _probe_reachability(cfg: SwarmConfig, *, thread_name: str) -> tuple[str, dict[str, int]]:
    """`public` when a peer of `cfg.transport.peers` could open a TCP connection to this node's port, else
    `relayed` (also `public`, with a WARNING, when no peer answered: nothing says this node is unreachable);
    with the answers (`Reachability.record_check`'s arguments)."""
    probe = _start_peer(cfg.replace(transport={"reachability": "client"}, gossip={"enabled": False}),
                        thread_name=f"{thread_name}-probe", policy=ALLOW_ALL, counters=SwarmCounters())
    try:
        port = probe.listen_port()
        peer_ids = list(dict.fromkeys(Multiaddr(m)["p2p"] for m in cfg.transport.peers))[:MAX_DIALBACK_PEERS]
        said, reached = probe.loop.run(ask_peers(probe.node.p2p, peer_ids, port), timeout=15.0)
    finally:
        probe.close()
    answers = {"asked": len(peer_ids), "answered": said, "reached": reached, "port": port}
    if not said:
        logger.warning("reachability auto: none of %d peers answered a dial-back of port %d; starting public",
                       len(peer_ids), port)
        return "public", answers
    mode = "public" if reached else "relayed"
    logger.info("reachability auto: %d of %d peers dialed back port %d; starting %s", reached, said, port, mode)
    return mode, answers


def _start_peer(cfg: SwarmConfig, *, thread_name: str, policy: PeerPolicy,
                counters: Optional[SwarmCounters]) -> PeerHandle:
    identity = NodeIdentity(cfg.identity)
    try:
        puzzle = load_or_solve(identity.identity.path, identity.identity.public_key, cfg.run_id, cfg.puzzle)
    except BaseException:
        identity.close()
        raise
    counters = counters if counters is not None else SwarmCounters()
    loop = LoopThread(name=thread_name)
    records, net = cfg.records, cfg.transport
    try:
        checker = RecordChecker(identity.identity.private_key, puzzles=PuzzleVerifier(cfg.puzzle),
                                max_record_bytes=records.max_record_bytes, ttl=records.ttl,
                                max_clock_skew=records.max_clock_skew)
        if net.peers:
            logger.info("dialing %d bootstrap peer(s) and joining the DHT (deadline %g s, "
                        "swarm.transport.join_timeout)...", len(net.peers), net.join_timeout)
        node, origins = loop.run(daemon.start_dht(cfg, identity_path=identity.identity.path, checker=checker,
                                                  policy=policy, counters=counters), timeout=net.join_timeout + 10.0)
        maddrs = daemon.visible_maddrs(loop, node)
        if net.reach_mode == "relayed" and net.peers:
            maddrs = daemon.wait_for_relay_slot(loop, node, maddrs, wait=net.relay_wait)
    except TimeoutError as exc:
        loop.stop()
        identity.close()
        raise SwarmError(f"could not start a DHT peer and join the swarm within {net.join_timeout:.0f} s") from exc
    except BaseException:
        loop.stop()
        identity.close()
        raise
    return PeerHandle(identity=identity, puzzle=puzzle, loop=loop, node=node, visible_maddrs=maddrs, checker=checker,
                      counters=counters, origins=origins, cfg=cfg, policy=policy)
