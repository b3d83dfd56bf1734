"""Where a peer's connection comes from: its network origin, for quotas by origin as well as by identity.

Identities cost a puzzle (`puzzle`), but one machine can still afford a crowd of them; a
crowd shares its network address. As libp2p's peer scoring does for IP colocation, an
origin is the prefix of the connection's remote address: a /24 for IPv4, a /48 for IPv6
(`TransportConfig.origin_prefix_v4`, `origin_prefix_v6`). The address is the one p2pd reports
for the live connection (`P2P.list_peers()`: the remote multiaddr of each connection), not
one a peer announces.

A connection through a relay (`/p2p-circuit`) shows the relay's address, which many honest
peers share (as do peers behind one CGNAT address: a quota by origin can cost them, which
is why the per-origin quotas sit well above the per-identity ones): such peers are judged
by identity, and all of them together by one global cap, the origin `RELAYED`. A peer with
no live connection has no known origin (`None`): only the per-identity quotas apply to it.

The same read says how this node reaches each connected peer (`paths`): `direct` when at
least one of its connections to the peer is direct (dialed either way, or hole-punched),
`relayed` when all go through a relay: what an operator reads as `reach.peers` in the
swarm's counters (docs/swarm.md, Reach).

Runs on the swarm's event loop. `OriginBook.refresh` reads p2pd's connection list at most
every `min_refresh` seconds; `origin_of` and `paths` answer from the last read.
"""

from __future__ import annotations

import ipaddress
import logging
import time
from typing import Optional

from hivemind.p2p import P2P

logger = logging.getLogger(__name__)

RELAYED = "relayed"
"""The one origin of every peer reached through a relay (its own address is not known)."""
DIRECT = "direct"
"""The path to a peer with at least one connection that does not go through a relay."""


def origin_of_maddr(maddr: str, *, prefix_v4: int, prefix_v6: int) -> Optional[str]:
    """The origin of a connection's remote multiaddr: its address's network (`10.1.2.0/24`),
    `RELAYED` for a relayed one, None when it holds no IP address."""
    if "/p2p-circuit" in maddr:
        return RELAYED
    parts = maddr.split("/")
    for family, prefix in (("ip4", prefix_v4), ("ip6", prefix_v6)):
        if family in parts[:-1]:
            address = parts[parts.index(family) + 1]
            try:
                return str(ipaddress.ip_network(f"{address}/{prefix}", strict=False))
            except ValueError:
                return None
    return None


class OriginBook:
    """Peer id -> origin of its live connection, from p2pd's connection list."""

    def __init__(self, p2p: P2P, *, prefix_v4: int, prefix_v6: int, min_refresh: float = 0.5):
        self._p2p, self._v4, self._v6, self._min_refresh = p2p, prefix_v4, prefix_v6, min_refresh
        self._origins: dict[str, str] = {}
        self._remote: dict[str, list[str]] = {}
        self._read_at = -float("inf")

    def connections(self) -> dict[str, list[str]]:
        """{peer id: the remote multiaddr of each of its connections} at the last refresh. Safe from any
        thread (the dict is replaced whole, never changed)."""
        return dict(self._remote)

    def paths(self) -> dict[str, str]:
        """{peer id: DIRECT | RELAYED} for every peer connected at the last refresh. Safe from any thread."""
        return {peer: DIRECT if any("/p2p-circuit" not in m for m in maddrs) else RELAYED
                for peer, maddrs in self._remote.items()}

    def origin_of(self, peer_id: str) -> Optional[str]:
        """The origin seen at the last refresh; None for a peer not connected then."""
        return self._origins.get(peer_id)

    async def lookup(self, peer_id: str) -> Optional[str]:
        """The origin of a peer that is calling this one now: re-reads the list when it is not in it."""
        if peer_id not in self._origins:
            await self.refresh()
        return self._origins.get(peer_id)

    async def refresh(self) -> None:
        now = time.monotonic()
        if now - self._read_at < self._min_refresh:
            return
        self._read_at = now
        remote: dict[str, list[str]] = {}
        for info in await self._p2p.list_peers():  # one entry per connection: a peer may have several
            remote.setdefault(info.peer_id.to_base58(), []).extend(str(m) for m in info.addrs)
        origins: dict[str, str] = {}
        for peer, maddrs in remote.items():
            found = [o for o in (origin_of_maddr(m, prefix_v4=self._v4, prefix_v6=self._v6) for m in maddrs)
                     if o is not None]
            if found:  # a direct connection wins over a relayed one
                origins[peer] = next((o for o in found if o != RELAYED), found[0])
        self._origins, self._remote = origins, remote
