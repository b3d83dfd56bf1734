"""Reach: the p2pd flags that make a node behind NAT fetchable, and the relay service public nodes offer.

A home node (no open port) is a full peer through three paths, in p2pd's order of
preference: a direct connection where one exists (the peer dialed it, or hole punching
succeeded), the reverse connection it opened itself (a public peer streams back over it),
and a circuit through a relay. Hole punching (DCUtR) is on in every mode: hivemind's
`-autonat` turns it on with the AutoNAT service; when it works is in docs/swarm.md, Reach.
Modes (`TransportConfig.reachability`):

- `public`   dialable directly: serves the DHT, and offers a bounded relay service
             (`relay_max_circuits`, `relay_max_reservations`, `relay_data_limit` bytes and
             `relay_time_limit` seconds per relayed connection; the daemon has no rate cap).
- `relayed`  behind NAT: a DHT client that reserves a slot on its static relays (the
             bootstrap peers) at once. hivemind 1.1.12 does not expose `-relayDiscovery=0`;
             without it autorelay waits for 4 candidates, about 180 s, before reserving.
             With it a reservation takes about 3 s (measured). Reachability is forced
             private, so autorelay does not wait for AutoNAT either.
- `client`   behind NAT, no relay slot: public peers fetch from it over the connection it
             opened, other home nodes cannot.

autorelay advertises only relays with public addresses: a relay on loopback or a private
range gives its clients no circuit address, and peers then get "routing: not found".
Bodies fetched through a relay are checked against their signed pointer like any other:
the relay is never trusted.

What the node knows of its own reach (the mode, how it was decided, whether peers could
dial it at the last check) is `dialback.Reachability`.
"""

from __future__ import annotations

from typing import Literal

from hivemind.p2p import P2P

Mode = Literal["public", "relayed", "client"]
CIRCUIT = "/p2p-circuit"
"""The part of a multiaddr that says it reaches its peer through a relay."""
DIAL_BACKOFF = 5.5
"""Seconds p2pd refuses to dial a peer's addresses again after a failed dial (go-libp2p's base
backoff, 5 s, plus a margin); a fetch in that window fails at once with "dial backoff"."""


def in_dial_backoff(error: object) -> bool:
    """Whether a failed dial failed only because p2pd is backing off from an earlier failed one.

    That earlier dial was counted; counting the refusal too would drop a relayed publisher
    whose first circuit dial failed (two fetches at once, a retry after 0.25-0.5 s) before
    p2pd tries its circuit again.
    """
    return "dial backoff" in str(error)


def dht_is_server(mode: Mode) -> bool:
    """Whether a node in `mode` serves the DHT (a node others cannot dial would stall their lookups)."""
    return mode == "public"


def daemon_flags(mode: Mode, *, relay_service: bool, max_circuits: int, max_reservations: int,
                 data_limit: int, time_limit: float) -> list[str]:
    """p2pd flags, besides hivemind's, for a node in `mode`."""
    if mode == "public":
        if not relay_service:
            return ["-relayService=0"]
        return ["-relayService=1", f"-relayMaxCircuits={max_circuits}", f"-relayMaxReservations={max_reservations}",
                f"-relayDataLimit={data_limit}", f"-relayTimeLimit={int(time_limit)}s"]
    flags = ["-relayService=0"]
    if mode == "relayed":
        flags += ["-relayDiscovery=0", "-forceReachabilityPrivate=1"]
    return flags


def with_flags(base: type[P2P], flags: list[str]) -> type[P2P]:
    """`base` (P2P or a subclass) whose p2pd gets `flags` appended to its command line."""
    if not flags:
        return base
    extra = tuple(flags)

    def make_process_args(*args, **kwargs) -> list[str]:
        return base._make_process_args(*args, **kwargs) + list(extra)

    return type(f"Reach{base.__name__}", (base,), {"_make_process_args": staticmethod(make_process_args)})
