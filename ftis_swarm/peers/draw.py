"""The strangers' draw: in which order an update takes the groups of peers without standing.

One function, used in both places that decide it: the swarm's fetch selection
(`swarm/fetch/selection.py`: which bodies to download) and the node's intake
(`peers/intake.py`: which groups the update takes), so that a group the swarm fetched for
the strangers' share is the one the intake takes.

**Origin first.** Identities are cheap (a puzzle each) and network origins are not, so the
draw is by origin, then by identity (docs/method.md, "Peers without standing"):

1. every origin (`Swarm.origin_of`: a /24 or /48, `relayed`; a peer of no known origin is
   an origin of its own) takes one turn a pass, the origins in an order drawn afresh each
   update;
2. on its turn an origin gives one group of its next identity: its identities in an order
   drawn afresh too, one group of each in turn, then the second of each;
3. each identity's groups in the order offered.

A crowd of any size from one origin thus has as many turns as one honest newcomer from
another. The order is a pure function of the seed (the node's peer id: two nodes draw
differently), the draw's number (the node's round: a fresh order each update, the same in
the swarm at gather and in the intake at take, and the same after a resume) and the names:
it does not depend on which other groups are on offer, only their interleaving does.

**The earned tier too** (`earned_in_turns`): peers whose credit ranks them first are taken
origin by origin as well, so that 20 identities with credit on one origin have one turn a
pass, as one honest peer has. Origins go in the order of their best identity's score (ties:
the draw), identities within one in score order, one group each in turn. With tenure
(`tier`: the ledger's `tenure_class`, docs/method.md "Tenure"), the origins whose best
identity has served longest, on a doubling scale, take all their turns before a younger
class's first: a crowd that arrives at once waits behind the peers already serving. What an origin, and
what identities of recent credit together, may take of the budget is the callers' cap
(`peers/intake.py`, `swarm/fetch/selection.py`): the order here only says who goes first.
"""

from __future__ import annotations

import hashlib
from typing import Callable, Optional, Sequence, TypeVar

T = TypeVar("T")

OriginOf = Callable[[str], Optional[str]]
"""Peer id -> its network origin, None when not known (the transport's `origin_of`)."""


def draw_key(seed: int | str, draw: int, name: str) -> str:
    """The sort key of `name` (an origin or an identity) in draw `draw` of a node seeded `seed`."""
    return hashlib.sha256(f"{seed}:{draw}:{name}".encode()).hexdigest()


def origin_key(peer_id: str, origin_of: Optional[OriginOf]) -> str:
    """The origin a peer's turn belongs to: its network origin, or the peer alone when none is known."""
    origin = origin_of(peer_id) if origin_of is not None else None
    return f"origin:{origin}" if origin is not None else f"peer:{peer_id}"


def strangers_in_turns(offers: Sequence[T], *, sender: Callable[[T], str], origin_of: Optional[OriginOf],
                       seed: int | str, draw: int) -> list[T]:
    """`offers` in the strangers' draw order (module docstring): origins in turn, identities in turn
    within an origin, each identity's offers in the order given."""
    by_sender, by_origin = _grouped(offers, sender, origin_of)
    turns = []
    for origin in sorted(by_origin, key=lambda o: draw_key(seed, draw, o)):
        identities = sorted(by_origin[origin], key=lambda p: draw_key(seed, draw, f"identity:{p}"))
        turns.append(interleave([by_sender[p] for p in identities]))
    return interleave(turns)


def earned_in_turns(offers: Sequence[T], *, sender: Callable[[T], str], origin_of: Optional[OriginOf],
                    score: Callable[[str], float], seed: int | str, draw: int,
                    tier: Optional[Callable[[str], int]] = None) -> list[T]:
    """`offers` of earned peers in turns by origin (module docstring): origins by their best identity's
    score, identities by score within their origin, each identity's offers in the order given.

    `tier(peer)` (the ledger's `tenure_class`; None: one tier): the origins of the highest tier (their best
    identity's) take all their turns first, then the next tier's, each tier in turns as above."""
    by_sender, by_origin = _grouped(offers, sender, origin_of)
    level = tier or (lambda peer: 0)
    top = {o: max(level(p) for p in peers) for o, peers in by_origin.items()}
    best = {o: max(score(p) for p in peers) for o, peers in by_origin.items()}
    out: list[T] = []
    for t in sorted(set(top.values()), reverse=True):
        turns = []
        for origin in sorted((o for o in by_origin if top[o] == t), key=lambda o: (-best[o], draw_key(seed, draw, o))):
            identities = sorted(by_origin[origin],
                                key=lambda p: (-level(p), -score(p), draw_key(seed, draw, f"identity:{p}")))
            turns.append(interleave([by_sender[p] for p in identities]))
        out.extend(interleave(turns))
    return out


def _grouped(offers: Sequence[T], sender: Callable[[T], str],
             origin_of: Optional[OriginOf]) -> tuple[dict[str, list[T]], dict[str, list[str]]]:
    """(each sender's offers in the order given, each origin's senders in order of first offer)."""
    by_sender: dict[str, list[T]] = {}
    for offer in offers:
        by_sender.setdefault(sender(offer), []).append(offer)
    by_origin: dict[str, list[str]] = {}
    for peer in by_sender:
        by_origin.setdefault(origin_key(peer, origin_of), []).append(peer)
    return by_sender, by_origin


def interleave(queues: Sequence[Sequence[T]]) -> list[T]:
    """The first of each queue in turn, then the second of each, ..."""
    out: list[T] = []
    depth, total = 0, sum(map(len, queues))
    while len(out) < total:
        out.extend(q[depth] for q in queues if depth < len(q))
        depth += 1
    return out
