"""p2pd and the guarded DHT node of this peer, started on its `LoopThread`.

The DHT peer is guarded before it answers anyone: it is created as a client (so hivemind
registers no handlers of its own), then given `GuardedStorage`, the strict
`BoundedSerializer`, and `DHTServicer`'s handlers under hivemind's names, and only then
announced to its peers with a lookup of its own id. hivemind's local cache is off: a
peer keeps no unbounded copy of what it reads. A relayed node's start also waits for its
relay slot (`wait_for_relay_slot`).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from hivemind.dht.node import DHTNode
from hivemind.p2p import P2P, P2PDaemonError, PeerID
from hivemind.proto import dht_pb2
from hivemind.utils.multiaddr import Multiaddr

from ftis_swarm.config import SwarmConfig
from ftis_swarm.peers.policy import PeerPolicy
from ftis_swarm.swarm.counters import SwarmCounters
from ftis_swarm.swarm.dht.codec import BoundedSerializer
from ftis_swarm.swarm.dht.guard import DHTServicer, StoreRate
from ftis_swarm.swarm.dht.origin_quota import OriginQuotaStorage
from ftis_swarm.swarm.dht.validators import RecordChecker
from ftis_swarm.swarm.errors import PeersUnreachable, SwarmError
from ftis_swarm.swarm.gossip.pubsub import PubsubP2P
from ftis_swarm.swarm.origins import OriginBook
from ftis_swarm.swarm.peer import reach
from ftis_swarm.swarm.peer.loop import LoopThread

logger = logging.getLogger(__name__)
RELAY_CHECK_EVERY = 0.2
"""Seconds between two looks for a reserved relay slot while a relayed node starts."""


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
    """Starts p2pd with this identity (and gossipsub, if `cfg.gossip.enabled`), joins the DHT through
    `cfg.transport.peers` (if any), and guards it; also returns the book of its peers' origins."""
    net = cfg.transport
    mode, peers = net.reach_mode, net.peers
    flags = reach.daemon_flags(mode, relay_service=net.relay_service, max_circuits=net.relay_max_circuits,
                               max_reservations=net.relay_max_reservations, data_limit=net.relay_data_limit,
                               time_limit=net.relay_time_limit)
    try:
        p2p = await reach.with_flags(PubsubP2P if cfg.gossip.enabled else P2P, flags).create(
            initial_peers=peers or None,
            host_maddrs=listen_maddrs(net.host, net.port),
            announce_maddrs=net.announce or None,
            identity_path=str(identity_path),
            check_if_identity_free=False,  # the identity lock covers this machine, without a second daemon
            dht_mode="server" if reach.dht_is_server(mode) else "client",
            use_auto_relay=mode == "relayed",
            trusted_relays=(peers or None) if mode == "relayed" else None,  # static relays: the bootstrap peers
            startup_timeout=net.join_timeout,
        )
    except P2PDaemonError as exc:
        if peers and "bootstrap peers" in str(exc):
            raise PeersUnreachable(f"none of the --peers could be reached ({', '.join(peers)})") from exc
        if peers and "failed to start in" in str(exc):  # p2pd dials its bootstrap peers before it says it is up
            raise SwarmError(f"the libp2p daemon did not start within swarm.transport.join_timeout="
                             f"{net.join_timeout:g} s while dialing the --peers ({', '.join(peers)})") from exc
        raise SwarmError(f"the libp2p daemon did not start on {net.host}:{net.port}: {exc}") from exc
    try:
        node = await DHTNode.create(
            p2p=p2p,
            initial_peers=peers or None,
            client_mode=True,  # no hivemind handlers: `guard_node` registers the guarded ones
            record_validator=checker,
            num_replicas=cfg.records.num_replicas,
            cache_locally=False,  # no unbounded local copy of what this peer reads
            cache_nearest=0,  # no unasked-for copies of whole keys to other peers
            cache_refresh_before_expiry=0,
            bootstrap_timeout=min(net.join_timeout, 5.0),
        )
        origins = await guard_node(node, cfg, checker=checker, policy=policy, counters=counters)
        return node, origins
    except RuntimeError as exc:
        await p2p.shutdown()
        raise SwarmError(f"none of the --peers answered ({', '.join(peers)}): {exc}") from exc
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

    net, records = cfg.transport, cfg.records
    origins = OriginBook(node.p2p, prefix_v4=net.origin_prefix_v4, prefix_v6=net.origin_prefix_v6)
    protocol.storage = OriginQuotaStorage(self_id=node.peer_id.to_base58(), policy=policy, is_dht_peer=is_dht_peer,
                                          max_records=records.max_stored_records,
                                          max_records_per_peer=records.max_records_per_peer,
                                          max_bytes=records.max_stored_bytes,
                                          max_records_per_origin=records.max_records_per_origin,
                                          reserve=records.storage_reserve,
                                          known_after=records.known_publisher_after)
    if not reach.dht_is_server(net.reach_mode):
        return origins
    protocol.client_mode = False
    protocol.node_info = dht_pb2.NodeInfo(node_id=node.node_id.to_bytes())
    servicer = DHTServicer(protocol=protocol, storage=protocol.storage, checker=checker, policy=policy,
                           counters=counters, origins=origins,
                           store_rate=StoreRate(rate=records.store_rate, burst=records.store_burst))
    await protocol.add_p2p_handlers(node.p2p, servicer)
    if net.peers:  # now as a server: every peer this lookup visits adds this one to its routing table
        await node.find_nearest_nodes([node.node_id])
    return origins


def visible_maddrs(loop: LoopThread, node: DHTNode) -> list[str]:
    """The multiaddrs p2pd now tells peers to dial this node at (refreshed), [] while it has none.

    A relayed daemon announces only relay circuits, so until its first slot is reserved it
    has no address at all, and hivemind raises ValueError for that: here it is a fact to
    wait out (`wait_for_relay_slot`), not a failed start.
    """
    try:
        return [str(m) for m in loop.run(node.get_visible_maddrs(latest=True), timeout=10.0)]
    except ValueError as exc:
        if "No multiaddrs" not in str(exc):
            raise
        return []


def wait_for_relay_slot(loop: LoopThread, node: DHTNode, maddrs: list[str], *, wait: float) -> list[str]:
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


async def close_node(node: DHTNode) -> None:
    """Shuts the DHT node down, then its p2pd."""
    await node.shutdown()
    await node.p2p.shutdown()
