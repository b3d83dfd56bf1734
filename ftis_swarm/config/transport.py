"""The swarm's transport and reach: `TransportConfig` (swarm.transport), and `check_multiaddr`."""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Literal, Optional

from pydantic import Field, field_validator, model_validator

from ftis_swarm.config.base import Strict

_MULTIADDR = re.compile(r"/(ip4|ip6|dns|dns4|dns6)/([^/\s]+)/(tcp|udp)/(\d{1,5})((?:/[^/\s]+)*)")


def check_multiaddr(text: str) -> str:
    """`text` when it reads as a multiaddr (`/ip4/<address>/tcp/<port>[/p2p/<peer id>]`), else ValueError."""
    match = _MULTIADDR.fullmatch(text.strip())
    example = "/ip4/203.0.113.7/tcp/31337/p2p/<peer id>"
    if match is None:
        raise ValueError(f"{text!r} is not a multiaddr like {example}")
    proto, host, _, port, _ = match.groups()
    if proto in ("ip4", "ip6"):
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise ValueError(f"{text!r}: {host!r} is not an {proto} address") from None
    if not 0 < int(port) <= 65535:
        raise ValueError(f"{text!r}: port {port} is outside 1-65535")
    return text.strip()


class TransportConfig(Strict):
    """Transport and reach: where this node listens, whom it joins through, how peers reach it (docs/swarm.md,
    Reach), and what a connection's network origin is."""

    peers: list[str] = Field(default_factory=list)
    """Multiaddrs of peers already in the swarm (a bootstrap peer); empty: start a new swarm."""
    peers_file: Optional[Path] = None
    """A file of multiaddrs, one per line, added to `peers` at start (what `ftis-node bootstrap
    --maddrs-file` writes; docker-compose shares it through a volume)."""
    host: str = "0.0.0.0"
    """Address to listen on."""
    port: int = Field(0, ge=0, le=65535)
    """TCP port to listen on; 0 picks a free one."""
    announce: list[str] = Field(default_factory=list)
    """Multiaddrs to announce to peers instead of the listening ones (behind NAT)."""
    join_timeout: float = Field(30.0, gt=0)
    """Seconds to start the libp2p daemon and reach the --peers."""
    client_mode: bool = False
    """Accept no incoming connections (for nodes behind NAT); such a node can still gather. With
    `reachability` auto it means `relayed`."""
    reachability: Literal["auto", "public", "relayed", "client"] = "auto"
    """How peers reach this node (docs/swarm.md, Reach): `public` (dialable; serves the DHT and a
    bounded relay), `relayed` (behind NAT; a slot on the bootstrap peers' relays, so other home
    nodes fetch its groups), `client` (behind NAT; only public peers fetch from it, over the
    connection it opened). `auto`: `relayed` with `client_mode`; else the `peers` are asked to
    dial this node's port back: `public` if one could, else `relayed` (`public` with no peers)."""
    reach_recheck_every: float = Field(300.0, gt=0, le=86400)
    """Seconds between two dial-back rechecks of a running node (`swarm.peer.dialback.watch_reachability`:
    one short stream to each of at most 5 peers)."""
    reach_switch_after: int = Field(2, ge=1, le=1000)
    """Rechecks in a row that contradict the mode (a public node nobody could dial, a relayed one a peer
    could) before an `auto` node switches mode: a restart of its daemon in the other mode, with the same
    identity, port and ledger (docs/swarm.md, Reach). A configured mode never switches."""
    relay_wait: float = Field(15.0, ge=0, le=600)
    """Seconds a `relayed` node waits at start for a slot on a relay before it publishes (a WARNING
    if none: then only public peers can fetch its groups)."""
    relay_service: bool = True
    """When public, relay circuits for NAT'd peers within the four limits below."""
    relay_max_circuits: int = Field(16, ge=1, le=1024)
    """Relayed connections open at once for one peer."""
    relay_max_reservations: int = Field(128, ge=1, le=65536)
    """NAT'd peers holding a relay slot on this node at once."""
    relay_data_limit: int = Field(64 * 1024 * 1024, ge=64 * 1024)
    """Bytes relayed in each direction of one relayed connection before it is reset."""
    relay_time_limit: float = Field(1800.0, ge=1.0)
    """Seconds one relayed connection may last."""
    origin_prefix_v4: int = Field(24, ge=8, le=32)
    """An IPv4 peer's network origin: this prefix of its connection's address (a /24)."""
    origin_prefix_v6: int = Field(48, ge=16, le=128)
    """An IPv6 peer's network origin: this prefix of its connection's address (a /48)."""

    @property
    def reach_mode(self) -> Literal["public", "relayed", "client"]:
        """The reachability this node starts in, `auto` resolved without a probe (`swarm.peer.start.open_peer`
        probes an `auto` node that has peers)."""
        if self.reachability != "auto":
            return self.reachability
        return "relayed" if self.client_mode else "public"

    @field_validator("peers", "announce")
    @classmethod
    def _multiaddrs(cls, v: list[str]) -> list[str]:
        return [check_multiaddr(m) for m in v]

    @model_validator(mode="after")
    def _one_reachability(self) -> "TransportConfig":
        if self.client_mode and self.reachability == "public":
            raise ValueError("client_mode accepts no incoming connections, so reachability cannot be public")
        return self
