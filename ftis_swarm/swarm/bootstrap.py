"""The bootstrap peer: a bare DHT peer that nodes join through (`ftis-node bootstrap`).

It publishes and gathers nothing, but it is a full DHT peer: it stores pointers near its
id and runs the same validators as every node, so its TTL and clock skew must match the
swarm's. It logs peers as their libp2p connections open and close.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Callable, Optional

from ftis_swarm.config import SwarmConfig
from ftis_swarm.swarm.peer.handle import PeerHandle
from ftis_swarm.swarm.peer.start import open_peer

logger = logging.getLogger(__name__)


class BootstrapPeer:
    """A running bootstrap peer; `shutdown` is idempotent."""

    def __init__(self, handle: PeerHandle):
        self._handle = handle
        self.peer_id = handle.peer_id
        self.visible_maddrs = handle.visible_maddrs
        self._closed = False

    @classmethod
    def start(cls, cfg: SwarmConfig) -> "BootstrapPeer":
        """Starts p2pd and a DHT peer on its `cfg.transport` host and port (joining its peers, if any).

        Without gossipsub: gossip reaches only the peers that subscribe to a run's topic, and
        a bootstrap peer subscribes to none (the nodes of a run connect to each other).
        """
        return cls(open_peer(cfg.replace(gossip={"enabled": False}), thread_name="ftis-bootstrap"))

    def connected_peers(self) -> set[str]:
        """Peer ids with an open libp2p connection to this peer."""
        infos = self._handle.loop.run(self._handle.node.p2p.list_peers(), timeout=10.0)
        return {info.peer_id.to_base58() for info in infos}

    def shutdown(self) -> None:
        if not self._closed:
            self._closed = True
            self._handle.close()


def write_maddrs_file(path: Path, maddrs: list[str]) -> None:
    """One multiaddr per line, written whole (a reader never sees half a file)."""
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text("".join(f"{m}\n" for m in maddrs))
    tmp.replace(path)


def run_bootstrap(cfg: SwarmConfig, *, stop: threading.Event, on_ready: Callable[[list[str]], None],
                  maddrs_file: Optional[Path] = None, check_every: float = 1.0) -> None:
    """Runs a bootstrap peer until `stop` is set, logging joins and leaves."""
    peer = BootstrapPeer.start(cfg)
    try:
        if maddrs_file is not None:
            write_maddrs_file(maddrs_file, peer.visible_maddrs)
        logger.info("bootstrap peer %s is up", peer.peer_id)
        on_ready(peer.visible_maddrs)
        known: set[str] = set()
        while not stop.wait(check_every):
            current = peer.connected_peers()
            for joined in sorted(current - known):
                logger.info("peer joined: %s", joined)
            for left in sorted(known - current):
                logger.info("peer left: %s", left)
            known = current
    finally:
        peer.shutdown()
        logger.info("bootstrap peer %s stopped", peer.peer_id)
