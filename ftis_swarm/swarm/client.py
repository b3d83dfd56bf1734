"""`SwarmClient`: what a node calls to publish its groups and gather its peers'.

The client owns an in-process DHT peer on a background event loop (the `peer` wing), the store
of its own bodies with the stream handler that serves them (`bodies`), the run's gossip
topic (`channel`) and the background gatherer (`gatherer`). All calls are synchronous and
safe from the node's main thread:

    client = SwarmClient.start(cfg, tokenizer_fp=fp, vocab_size=V, policy=ledger)  # blocks until joined
    result = client.publish_round(groups, round=r, correct=hints)  # one signed pointer: gossiped, then stored
    client.set_budget(budget)                # optional: fetch only what the next update takes (peers.intake.Budget)
    groups = client.gather(deadline=10.0, round=r)  # as soon as every live peer's round is in, or at the deadline
    client.drain_peer_faults()              # {peer id: Counter(reason)} since the last call, for the ledger
    client.hints(group_ids)                 # {group id: (correct, samples)} its publisher signed, to check
    client.counters(); client.shutdown()
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import threading
import time
from collections import Counter, OrderedDict
from typing import Optional

from hivemind.utils.timed_storage import get_dht_time

from ftis_swarm.config import LedgerConfig, SwarmConfig
from ftis_swarm.peers.intake import Budget
from ftis_swarm.peers.policy import ALLOW_ALL, PeerPolicy
from ftis_swarm.peers.protocol import PublishResult, publish_refusal
from ftis_swarm.swarm.counters import LoopErrors, SwarmCounters
from ftis_swarm.swarm.dht.publishing import (
    NearestPeers,
    Record,
    Replication,
    ReplicationLog,
    StoreOutcome,
    sign_records,
    store_records,
)
from ftis_swarm.swarm.dht.reading import KeyReader
from ftis_swarm.swarm.fetch.bodies import BodyStore, UploadCap
from ftis_swarm.swarm.fetch.gatherer import Gatherer
from ftis_swarm.swarm.fetch.legs import Legs
from ftis_swarm.swarm.fetch.streams import serve_bodies
from ftis_swarm.swarm.gossip.channel import GossipChannel
from ftis_swarm.swarm.gossip.gate import GossipGate
from ftis_swarm.swarm.gossip.haves import HaveAnnouncer
from ftis_swarm.swarm.keys import MEMBER_SUBKEY_NAME, gossip_topic, member_key, member_shard, pointer_key, window_of
from ftis_swarm.swarm.peer.handle import PeerHandle
from ftis_swarm.swarm.peer.start import open_peer
from ftis_swarm.swarm.peer.switch import switch_if_due
from ftis_swarm.swarm.records import (
    MAX_GROUPS_PER_ROUND,
    MAX_ROUND,
    RECORD_VERSION,
    GroupPointer,
    MemberRecord,
    make_round_pointer,
    make_subkey,
    round_name,
)
from ftis_swarm.wire import Group, content_id, encode_group

logger = logging.getLogger(__name__)

RECHECK_EVERY = 0.25
KEPT_HINTS = 4096
"""Accepted groups whose signed hint the client keeps for `hints` (the latest; a gather takes far fewer)."""
"""Seconds between two looks at who is live while a gather of a round waits (liveness ends without an event)."""


@dataclasses.dataclass(frozen=True)
class GatherFill:
    """How one gather filled the node's budget."""

    seconds: float = 0.0
    """Wall time of the gather call."""
    tokens: int = 0
    """Completion tokens of the groups it chose (refused ones not counted)."""
    groups: int = 0
    """Groups it chose (refused ones not counted)."""
    max_tokens: int = 0
    """The budget's `max_tokens` (0: no budget)."""


class SwarmClient:
    """A node's membership in the swarm (the `peers.protocol.Swarm` transport over hivemind).
    Create with `SwarmClient.start`; end with `shutdown`."""

    def __init__(self, *, cfg: SwarmConfig, tokenizer_fp: str, vocab_size: Optional[int], peer: PeerHandle,
                 policy: PeerPolicy, bans: LedgerConfig):
        self._cfg, self._tokenizer_fp, self._vocab_size = cfg, tokenizer_fp, vocab_size
        self._peer, self._loop, self._node = peer, peer.loop, peer.node
        self.peer_id: str = peer.peer_id
        """The `sender` every published group must carry."""
        self.visible_maddrs: list[str] = peer.visible_maddrs
        """Multiaddrs other peers can pass to `--peers` to join through this node."""
        self._counters = peer.counters
        self._contain = LoopErrors(logger, self._counters)
        self._bodies = BodyStore(hold_bytes=cfg.holders.hold_bytes)
        self._reader = KeyReader(self._node, peer.checker, self._counters)
        self._gatherer = Gatherer(reader=self._reader, p2p=self._node.p2p,
                                  cfg=cfg, peer_id=self.peer_id, tokenizer_fp=tokenizer_fp, vocab_size=vocab_size,
                                  counters=self._counters, policy=policy, origins=peer.origins,
                                  on_accepted=self._hold)
        self._legs: dict[str, Legs] = {}
        self._hints: OrderedDict[str, tuple[int, int]] = OrderedDict()  # group id -> signed (correct, samples)
        self._hints_lock = threading.Lock()
        self._window_groups: Counter[int] = Counter()  # pointers stored per window, for the membership record
        self._window_groups.update(self._earlier_claims())
        self._member_updated = 0.0
        self._signed_bytes = 0
        self._budget: Optional[Budget] = None
        self._fill = GatherFill()
        self._nearest = NearestPeers()  # the nearest peers of this node's keys, kept across publishes (dht.publishing)
        self._replication_log = ReplicationLog()  # a lone node says so once; refusals are warned of each round
        self._stop = threading.Event()
        self._shutdown_lock = threading.Lock()
        self._closed = False
        self._upload = UploadCap(bytes_per_window=cfg.holders.upload_bytes_per_window,
                                 window=cfg.holders.upload_window, max_held_serves=cfg.holders.max_holder_serves)
        self._policy = policy
        self._gate = GossipGate(checker=peer.checker, policy=policy, rate=cfg.gossip.rate, burst=cfg.gossip.burst,
                                ttl=cfg.records.ttl, ban_seconds=bans.gossip_ban_seconds,
                                max_ban_seconds=bans.max_ban_seconds) if cfg.gossip.enabled else None
        self._gossip: Optional[GossipChannel] = None
        self._announcer: Optional[concurrent.futures.Future] = None
        self._wire()

    def _wire(self) -> None:
        """Serves bodies, subscribes to the run's topic and starts gathering and announcing on the peer's
        current daemon (at start, and again after a switch of mode: `switch_reach_if_due`)."""
        cfg, peer = self._cfg, self._peer
        self._loop.run(serve_bodies(self._node.p2p, self._bodies, first_byte_timeout=cfg.fetch.first_byte_timeout,
                                    min_rate=cfg.fetch.min_body_rate,
                                    max_streams_per_peer=cfg.holders.max_streams_per_peer,
                                    policy=self._policy, counters=self._counters, upload=self._upload,
                                    on_served=self._served), timeout=10.0)
        if self._gate is not None:
            self._gossip = GossipChannel(p2p=self._node.p2p, topic=gossip_topic(cfg.run_id), gate=self._gate,
                                         self_id=self.peer_id, counters=self._counters,
                                         on_pointer=self._gatherer.on_gossip)
            self._loop.run(self._gossip.start(), timeout=10.0)
            self._gatherer.use_gossip(self._gossip)
        self._poller = self._loop.submit(self._gatherer.run())
        holders = cfg.holders
        if self._gossip is not None and holders.hold_bytes > 0 and holders.max_holder_serves > 0:  # `gossip.haves`
            self._announcer = self._loop.submit(HaveAnnouncer(
                node=self._node, channel=self._gossip, cfg=cfg, peer_id=self.peer_id,
                public_key=peer.identity.identity.public_key, puzzle=peer.puzzle, held=self._bodies.held,
                counters=self._counters).run())

    def _unwire(self) -> None:
        """Stops gathering, announcing and gossip on the peer's current daemon (a switch of mode, shutdown)."""
        self._poller.cancel()
        if self._announcer is not None:
            self._announcer.cancel()
        if self._gossip is not None:
            self._loop.loop.call_soon_threadsafe(self._gossip.close)

    def _rewire(self) -> None:
        """Reads, publishes and wires again through the peer's new daemon (after `peer.switch.reopen_peer`)."""
        self._node, self.visible_maddrs = self._peer.node, self._peer.visible_maddrs
        self._reader = KeyReader(self._node, self._peer.checker, self._counters)
        self._nearest = NearestPeers()
        self._gatherer.rewire(reader=self._reader, p2p=self._node.p2p, origins=self._peer.origins)
        self._wire()

    def switch_reach_if_due(self) -> bool:
        """Switches an `auto` node's mode when its last `reach_switch_after` dial-back rechecks all
        contradicted it (`dialback.Reachability.switch_due`): a port that closed (public to relayed) or
        opened (relayed to public). It stops gathering, gossip and announcing, restarts the daemon in the
        other mode with the same identity, port and ledger (`peer.switch.switch_if_due`: a few seconds
        without serving; a relayed node waits for its relay slot), and starts them again on the new daemon;
        what the gatherer saw and owes is kept. True when it switched; False when none was due, or the new
        daemon did not start and the old mode goes on (an ERROR, `reach_switch_failed`). Raises
        SwarmError only when the daemon restarted in neither mode. Called by `publish_round`."""
        reach = self._peer.reach
        if reach is None or reach.switch_due(self._cfg.transport.reach_switch_after) is None:
            return False
        with self._shutdown_lock:  # a shutdown from another thread waits for the new daemon, then closes it
            return not self._closed and switch_if_due(self._peer, pause=self._unwire, resume=self._rewire)

    def _hold(self, pointer: GroupPointer, body: bytes) -> None:
        """Keeps an accepted body to serve to others until its pointer can no longer be alive (`fetch.bodies`)."""
        if pointer.correct is not None and pointer.samples is not None:
            with self._hints_lock:
                self._hints[pointer.group_id] = (pointer.correct, pointer.samples)
                while len(self._hints) > KEPT_HINTS:
                    self._hints.popitem(last=False)
        if self._bodies.hold(pointer.group_id, body, until=self._kept_until(pointer.created_at)):
            self._counters.add("held_bodies")

    def _kept_until(self, created_at: float) -> float:
        """When a body created at `created_at` is kept no longer: its pointer can no longer be alive."""
        return created_at + self._cfg.records.ttl + self._cfg.records.max_clock_skew

    def _served(self, size: int, held: bool) -> None:
        self._counters.add("served_bytes", size)
        if held:
            self._counters.add("held_served_bytes", size)

    def _earlier_claims(self) -> dict[int, int]:
        """{window: pointers} this identity's membership record of the current window already claims.

        A restarted node (same identity) counts on from an earlier life's claim in the window it
        restarts in: readers read its pointer key again only when the count grows past what they
        read, so a count started afresh would hide its new groups for the rest of the window.
        """
        cfg = self._cfg
        window = window_of(get_dht_time(), cfg.records.window)
        key = member_key(cfg.run_id, window, member_shard(self.peer_id, cfg.records.member_shards))
        try:
            found = self._loop.run(self._reader.read([key], timeout=cfg.records.publish_timeout),
                                   timeout=cfg.records.publish_timeout + 1.0)
        except TimeoutError:
            logger.info("no answer about this identity's earlier membership record; counting from 0")
            return {}
        claims = [r.content.groups for r in found.get(key, {}).values()
                  if r.owner == self.peer_id and isinstance(r.content, MemberRecord) and r.content.window == window]
        if claims:
            logger.info("this identity claimed %d round pointers in window %d before it restarted", max(claims), window)
        return {window: max(claims)} if claims else {}

    @classmethod
    def start(cls, cfg: SwarmConfig, *, tokenizer_fp: str, vocab_size: Optional[int] = None,
              policy: PeerPolicy = ALLOW_ALL, bans: Optional[LedgerConfig] = None) -> "SwarmClient":
        """Starts p2pd and the DHT peer, joins through `cfg.transport.peers`, and starts gathering.

        `policy` (the node's peer ledger; by default everyone allowed, nobody scored) says
        whom to fetch from, store for and serve, and whose records to keep first; `bans` (the
        node's `LedgerConfig`) how long the gossip gate bans a sender that floods the topic.
        Raises SwarmError (one sentence) for a bad address, an identity already in use, or
        peers that do not answer within `cfg.transport.join_timeout`.
        """
        if not 0 < len(tokenizer_fp) <= 64:
            raise ValueError("tokenizer_fp must be 1 to 64 characters")
        if vocab_size is not None and vocab_size < 1:
            raise ValueError("vocab_size must be positive")
        peer = open_peer(cfg, thread_name="ftis-swarm", policy=policy, counters=SwarmCounters())
        try:
            client = cls(cfg=cfg, tokenizer_fp=tokenizer_fp, vocab_size=vocab_size, peer=peer, policy=policy,
                         bans=bans or LedgerConfig())
        except BaseException:
            peer.close()
            raise
        logger.info("joined the swarm as %s, reachability %s (%s), %d bootstrap peer(s)", client.peer_id,
                    peer.mode, " ".join(client.visible_maddrs) or "no listening address", len(cfg.transport.peers))
        return client

    def publish_round(self, groups: list[Group], *, round: int = 0,
                      correct: Optional[list[Optional[int]]] = None) -> PublishResult:
        """Makes this node's round `round`, `groups`, available to every peer: one signed pointer.

        Signs one `RoundPointer` naming every group (body hash, size, creation time,
        completion tokens, samples and, from `correct`, the hint: this node's own count of
        each group's correct answers, None for none), gossips it on the run's topic, then stores it under this node's
        key of the current window together with this node's membership record of the
        window (the count of its round pointers). The call waits for: the signatures, the
        hand-over to gossip, one lookup of the peers nearest both keys, and `min_replicas`
        of them holding each record (`dht.publishing`: the stores to the other replicas
        go on after it returns). `ok` is False, with a reason, when any group is refused or
        fewer than `min_replicas` peers hold a record. It first switches the node's mode if
        its rechecks say so (`switch_reach_if_due`). Never raises for what the swarm does
        (ValueError only for no groups or a bad `round`; SwarmError only when a due switch
        restarted the daemon in neither mode).
        """
        if not 0 <= round < MAX_ROUND or not groups:
            raise ValueError("round must be in 0..2^40-1 and a round must have at least one group")
        if correct is not None and (len(correct) != len(groups) or any(
                c is not None and not 0 <= c <= g.G for c, g in zip(correct, groups))):
            raise ValueError("correct must give one count in 0..G (or None) per group")
        self.switch_reach_if_due()
        started = time.monotonic()
        if len(groups) > MAX_GROUPS_PER_ROUND:
            return self._failed(f"a round of {len(groups)} groups is more than the {MAX_GROUPS_PER_ROUND} "
                                f"one pointer names", started)
        encoded: list[tuple[Group, bytes]] = []
        for group in groups:
            reason = self._refusal(group)
            body = b"" if reason else encode_group(group)
            if not reason and len(body) > self._cfg.wire.max_bytes:
                reason = f"the group is {len(body)} bytes, over wire.max_bytes={self._cfg.wire.max_bytes}"
            if reason:
                return self._failed(reason, started)
            encoded.append((group, body))
        group_ids = tuple(content_id(body) for _, body in encoded)
        if len(set(group_ids)) != len(group_ids):
            return self._failed("a round names the same group twice", started)
        for (group, body), group_id in zip(encoded, group_ids):
            self._bodies.put(group_id, body, until=self._kept_until(group.created_at))
        size = sum(len(body) for _, body in encoded)
        records, window = self._records(encoded, round=round, correct=correct)
        gossiped: list[bool] = []
        try:
            pointer, member = self._loop.run(self._publish_records(records, gossiped),
                                             timeout=self._cfg.records.publish_timeout)
        except TimeoutError as exc:
            return self._failed(str(exc), started, group_ids=group_ids, size=size)
        except Exception as exc:  # p2pd, hivemind or this node's own checks: a failed publish, not a crash
            logger.exception("publishing round %d failed", round)
            return self._failed(f"storing the pointer failed: {exc!r}", started, group_ids=group_ids, size=size)
        if pointer.accepted >= self._cfg.records.min_replicas:
            self._window_groups[window] += 1
        replication = Replication(pointer, member, min_replicas=self._cfg.records.min_replicas)
        ok = replication.ok
        result = PublishResult(
            ok=ok,
            reason=replication.reason,
            group_ids=group_ids, replicas=pointer.accepted, asked=pointer.asked, size=size,
            seconds=time.monotonic() - started, gossiped=bool(gossiped and gossiped[0]),
            pointer_bytes=self._signed_bytes,
        )
        if ok:
            self._counters.add("published", len(groups))
            self._counters.add("published_rounds")
        else:
            self._counters.add("publish_failed", len(groups))
        self._replication_log.report(round, replication, kept_locally=not self._node.protocol.client_mode)
        return result

    async def _publish_records(self, records: list[Record], gossiped: list[bool]) -> list[StoreOutcome]:
        """Signs the pointer and gossips it, then signs the membership record and stores both in the DHT."""
        pointer, member = records
        signed = sign_records(self._node, [pointer])
        self._signed_bytes = len(signed[0].signed.subkey) + len(signed[0].signed.value)
        if self._gossip is not None:
            gossiped.append(await self._gossip.publish(signed[0].signed))
        signed += sign_records(self._node, [member])
        return await store_records(self._node, signed, self._counters, enough=self._cfg.records.min_replicas,
                                   nearest_peers=self._nearest)

    def _records(self, encoded: list[tuple[Group, bytes]], *, round: int,
                 correct: Optional[list[Optional[int]]] = None) -> tuple[list[Record], int]:
        """The round's pointer and this node's membership record of the current window, unsigned."""
        cfg, now = self._cfg, get_dht_time()
        window = window_of(now, cfg.records.window)
        for old in [w for w in self._window_groups if w < window - 1]:
            del self._window_groups[old]
        self._member_updated = max(now, self._member_updated + 1e-3)  # each update must expire later
        member = MemberRecord(v=RECORD_VERSION, publisher=self.peer_id, run_id=cfg.run_id, window=window,
                              shards=cfg.records.member_shards, groups=self._window_groups[window] + 1,
                              updated_at=self._member_updated, puzzle=self._peer.puzzle)
        public_key = self._peer.identity.identity.public_key
        pointer = make_round_pointer(encoded, publisher=self.peer_id, run_id=cfg.run_id,
                                     tokenizer_fp=self._tokenizer_fp, window=window, round=round,
                                     puzzle=self._peer.puzzle, correct=correct)
        expiration = min(group.created_at for group, _ in encoded) + cfg.records.ttl
        return [
            Record(pointer_key(cfg.run_id, self.peer_id, window), make_subkey(public_key, round_name(round)),
                   pointer.model_dump(), expiration),
            Record(member_key(cfg.run_id, window, member_shard(self.peer_id, cfg.records.member_shards)),
                   make_subkey(public_key, MEMBER_SUBKEY_NAME), member.model_dump(), self._member_updated + cfg.records.ttl),
        ], window

    def set_budget(self, budget: Optional[Budget]) -> None:
        """From now on fetch only what the node's next update takes (`fetch.selection`); None: every group.

        `budget` is the node's own (`peers.intake.Budget.of`): a gather chooses from the
        pointers it saw which groups to fetch (earned peers first, then strangers at random),
        and a group it does not choose is neither fetched nor charged to its publisher.
        """
        self._budget = budget
        self._loop.run(self._gatherer.use_budget(budget), timeout=10.0)

    def gather(self, deadline: float, *, round: Optional[int] = None) -> list[Group]:
        """Peers' groups accepted since the last call. Never this node's own, never a group twice.

        With `round` (this node's round number) it returns as soon as no live peer is owed a
        round (`rounds`: every peer whose pointer was seen within two deadlines and whose
        groups were accepted before has its newest round in, accepted or rejected), or at the
        deadline, whichever comes first; alone, at once. With a budget (`set_budget`) only
        earned peers (policy score > 0) are owed, a round is in once its pointer is and its
        chosen groups are, and the gather also waits for the strangers' groups it chose
        (`fetch.selection`). Without `round` it returns `deadline` seconds from now. Either
        way it never waits for a number of peers.
        """
        if deadline < 0:
            raise ValueError("deadline must be >= 0 seconds")
        started = time.monotonic()
        if self._budget is not None and not self._closed:
            self._late_on_loop(self._gatherer.open_gather(2 * deadline, round), deadline, "opening the gather")
        if round is None:
            self._stop.wait(deadline)
        else:
            self._wait_for_round(deadline)
        if self._closed:
            return []
        used = self._late_on_loop(self._gatherer.close_gather(), deadline, "closing the gather") or (0, 0)
        drained = self._gatherer.drain()
        self._legs = {group.group_id: legs for group, legs in drained}
        self._fill = GatherFill(seconds=time.monotonic() - started, tokens=used[0], groups=used[1],
                                max_tokens=self._budget.max_tokens if self._budget is not None else 0)
        return [group for group, _ in drained]

    def _late_on_loop(self, coro, deadline: float, what: str):
        """Runs `coro` on the swarm's loop and waits up to `deadline` + 10 s for it; None when the loop is
        that late (a starved machine: counted `gather_loop_late`), the coroutine then runs when it can."""
        future = self._loop.submit(coro)
        try:
            return future.result(deadline + 10.0)
        except concurrent.futures.TimeoutError:
            self._counters.add("gather_loop_late")
            logger.warning("%s waited %.0f s for the swarm's event loop; going on without it", what, deadline + 10)
            return None
        except Exception as exc:  # the gatherer contains peers' faults; this is the last net: the node goes on
            self._contain(what, exc)
            return None

    def last_fill(self) -> "GatherFill":
        """How the last gather filled the budget (zeros without a budget)."""
        return self._fill

    def arrival_times(self) -> dict[str, float]:
        """{group id: unix time its body was accepted here} for the groups the last gather returned."""
        return {group_id: legs.accepted for group_id, legs in self._legs.items()}

    def visible_legs(self) -> dict[str, Legs]:
        """{group id: its `fetch.legs.Legs`} for the groups the last gather returned: unix times of its pointer
        seen here, chosen, its stream's slot taken, the stream begun on its body, its bytes in, and accepted."""
        return dict(self._legs)

    def fetch_times(self) -> dict[str, list[float]]:
        """{"publisher": [...], "holder": [...]}: seconds of each body fetch that succeeded since the last
        call (stream opened to body in, the last 4,096 at most), by whom it came from."""
        return self._gatherer.fetch_times()

    def sourceless(self) -> list[str]:
        """Group ids this node chose and gave up on for want of a source (no publisher or holder answered),
        until a have revives them or they expire (`fetch.gatherer`)."""
        return self._gatherer.sourceless()

    def _wait_for_round(self, deadline: float) -> None:
        changed, ends = self._gatherer.changed, time.monotonic() + deadline
        while not self._closed:
            changed.clear()
            if not self._gatherer.waiting(2 * deadline):
                self._counters.add("gathers_complete")
                break
            left = ends - time.monotonic()
            if left <= 0:
                self._counters.add("gathers_at_deadline")
                break
            changed.wait(min(left, RECHECK_EVERY))
        self._gatherer.rounds.consume()

    def origin_of(self, peer_id: str) -> Optional[str]:
        """The network origin of a peer's live connection (`swarm.origins`: `10.1.2.0/24`, "relayed"), or
        None when it has none. Safe from any thread. The strangers' draw goes by it, origin first, in this
        node's fetch selection and its intake (`peers.draw`)."""
        return self._peer.origins.origin_of(peer_id)

    def stored_by_origin(self) -> dict[str, int]:
        """Records this node holds for others, by the network origin of the peer that sent them
        (records of peers of no known origin, and its own, are not in it)."""
        storage = self._node.protocol.storage

        async def copy() -> dict[str, int]:  # on the loop thread, which changes it
            return dict(getattr(storage, "by_origin", {}))

        return self._peer.loop.run(copy(), timeout=10.0)

    def counters(self) -> dict:
        """Cumulative counts (see `ftis_swarm.swarm.counters`), JSON-able, with gauges:
        `serving_bodies` (own bodies served now), `stored_records` and `stored_bytes` (records held for the
        DHT, and the memory they are charged), `upload_window_peak` (the most body bytes sent in one
        `upload_window`: with a cap, at most it plus one body); and `reach`, this node's reachability
        (`dialback.Reachability.snapshot`) with `peers`: {"direct": n, "relayed": n}, the peers connected at
        the last read of p2pd's connections (`connection_paths`)."""
        snapshot = self._counters.snapshot()
        snapshot["serving_bodies"] = len(self._bodies)
        snapshot["stored_records"] = self._node.protocol.storage.held
        snapshot["stored_bytes"] = self._node.protocol.storage.held_bytes
        snapshot["upload_window_peak"] = self._upload.peak
        if self._peer.reach:
            paths = Counter(self.connection_paths().values())
            snapshot["reach"] = {**self._peer.reach.snapshot(),
                                 "peers": {"direct": paths["direct"], "relayed": paths["relayed"]}}
        else:
            snapshot["reach"] = None
        return snapshot

    def connection_paths(self) -> dict[str, str]:
        """{peer id: "direct" | "relayed"}: how this node reaches each peer it is connected to (direct when
        one connection is, e.g. a hole punch's), as p2pd listed them at the gatherer's last poll
        (`swarm.origins`). Safe from any thread."""
        return self._peer.origins.paths()

    def connections(self) -> dict[str, list[str]]:
        """{peer id: the remote multiaddr of each connection p2pd holds to it} (a `/p2p-circuit` one goes
        through a relay), as of the same read as `connection_paths`. Safe from any thread."""
        return self._peer.origins.connections()

    def hints(self, group_ids: list[str]) -> dict[str, tuple[int, int]]:
        """{group id: (correct, samples)}: the hint its publisher signed in the pointer of each accepted group
        of `group_ids` that had one (a group of a publisher without hints is left out). Safe from any thread."""
        with self._hints_lock:
            return {gid: self._hints[gid] for gid in group_ids if gid in self._hints}

    def drain_announced(self) -> list[tuple[str, int, int]]:
        """(publisher, samples, correct): the hint of each group a screened pointer named since the last call,
        fetched or not (the gatherer's; `peers/cherry.py` reads them). Safe from any thread."""
        return self._gatherer.drain_announced()

    def drain_peer_faults(self) -> dict[str, Counter[str]]:
        """{peer id: Counter(reason)}: the rejections and faults each peer caused since the last call.

        Reasons are those of `counters` (`rejected` and `faults`); the node charges them to its ledger.
        """
        return self._counters.drain_peer_faults()

    def shutdown(self) -> None:
        """Stops gathering, closes the DHT peer and p2pd, releases the identity. Idempotent."""
        with self._shutdown_lock:
            if self._closed:
                return
            self._closed = True
            self._stop.set()
            self._gatherer.changed.set()
            self._unwire()
            self._peer.close()
            logger.info("left the swarm (%s)", self.peer_id)

    def __enter__(self) -> "SwarmClient":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

    def _refusal(self, group: Group) -> str:
        cfg, now = self._cfg, get_dht_time()
        reason = publish_refusal(group, closed=self._closed, peer_id=self.peer_id, run_id=cfg.run_id,
                                 tokenizer_fp=self._tokenizer_fp)
        if reason:
            return reason
        if group.created_at > now + cfg.records.max_clock_skew:
            return f"group created {group.created_at - now:.0f} s in the future"
        if now - group.created_at > cfg.records.ttl:
            return f"group created {now - group.created_at:.0f} s ago, older than the ttl of {cfg.records.ttl:.0f} s"
        return ""

    def _failed(self, reason: str, started: float, **fields: object) -> PublishResult:
        self._counters.add("publish_failed")
        logger.warning("publish refused: %s", reason)
        return PublishResult(ok=False, reason=reason, seconds=time.monotonic() - started, **fields)
