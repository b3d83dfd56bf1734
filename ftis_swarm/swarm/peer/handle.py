"""`PeerHandle`: a started local peer, what `open_peer` returns and `reopen_peer` restarts in place."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
from typing import Optional

from hivemind.dht.node import DHTNode
from hivemind.utils.multiaddr import Multiaddr

from ftis_swarm.config import SwarmConfig
from ftis_swarm.peers.policy import ALLOW_ALL, PeerPolicy
from ftis_swarm.swarm.counters import SwarmCounters
from ftis_swarm.swarm.dht.validators import RecordChecker
from ftis_swarm.swarm.identity import NodeIdentity
from ftis_swarm.swarm.origins import OriginBook
from ftis_swarm.swarm.peer import reach
from ftis_swarm.swarm.peer.daemon import close_node
from ftis_swarm.swarm.peer.dialback import Reachability
from ftis_swarm.swarm.peer.loop import LoopThread

logger = logging.getLogger(__name__)


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
        """How peers reach this node: public, relayed or client (peer/reach.py)."""
        return self.cfg.transport.reach_mode

    def listen_port(self) -> int:
        """The TCP port peers are told to dial: the first announced one, else the listening one (0 if none)."""
        ports = [int(Multiaddr(m)["tcp"]) for m in (self.cfg.transport.announce or self.visible_maddrs)
                 if "/tcp/" in m and reach.CIRCUIT not in m]
        if self.cfg.transport.announce:
            return ports[0] if ports else 0
        return self.cfg.transport.port or (ports[0] if ports else 0)

    def bound_port(self) -> int:
        """The TCP port of its first visible non-relay address (0 if none): the one p2pd listens on, unless
        `announce` names another (then `cfg.transport.port` is the listening one)."""
        ports = [int(Multiaddr(m)["tcp"]) for m in self.visible_maddrs if "/tcp/" in m and reach.CIRCUIT not in m]
        return ports[0] if ports else 0

    def askable_peers(self) -> list[str]:
        """Peers to ask for a dial-back: the `peers` first, then the DHT servers this node knows (public ones)."""
        known = [Multiaddr(m)["p2p"] for m in self.cfg.transport.peers]
        known += [peer_id.to_base58() for peer_id in self.node.protocol.routing_table.peer_id_to_uid]
        return [p for p in dict.fromkeys(known) if p != self.peer_id]

    @property
    def peer_id(self) -> str:
        return self.identity.identity.peer_id

    def close(self) -> None:
        """Shuts the node and p2pd down, stops the loop, releases the identity."""
        try:
            self.loop.run(close_node(self.node), timeout=10.0)
        except TimeoutError:
            logger.warning("the DHT peer did not close within 10 s; stopping its loop anyway")
        finally:
            self.loop.stop()
            self.identity.close()
