"""The transport seam: what a node asks of a swarm, and how it gets one.

A node uses exactly these members of its swarm; anything that has them is a transport.
Two exist: the hivemind `SwarmClient` (`ftis_swarm.swarm`, over a DHT and gossip between
processes) and `LoopbackSwarm` (`peers/loopback.py`, nodes of one process on a shared hub).
Both carry a group as the wire codec's bytes and hand the node decoded `Group`s whose
sender is the peer that published them; what a node then takes of them (caps, budget,
duplicates, scoring) is decided once, in the node, whatever the transport.

A node gets its swarm from a `SwarmFactory` (the hivemind one by default; the lab passes
a hub's): called once with the node's swarm config, tokenizer fingerprint, token bound and
peer ledger (the `PeerPolicy` that says whom to take groups from).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Optional, Protocol, runtime_checkable

from ftis_swarm.config import SwarmConfig
from ftis_swarm.peers.intake import Budget
from ftis_swarm.peers.policy import PeerPolicy
from ftis_swarm.wire import Group


@dataclasses.dataclass(frozen=True)
class PublishResult:
    """The outcome of one round's publish. `ok` is True only when the round reached the peers it must
    (for the hivemind swarm: the round pointer and the membership record each reached `cfg.records.min_replicas`
    peers)."""

    ok: bool
    reason: str
    """Empty when ok; otherwise one sentence saying why the round is not available to peers."""
    group_ids: tuple[str, ...] = ()
    """The round's group ids, in the order given."""
    replicas: int = 0
    """Other peers that held the pointer when the call returned (more may take it after)."""
    asked: int = 0
    """Other peers asked to hold the pointer (the nearest `num_replicas` found)."""
    size: int = 0
    """Bytes of the encoded bodies, all together."""
    pointer_bytes: int = 0
    """Bytes of the signed pointer (subkey and signed value): what one store or gossip message carries."""
    seconds: float = 0.0
    """Wall time of the publish call."""
    gossiped: bool = False
    """The pointer was handed to the run's gossip topic (before the DHT store)."""


@runtime_checkable
class Swarm(Protocol):
    """A node's membership in a swarm: the members the node calls (and the addresses the CLI prints)."""

    peer_id: str
    """The `sender` every published group must carry, and the node's name in its peers' ledgers."""
    visible_maddrs: list[str]
    """Addresses other peers can join through (empty for a transport without addresses)."""

    def publish_round(self, groups: list[Group], *, round: int = 0,
                      correct: Optional[list[Optional[int]]] = None) -> PublishResult:
        """Makes this node's round `round`, `groups`, available to every peer; never raises for what the
        transport does (a result with a reason). `correct`: this node's own count of each group's correct
        answers (the hint a transport with pointers signs; None: no hint)."""
        ...

    def hints(self, group_ids: list[str]) -> dict[str, tuple[int, int]]:
        """{group id: (correct, samples)}: the hint each accepted group's publisher signed, for those that had
        one (a transport without pointers: none)."""
        ...

    def set_budget(self, budget: Optional[Budget]) -> None:
        """The node's update budget (`peers.intake.Budget`): a transport that downloads bodies may fetch only
        what an update can take (earned peers first, then strangers by draw); None fetches everything."""
        ...

    def gather(self, deadline: float, *, round: Optional[int] = None) -> list[Group]:
        """Peers' groups accepted since the last call, decoded and checked; never this node's own, never one twice."""
        ...

    def origin_of(self, peer_id: str) -> Optional[str]:
        """The network origin a peer's groups come from (the hivemind swarm: the /24 or /48 of its live
        connection, `relayed` through a relay; the loopback: what the hub says), None when not known. The
        strangers' draw goes origin first (`peers/draw.py`); a peer of no known origin is one of its own."""
        ...

    def drain_peer_faults(self) -> dict[str, Counter[str]]:
        """{peer id: Counter(reason)}: what each peer sent that was refused since the last call, for the ledger."""
        ...

    def drain_announced(self) -> list[tuple[str, int, int]]:
        """(publisher, samples, correct) of each group a screened pointer named with a hint since the last call,
        fetched or not (`peers/cherry.py`); a transport without pointers: none."""
        ...

    def counters(self) -> dict:
        """Cumulative counts, JSON-able: at least `fetched_bytes`, `served_bytes` and `rejected` ({reason: n})."""
        ...

    def shutdown(self) -> None:
        """Leaves the swarm; idempotent."""
        ...


def publish_refusal(group: Group, *, closed: bool, peer_id: str, run_id: str, tokenizer_fp: str) -> str:
    """Why a transport refuses to publish `group` for this node ("" when it does not): the checks every peer
    applies to it after decode, which a node's own group must pass."""
    if closed:
        return "the client is shut down"
    if group.sender != peer_id:
        return f"group sender {group.sender!r} is not this node's peer id {peer_id}"
    if group.run_id != run_id:
        return f"group run id {group.run_id!r} is not this swarm's {run_id!r}"
    if group.tokenizer_fp != tokenizer_fp:
        return f"group tokenizer fingerprint {group.tokenizer_fp!r} is not this node's {tokenizer_fp!r}"
    return ""


class SwarmFactory(Protocol):
    """Starts a node's swarm (blocks until it can publish and gather)."""

    def __call__(self, cfg: SwarmConfig, *, tokenizer_fp: str, vocab_size: Optional[int],
                 policy: PeerPolicy) -> Swarm: ...
