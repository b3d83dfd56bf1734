"""Peers' rounds, as their pointers announce them: who is live, and whose newest round is in.

Every pointer carries its publisher's round number and how many groups the publisher has
for that round (`GroupPointer.round`, `.round_groups`). A gather of this node's round
returns as soon as no live peer is still owed, or at its deadline:

- a peer is **live** when a pointer of it was seen within the horizon (two deadlines):
  its time is when this node first saw it, or its signed creation time plus the clock
  skew if that is earlier (an old pointer read late does not make a dead peer live);
- a live peer **counts** once one of its groups was accepted (or the policy scores it):
  identities that only sign can never hold a gather up;
- a counting live peer is **owed** until its newest round (that of its most recently
  created pointer) is complete, every announced group of it accepted or rejected, and
  not already handed out by an earlier gather of a round (`consume`).

So a gather waits for each peer's next round, whatever its number: peers need not run
in step, a slow one is waited for until the deadline, and a dead one stops counting after
two deadlines. A peer that restarts and publishes a round number it used before is waited
for until the deadline once (the round reads as handed out already).

Thread-safe: the swarm's loop notes and settles, the node's thread asks and consumes. Its
per-round group ids are its own, not read from `PointerTable` (the loop's alone, unlocked): the
gatherer notes a pointer when the table first sees it and settles it at the table's transitions
out of the round's wait (offered, passed, accepted, rejected).
"""

from __future__ import annotations

import dataclasses
import math
import threading
from typing import Callable

from ftis_swarm.swarm.records import GroupPointer


@dataclasses.dataclass
class _Round:
    announced: int = 0
    seen: set[str] = dataclasses.field(default_factory=set)
    settled: set[str] = dataclasses.field(default_factory=set)
    created: float = -math.inf
    consumed: bool = False

    def complete(self) -> bool:
        return len(self.settled) >= self.announced > 0


@dataclasses.dataclass
class _Peer:
    rounds: dict[int, _Round] = dataclasses.field(default_factory=dict)
    newest: int = -1
    newest_created: float = -math.inf
    last_seen: float = -math.inf
    proven: bool = False

    def owed(self) -> bool:
        newest = self.rounds.get(self.newest)
        return newest is None or not newest.complete() or newest.consumed


class RoundTracker:
    """What the gatherer knows of its peers' rounds (see the module docstring)."""

    def __init__(self, *, max_clock_skew: float):
        self._skew = max_clock_skew
        self._lock = threading.Lock()
        self._peers: dict[str, _Peer] = {}

    def note(self, pointer: GroupPointer, *, now: float) -> None:
        """A pointer seen for the first time (from the gossip topic or the DHT)."""
        with self._lock:
            peer = self._peers.setdefault(pointer.publisher, _Peer())
            state = peer.rounds.setdefault(pointer.round, _Round())
            state.seen.add(pointer.group_id)
            state.announced = max(state.announced, pointer.round_groups)
            state.created = max(state.created, pointer.created_at)
            if pointer.created_at >= peer.newest_created:
                peer.newest, peer.newest_created = pointer.round, pointer.created_at
            peer.last_seen = max(peer.last_seen, min(now, pointer.created_at + self._skew))

    def settle(self, pointer: GroupPointer, *, accepted: bool) -> None:
        """The pointer's group was accepted (it is in the inbox) or rejected: either way, it is in."""
        with self._lock:
            peer = self._peers.get(pointer.publisher)
            state = peer.rounds.get(pointer.round) if peer is not None else None
            if state is None or pointer.group_id not in state.seen:
                return
            state.settled.add(pointer.group_id)
            peer.proven = peer.proven or accepted

    def owed(self, *, now: float, horizon: float, scored: Callable[[str], bool],
             proven_counts: bool = True) -> list[str]:
        """The live, counting peers whose newest round is not in yet (or was handed out already).

        `proven_counts` False: only the peers `scored` counts (a gather with a budget waits for
        its earned peers alone)."""
        with self._lock:
            return sorted(p for p, peer in self._peers.items()
                          if peer.last_seen >= now - horizon and ((proven_counts and peer.proven) or scored(p))
                          and peer.owed())

    def consume(self) -> None:
        """Marks every peer's newest round that is complete as handed out (a gather of a round ends)."""
        with self._lock:
            for peer in self._peers.values():
                newest = peer.rounds.get(peer.newest)
                if newest is not None and newest.complete():
                    newest.consumed = True

    def forget(self, *, now: float, ttl: float) -> None:
        """Drops rounds whose pointers cannot be alive any more, and peers left with none."""
        with self._lock:
            for publisher, peer in list(self._peers.items()):
                for number in [n for n, state in peer.rounds.items() if state.created < now - ttl - self._skew]:
                    del peer.rounds[number]
                if not peer.rounds:
                    del self._peers[publisher]
