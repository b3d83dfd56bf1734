"""An in-process DHT peer on a background asyncio thread, with a synchronous face.

Why not `hivemind.DHT`: its process wrapper sends values through a pipe that breaks on
values over about 16 KiB. Here a `DHTNode` and its `P2P` daemon live in this process, on
an event loop in a daemon thread; the node's main thread (torch training) calls in through
`LoopThread.run`, which waits on a future with a timeout.

The DHT peer is guarded before it answers anyone: it is created as a client (so hivemind
registers no handlers of its own), then given `GuardedStorage`, the strict
`BoundedSerializer`, and `DHTServicer`'s handlers under hivemind's names, and only then
announced to its peers with a lookup of its own id. hivemind's local cache is off: a
peer keeps no unbounded copy of what it reads.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import logging
import socket
import threading
import time
from pathlib import Path
from typing import Awaitable, Optional, TypeVar

from hivemind.dht.node import DHTNode
from hivemind.p2p import P2P, P2PDaemonError, PeerID
from hivemind.proto import dht_pb2
from hivemind.utils.multiaddr import Multiaddr

from ftis_swarm.config import SwarmConfig
from ftis_swarm.swarm import reach
from ftis_swarm.swarm.counters import SwarmCounters
from ftis_swarm.swarm.dht.codec import BoundedSerializer
from ftis_swarm.swarm.errors import PeersUnreachable, SwarmError
from ftis_swarm.swarm.dht.guard import DHTServicer
from ftis_swarm.swarm.identity import NodeIdentity
from ftis_swarm.peers.policy import ALLOW_ALL, PeerPolicy
from ftis_swarm.swarm.gossip.pubsub import PubsubP2P
from ftis_swarm.swarm.puzzle import PuzzleVerifier, load_or_solve
from ftis_swarm.swarm.dht.origin_quota import OriginQuotaStorage
from ftis_swarm.swarm.origins import OriginBook
from ftis_swarm.swarm.dht.validators import RecordChecker
from ftis_swarm.swarm.dialback import Reachability, ask_peers, serve_dialback, watch_reachability

logger = logging.getLogger(__name__)
T = TypeVar("T")
MAX_DIALBACK_PEERS = 5
"""Peers of `cfg.peers` asked to dial a starting `auto` node back (Petals asks up to 5 too)."""
RELAY_CHECK_EVERY = 0.2
"""Seconds between two looks for a reserved relay slot while a relayed node starts."""


class LoopThread:
    """An asyncio event loop running in a daemon thread until `stop`."""

    def __init__(self, *, name: str):
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def submit(self, coro: Awaitable[T]) -> "concurrent.futures.Future[T]":
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Awaitable[T], *, timeout: Optional[float]) -> T:
        """Runs `coro` on the loop and waits for it; on timeout it is cancelled and TimeoutError raised."""
        future = self.submit(coro)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"swarm operation did not finish in {timeout:.1f} s") from None

    def stop(self) -> None:
        """Cancels what is left on the loop, stops it and joins the thread (idempotent)."""
        if not self._thread.is_alive():
            return

        async def _cancel_rest() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        try:
            self.run(_cancel_rest(), timeout=5.0)
        except TimeoutError:
            logger.warning("some swarm tasks did not stop within 5 s")
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5.0)
        if not self._thread.is_alive():
            self.loop.close()


def listen_maddrs(host: str, port: int) -> list[str]:
    """The TCP multiaddr p2pd listens on, for an IPv4 or IPv6 host."""
    family = "ip6" if ":" in host else "ip4"
    return [f"/{family}/{host}/tcp/{port}"]


def check_maddrs(maddrs: list[str], *, what: str, need_peer_id: bool) -> None:
    """Raises SwarmError naming the first multiaddr that does not parse."""
    for item in maddrs:
        try:
            parsed = Multiaddr(item)
            if need_peer_id:
                parsed["p2p"]
            elif "tcp" in parsed and parsed["tcp"] == "0":
                raise ValueError("port 0 cannot be announced")
        except Exception as exc:  # multiaddr raises assorted types (ValueError, KeyError, its own errors)
            suffix = " with a /p2p/<peer id> part" if need_peer_id else ""
            raise SwarmError(f"{what} {item!r} is not a multiaddr{suffix}: {exc}") from None


async def start_dht(cfg: SwarmConfig, *, identity_path: Path, checker: RecordChecker, policy: PeerPolicy,
                    counters: SwarmCounters) -> tuple[DHTNode, OriginBook]:
    """Starts p2pd with this identity (and gossipsub, if `cfg.gossip`), joins the DHT through
    `cfg.peers` (if any), and guards it; also returns the book of its peers' origins."""
    mode = cfg.reach_mode
    flags = reach.daemon_flags(mode, relay_service=cfg.relay_service, max_circuits=cfg.relay_max_circuits,
                               max_reservations=cfg.relay_max_reservations, data_limit=cfg.relay_data_limit,
                               time_limit=cfg.relay_time_limit)
    try:
        p2p = await reach.with_flags(PubsubP2P if cfg.gossip else P2P, flags).create(
            initial_peers=cfg.peers or None,
            host_maddrs=listen_maddrs(cfg.host, cfg.port),
            announce_maddrs=cfg.announce or None,
            identity_path=str(identity_path),
            check_if_identity_free=False,  # the identity lock covers this machine, without a second daemon
            dht_mode="server" if reach.dht_is_server(mode) else "client",
            use_auto_relay=mode == "relayed",
            trusted_relays=(cfg.peers or None) if mode == "relayed" else None,  # static relays: the bootstrap peers
            startup_timeout=cfg.join_timeout,
        )
    except P2PDaemonError as exc:
        if cfg.peers and "bootstrap peers" in str(exc):
            raise PeersUnreachable(f"none of the --peers could be reached ({', '.join(cfg.peers)})") from exc
        if cfg.peers and "failed to start in" in str(exc):  # p2pd dials its bootstrap peers before it says it is up
            raise SwarmError(f"the libp2p daemon did not start within swarm.join_timeout={cfg.join_timeout:g} s "
                             f"while dialing the --peers ({', '.join(cfg.peers)})") from exc
        raise SwarmError(f"the libp2p daemon did not start on {cfg.host}:{cfg.port}: {exc}") from exc
    try:
        node = await DHTNode.create(
            p2p=p2p,
            initial_peers=cfg.peers or None,
            client_mode=True,  # no hivemind handlers: `guard_node` registers the guarded ones
            record_validator=checker,
            num_replicas=cfg.num_replicas,
            cache_locally=False,  # no unbounded local copy of what this peer reads
            cache_nearest=0,  # no unasked-for copies of whole keys to other peers
            cache_refresh_before_expiry=0,
            bootstrap_timeout=min(cfg.join_timeout, 5.0),
        )
        origins = await guard_node(node, cfg, checker=checker, policy=policy, counters=counters)
        return node, origins
    except RuntimeError as exc:
        await p2p.shutdown()
        raise SwarmError(f"none of the --peers answered ({', '.join(cfg.peers)}): {exc}") from exc
    except BaseException:
        await p2p.shutdown()
        raise


async def guard_node(node: DHTNode, cfg: SwarmConfig, *, checker: RecordChecker, policy: PeerPolicy,
                     counters: SwarmCounters) -> OriginBook:
    """Gives a client-mode DHTNode its guarded storage and, when its mode serves the DHT, its guarded
    handlers; returns the book of its peers' network origins, which both use."""
    protocol = node.protocol
    protocol.serializer = BoundedSerializer
    routing = protocol.routing_table

    def is_dht_peer(peer_id: str) -> bool:
        return routing.get(peer_id=PeerID.from_base58(peer_id)) is not None

    origins = OriginBook(node.p2p, prefix_v4=cfg.origin_prefix_v4, prefix_v6=cfg.origin_prefix_v6)
    protocol.storage = OriginQuotaStorage(self_id=node.peer_id.to_base58(), policy=policy, is_dht_peer=is_dht_peer,
                                          max_records=cfg.max_stored_records,
                                          max_records_per_peer=cfg.max_records_per_peer,
                                          max_bytes=cfg.max_stored_bytes,
                                          max_records_per_origin=cfg.max_records_per_origin)
    if not reach.dht_is_server(cfg.reach_mode):
        return origins
    protocol.client_mode = False
    protocol.node_info = dht_pb2.NodeInfo(node_id=node.node_id.to_bytes())
    servicer = DHTServicer(protocol=protocol, storage=protocol.storage, checker=checker, policy=policy,
                           counters=counters, origins=origins)
    await protocol.add_p2p_handlers(node.p2p, servicer)
    if cfg.peers:  # now as a server: every peer this lookup visits adds this one to its routing table
        await node.find_nearest_nodes([node.node_id])
    return origins


@dataclasses.dataclass
class PeerHandle:
    """A started DHT peer: its identity (and its puzzle's nonce), event loop thread, node and visible multiaddrs."""

    identity: NodeIdentity
    puzzle: str
    loop: LoopThread
    node: DHTNode
    visible_maddrs: list[str]
    checker: RecordChecker
    counters: SwarmCounters
    origins: OriginBook
    cfg: SwarmConfig
    policy: PeerPolicy = ALLOW_ALL
    reach: Optional[Reachability] = None
    """Its mode, how that was decided, and the last dial-back check (`open_peer` sets it)."""
    watch: Optional["concurrent.futures.Future[None]"] = None
    """The running `watch_reachability` of this node's daemon (None: no peers to ask)."""

    @property
    def mode(self) -> str:
        """How peers reach this node: public, relayed or client (swarm/reach.py)."""
        return self.cfg.reach_mode

    def listen_port(self) -> int:
        """The TCP port peers are told to dial: the first announced one, else the listening one (0 if none)."""
        ports = [int(Multiaddr(m)["tcp"]) for m in (self.cfg.announce or self.visible_maddrs)
                 if "/tcp/" in m and reach.CIRCUIT not in m]
        if self.cfg.announce:
            return ports[0] if ports else 0
        return self.cfg.port or (ports[0] if ports else 0)

    def bound_port(self) -> int:
        """The TCP port of its first visible non-relay address (0 if none): the one p2pd listens on, unless
        `announce` names another (then `cfg.port` is the listening one)."""
        ports = [int(Multiaddr(m)["tcp"]) for m in self.visible_maddrs if "/tcp/" in m and reach.CIRCUIT not in m]
        return ports[0] if ports else 0

    def askable_peers(self) -> list[str]:
        """Peers to ask for a dial-back: the `peers` first, then the DHT servers this node knows (public ones)."""
        known = [Multiaddr(m)["p2p"] for m in self.cfg.peers]
        known += [peer_id.to_base58() for peer_id in self.node.protocol.routing_table.peer_id_to_uid]
        return [p for p in dict.fromkeys(known) if p != self.peer_id]

    @property
    def peer_id(self) -> str:
        return self.identity.identity.peer_id

    def close(self) -> None:
        """Shuts the node and p2pd down, stops the loop, releases the identity."""
        try:
            self.loop.run(_close_node(self.node), timeout=10.0)
        except TimeoutError:
            logger.warning("the DHT peer did not close within 10 s; stopping its loop anyway")
        finally:
            self.loop.stop()
            self.identity.close()


def visible_maddrs(loop: LoopThread, node: DHTNode) -> list[str]:
    """The multiaddrs p2pd now tells peers to dial this node at (refreshed), [] while it has none.

    A relayed daemon announces only relay circuits, so until its first slot is reserved it
    has no address at all, and hivemind raises ValueError for that: here it is a fact to
    wait out (`_wait_for_relay_slot`), not a failed start.
    """
    try:
        return [str(m) for m in loop.run(node.get_visible_maddrs(latest=True), timeout=10.0)]
    except ValueError as exc:
        if "No multiaddrs" not in str(exc):
            raise
        return []


def _wait_for_relay_slot(loop: LoopThread, node: DHTNode, maddrs: list[str], *, wait: float) -> list[str]:
    """The node's visible multiaddrs once one is a relay circuit (a slot reserved), or after `wait` seconds.

    A relayed node that published before its slot existed would be unreachable for its first
    groups, and its peers would back off from it for minutes.
    """
    started = time.monotonic()
    while not any(reach.CIRCUIT in m for m in maddrs) and time.monotonic() - started < wait:
        time.sleep(RELAY_CHECK_EVERY)
        maddrs = visible_maddrs(loop, node)
    if any(reach.CIRCUIT in m for m in maddrs):
        logger.info("reserved a relay slot in %.1f s: other NAT'd peers can fetch this node's groups",
                    time.monotonic() - started)
    else:
        logger.warning("no relay slot on the bootstrap peers after %.0f s: only public peers can fetch this node's "
                       "groups (over the connections it opened)", wait)
    return maddrs


async def _close_node(node: DHTNode) -> None:
    await node.shutdown()
    await node.p2p.shutdown()


def open_peer(cfg: SwarmConfig, *, thread_name: str, policy: PeerPolicy = ALLOW_ALL,
              counters: Optional[SwarmCounters] = None) -> PeerHandle:
    """Checks addresses, takes the identity (solving its puzzle for the run if it has none yet),
    starts p2pd and the DHT peer, and joins `cfg.peers`.

    With `reachability` auto (and neither `client_mode` nor an empty `peers`) it first asks
    the `peers` to dial it back (`dialback.py`) from a short-lived client-mode daemon, and
    starts `public` if one could, else `relayed`. A public peer answers dial-back questions.
    Raises SwarmError (one sentence) for a bad address, a busy identity, or peers that do
    not answer within `cfg.join_timeout`.
    """
    check_maddrs(cfg.peers, what="peer", need_peer_id=True)
    check_maddrs(cfg.announce, what="announce address", need_peer_id=False)
    configured, first_check = cfg.reachability, 0.0
    if cfg.reachability == "auto" and not cfg.client_mode and cfg.peers:
        if not cfg.port:  # the probe and the node listen on one port: the answer is about the node's
            cfg = cfg.model_copy(update={"port": _free_port(cfg.host)})
        mode, answers = _probe_reachability(cfg, thread_name=thread_name)
        cfg = cfg.model_copy(update={"reachability": mode})
        first_check = cfg.reach_recheck_every
        handle = _start_after_probe(cfg, thread_name=thread_name, policy=policy, counters=counters)
    else:
        handle = _start_peer(cfg, thread_name=thread_name, policy=policy, counters=counters)
    handle.reach = Reachability(configured=configured, mode=handle.mode, decided_by=_decided_by(configured, cfg))
    if first_check:
        handle.reach.record_check(**answers)
        handle.reach.decided_by = "dial-back" if answers["answered"] else "dial-back unanswered"
    _start_services(handle, first_check=first_check)
    return handle


AFTER_PROBE_PAUSES = (1.0, 3.0)
"""Seconds to wait before starting the node's daemon again when it reached none of the peers
that the probe's daemon, on the same port, reached a moment before (a pause before each retry)."""


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


def _start_services(handle: PeerHandle, *, first_check: float) -> None:
    """What a node's daemon runs besides the DHT: answering dial-backs (public) and the rechecks (with peers)."""
    if handle.mode == "public":
        handle.loop.run(serve_dialback(handle.node.p2p), timeout=10.0)
    if handle.cfg.peers:
        handle.watch = handle.loop.submit(watch_reachability(
            handle.node.p2p, handle.reach, askable=handle.askable_peers, port=handle.listen_port(),
            every=handle.cfg.reach_recheck_every, first=first_check))


def reopen_peer(handle: PeerHandle, mode: str) -> bool:
    """Restarts `handle`'s DHT peer and p2pd in `mode`, in place: the same identity (its lock held
    throughout, so no other process can take it meanwhile), port, loop, puzzle, counters, policy,
    checker and `Reachability`; a relayed node waits for its relay slot as at start. Records it
    (`Reachability.record_switch`) and returns True. If the new daemon does not start, it logs an
    ERROR, counts `reach_switch_failed`, starts the old mode again and returns False. Raises
    SwarmError (one sentence) only when neither mode starts: the node then has no daemon.

    The old daemon is gone before the new one listens (they share the port): for that time,
    a few seconds, the node serves nobody, and whatever was on the old daemon (streams,
    subscriptions, handlers other than the dial-back one) is the caller's to open again.
    """
    old = handle.cfg.model_copy(update={"port": handle.cfg.port or handle.bound_port()})
    if handle.watch is not None:
        handle.watch.cancel()
    try:
        handle.loop.run(_close_node(handle.node), timeout=10.0)
    except TimeoutError:
        logger.warning("the old DHT peer did not close within 10 s; starting the new one anyway")
    try:
        _restart(handle, old.model_copy(update={"reachability": mode}))
    except Exception as exc:  # p2pd, hivemind, the port or the relay: whatever it is, the old mode goes on
        handle.counters.add("reach_switch_failed")
        logger.error("reachability auto: the daemon did not start %s (%s); starting it %s again, as before",
                     mode, exc, old.reach_mode)
        if handle.reach is not None:
            handle.reach.record_switch_failed()
        try:
            _restart(handle, old)
        except Exception as again:  # nothing left to fall back to: one sentence at the node's edge
            raise SwarmError(f"the libp2p daemon restarted neither {mode} nor {old.reach_mode} on port "
                             f"{old.port}: {again}") from again
        return False
    if handle.reach is not None:
        handle.reach.record_switch(mode)
    return True


def _restart(handle: PeerHandle, cfg: SwarmConfig) -> None:
    """Starts a daemon and DHT peer for `cfg` on `handle`'s loop and identity, and its services."""
    node, origins = handle.loop.run(start_dht(cfg, identity_path=handle.identity.identity.path,
                                              checker=handle.checker, policy=handle.policy,
                                              counters=handle.counters), timeout=cfg.join_timeout + 10.0)
    try:
        maddrs = visible_maddrs(handle.loop, node)
        if cfg.reach_mode == "relayed" and cfg.peers:
            maddrs = _wait_for_relay_slot(handle.loop, node, maddrs, wait=cfg.relay_wait)
        handle.node, handle.origins, handle.visible_maddrs, handle.cfg = node, origins, maddrs, cfg
        _start_services(handle, first_check=cfg.reach_recheck_every)
    except BaseException:  # the daemon started but is not usable: free its port for the fallback
        try:
            handle.loop.run(_close_node(node), timeout=10.0)
        except TimeoutError:
            logger.warning("a DHT peer that failed to start did not close within 10 s")
        raise


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _decided_by(configured: str, cfg: SwarmConfig) -> str:
    if configured != "auto":
        return "configured"
    return "client_mode" if cfg.client_mode else "no peers"


def _probe_reachability(cfg: SwarmConfig, *, thread_name: str) -> tuple[str, dict[str, int]]:
    """`public` when a peer of `cfg.peers` could open a TCP connection to this node's port, else `relayed`
    (also `public`, with a WARNING, when no peer answered: nothing says this node is unreachable);
    with the answers (`Reachability.record_check`'s arguments)."""
    probe = _start_peer(cfg.model_copy(update={"reachability": "client", "gossip": False}),
                        thread_name=f"{thread_name}-probe", policy=ALLOW_ALL, counters=SwarmCounters())
    try:
        port = probe.listen_port()
        peer_ids = list(dict.fromkeys(Multiaddr(m)["p2p"] for m in cfg.peers))[:MAX_DIALBACK_PEERS]
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
    try:
        checker = RecordChecker(identity.identity.private_key, puzzles=PuzzleVerifier(cfg.puzzle),
                                max_record_bytes=cfg.max_record_bytes, ttl=cfg.ttl, max_clock_skew=cfg.max_clock_skew)
        if cfg.peers:
            logger.info("dialing %d bootstrap peer(s) and joining the DHT (deadline %g s, swarm.join_timeout)...",
                        len(cfg.peers), cfg.join_timeout)
        node, origins = loop.run(start_dht(cfg, identity_path=identity.identity.path, checker=checker, policy=policy,
                                           counters=counters), timeout=cfg.join_timeout + 10.0)
        maddrs = visible_maddrs(loop, node)
        if cfg.reach_mode == "relayed" and cfg.peers:
            maddrs = _wait_for_relay_slot(loop, node, maddrs, wait=cfg.relay_wait)
    except TimeoutError as exc:
        loop.stop()
        identity.close()
        raise SwarmError(f"could not start a DHT peer and join the swarm within {cfg.join_timeout:.0f} s") from exc
    except BaseException:
        loop.stop()
        identity.close()
        raise
    return PeerHandle(identity=identity, puzzle=puzzle, loop=loop, node=node, visible_maddrs=maddrs, checker=checker,
                      counters=counters, origins=origins, cfg=cfg, policy=policy)
