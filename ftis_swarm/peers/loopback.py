"""An in-process swarm: nodes of one process publish and gather through a shared `LoopbackHub`.

The lab runs several real `Node`s in one process (the experiment's arms, `bench attacks`)
with this transport in place of the hivemind swarm (`peers/protocol.py`):

    hub = LoopbackHub()
    node = Node(cfg, swarm=hub.member("A"))   # the factory of A's swarm; peer id "A"
    hub.inject("forger", body)                 # bytes any publisher may send, honest or not
    hub.set_origin("forger", "10.0.0.0/24")    # a network origin (default: each peer its own)

It carries bytes only: a publish encodes each group of the round with the wire codec and
posts the bodies to every other member's inbox (in publish order); a gather decodes each body and applies
the checks the hivemind swarm applies after a fetch (`swarm.records.screen_pointer` and
`check_body`): the body's size, the codec's gate with this node's token bound, the sender
is the publisher, the run and the tokenizer are this node's, the creation time within the
ttl and clock skew. A refused body is counted against its publisher (`drain_peer_faults`,
the same reasons as the hivemind swarm's), a refused publisher is not read at all, and a
group id is delivered once. The node's intake runs after, once, in the node.

What the hub stands in for: the publisher of a body is who posted it (on the hivemind
swarm, the key that signed its pointer), and its origin what the hub was told
(`member(..., origin=)`, `set_origin`; on the hivemind swarm, the address of its
connection); by default each peer is an origin of its own, its peer id. There is no latency and no loss: `gather`
returns at once with what was posted since the last call, so a caller that wants every
peer's round in runs the nodes in lockstep (every publish of a round before any gather).
Nothing here is thread-safe beyond the hub's lock on its inboxes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, defaultdict
from typing import Optional

from ftis_swarm.config import SwarmConfig
from ftis_swarm.peers import faults
from ftis_swarm.peers.intake import Budget
from ftis_swarm.peers.policy import ALLOW_ALL, PeerPolicy
from ftis_swarm.peers.protocol import PublishResult, SwarmFactory, publish_refusal
from ftis_swarm.wire import Group, WireError, WireVersionError, content_id, decode_group, encode_group

log = logging.getLogger(__name__)


class LoopbackHub:
    """The room the loopback swarms of one process share: each member's inbox of (publisher, body)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._members: dict[str, "LoopbackSwarm"] = {}
        self._origins: dict[str, str] = {}

    def member(self, peer_id: str, *, origin: Optional[str] = None) -> SwarmFactory:
        """The `SwarmFactory` a node builds its swarm with; the swarm joins the hub as `peer_id`, from
        `origin` (None: its own)."""
        if origin is not None:
            self.set_origin(peer_id, origin)

        def attach(cfg: SwarmConfig, *, tokenizer_fp: str, vocab_size: Optional[int] = None,
                   policy: PeerPolicy = ALLOW_ALL) -> LoopbackSwarm:
            return self.attach(peer_id, cfg, tokenizer_fp=tokenizer_fp, vocab_size=vocab_size, policy=policy)

        return attach

    def attach(self, peer_id: str, cfg: SwarmConfig, *, tokenizer_fp: str, vocab_size: Optional[int] = None,
               policy: PeerPolicy = ALLOW_ALL) -> "LoopbackSwarm":
        """A new member's swarm; ValueError when `peer_id` is already a member."""
        if not peer_id:
            raise ValueError("a loopback peer id must not be empty")
        with self._lock:
            if peer_id in self._members:
                raise ValueError(f"peer id {peer_id!r} is already a member of this hub")
            swarm = LoopbackSwarm(self, peer_id=peer_id, cfg=cfg, tokenizer_fp=tokenizer_fp, vocab_size=vocab_size,
                                  policy=policy)
            self._members[peer_id] = swarm
        return swarm

    def set_origin(self, peer_id: str, origin: str) -> None:
        """Puts `peer_id` (a member or any publisher) in network origin `origin`: the lab's crowd in one."""
        if not origin:
            raise ValueError("a loopback origin must not be empty")
        with self._lock:
            self._origins[peer_id] = origin

    def origin_of(self, peer_id: str) -> str:
        """The origin set for `peer_id`, else its own (the peer id)."""
        with self._lock:
            return self._origins.get(peer_id, peer_id)

    def inject(self, publisher: str, body: bytes) -> None:
        """Posts `body` as `publisher` to every member but the publisher: what any peer may send, forged or not."""
        with self._lock:
            for peer_id, swarm in self._members.items():
                if peer_id != publisher:
                    swarm._inbox.append((publisher, bytes(body)))

    def served(self, publisher: str, n: int) -> None:
        with self._lock:
            swarm = self._members.get(publisher)
        if swarm is not None:
            swarm._counts["served_bytes"] += n

    def leave(self, peer_id: str) -> None:
        with self._lock:
            self._members.pop(peer_id, None)


class LoopbackSwarm:
    """One node's membership in a `LoopbackHub` (the `Swarm` protocol). Made by `LoopbackHub.attach`."""

    def __init__(self, hub: LoopbackHub, *, peer_id: str, cfg: SwarmConfig, tokenizer_fp: str,
                 vocab_size: Optional[int], policy: PeerPolicy) -> None:
        self._hub, self._cfg, self._policy = hub, cfg, policy
        self._tokenizer_fp, self._vocab_size = tokenizer_fp, vocab_size
        self.peer_id = peer_id
        self.visible_maddrs: list[str] = []
        self._inbox: list[tuple[str, bytes]] = []
        self._delivered: set[str] = set()
        self._counts: Counter[str] = Counter()
        self._rejected: Counter[str] = Counter()
        self._refused: Counter[str] = Counter()  # publisher -> bodies not read: the policy refused it
        self._undrained: defaultdict[str, Counter[str]] = defaultdict(Counter)
        self._closed = False
        self._budget: Optional[Budget] = None

    def publish_round(self, groups: list[Group], *, round: int = 0,
                      correct: Optional[list[Optional[int]]] = None) -> PublishResult:
        """Posts the round's bytes to every other member, in order; refused whole (a result with a reason)
        as the hivemind swarm refuses a round with any bad group."""
        started = time.monotonic()
        if round < 0 or not groups:
            raise ValueError("round must be >= 0 and a round must have at least one group")
        bodies = []
        for group in groups:
            why = self._refusal(group)  # a sentence for the caller, not a fault reason
            body = b"" if why else encode_group(group)
            if not why and len(body) > self._cfg.wire.max_bytes:
                why = f"the group is {len(body)} bytes, over wire.max_bytes={self._cfg.wire.max_bytes}"
            if why:
                self._counts["publish_failed"] += len(groups)
                log.warning("publish refused: %s", why)
                return PublishResult(ok=False, reason=why, seconds=time.monotonic() - started)
            bodies.append(body)
        for body in bodies:
            self._hub.inject(self.peer_id, body)
        self._counts["published"] += len(bodies)
        return PublishResult(ok=True, reason="", group_ids=tuple(content_id(b) for b in bodies),
                             size=sum(map(len, bodies)), seconds=time.monotonic() - started)

    def hints(self, group_ids: list[str]) -> dict[str, tuple[int, int]]:
        """None: the hub carries bodies without pointers, so `publish_round`'s `correct` is not sent."""
        return {}

    def set_budget(self, budget: Optional[Budget]) -> None:
        """Kept, not used: a hub member reads every body at no cost, and the node's intake applies the budget."""
        self._budget = budget

    def origin_of(self, peer_id: str) -> Optional[str]:
        """The hub's origin of `peer_id` (`LoopbackHub.set_origin`; by default the peer's own)."""
        return self._hub.origin_of(peer_id)

    def gather(self, deadline: float, *, round: Optional[int] = None) -> list[Group]:
        """The groups posted to this member since the last call that pass the checks, in posting order; at once."""
        if deadline < 0:
            raise ValueError("deadline must be >= 0 seconds")
        if self._closed:
            return []
        with self._hub._lock:
            posted, self._inbox = self._inbox, []
        out = []
        for publisher, body in posted:
            group = self._accept(publisher, body)
            if group is not None:
                out.append(group)
        return out

    def _accept(self, publisher: str, body: bytes) -> Optional[Group]:
        """The decoded group, or None with its reason counted against `publisher` (as `swarm.records.check_body`)."""
        cfg = self._cfg
        if not self._policy.allows(publisher):
            self._counts["skipped_refused"] += 1  # the hivemind swarm does not fetch from a refused peer
            self._refused[publisher] += 1
            return None
        if len(body) > cfg.wire.max_bytes:
            return self._reject(publisher, faults.OVERSIZE)
        self._counts["fetched_bytes"] += len(body)
        self._hub.served(publisher, len(body))
        try:
            group = decode_group(body, vocab_size=self._vocab_size, limits=cfg.wire, tokenizer_fp=self._tokenizer_fp)
        except WireVersionError as exc:  # another release: not a fault
            log.debug("group from %s: %s", publisher, exc)
            return self._reject(publisher, faults.OLD_VERSION)
        except WireError as exc:
            log.debug("malformed group from %s: %s", publisher, exc)
            return self._reject(publisher, faults.BODY_MALFORMED)
        now = time.time()
        if group.sender != publisher:
            return self._reject(publisher, faults.SENDER_MISMATCH)
        if group.run_id != cfg.run_id:
            return self._reject(publisher, faults.RUN_ID)
        if group.tokenizer_fp != self._tokenizer_fp and not (cfg.fetch.other_tokenizers and group.aligned):
            return self._reject(publisher, faults.POINTER_TOKENIZER)
        if group.created_at > now + cfg.records.max_clock_skew:
            return self._reject(publisher, faults.FUTURE)
        if now - group.created_at > cfg.records.ttl:
            return self._reject(publisher, faults.STALE)
        if group.group_id in self._delivered:
            return None
        self._delivered.add(group.group_id)
        self._counts["accepted"] += 1
        return group

    def _reject(self, publisher: str, reason: str) -> None:
        self._rejected[reason] += 1
        self._undrained[publisher][reason] += 1
        return None

    def _refusal(self, group: Group) -> str:
        return publish_refusal(group, closed=self._closed, peer_id=self.peer_id, run_id=self._cfg.run_id,
                               tokenizer_fp=self._tokenizer_fp)

    def drain_peer_faults(self) -> dict[str, Counter[str]]:
        drained, self._undrained = dict(self._undrained), defaultdict(Counter)
        return drained

    def drain_announced(self) -> list[tuple[str, int, int]]:
        """None: the hub carries bodies without pointers, so no hint is announced."""
        return []

    def counters(self) -> dict:
        """`published`, `publish_failed`, `accepted`, `skipped_refused`, `fetched_bytes`, `served_bytes`
        (bytes of this member's bodies others read), `rejected` ({reason: n}), `refused_by_peer` ({publisher: n})."""
        names = ("published", "publish_failed", "accepted", "skipped_refused", "fetched_bytes", "served_bytes")
        return {**{name: int(self._counts[name]) for name in names}, "rejected": dict(self._rejected),
                "refused_by_peer": dict(self._refused)}

    def shutdown(self) -> None:
        if not self._closed:
            self._closed = True
            self._hub.leave(self.peer_id)
