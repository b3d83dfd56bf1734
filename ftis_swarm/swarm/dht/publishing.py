"""Signing records, and storing them on the peers nearest their keys, counting who accepted each.

Why not `DHTNode.store`: it reports success as soon as any replica (this node included)
took the record, so a record that never left this node, or that p2pd dropped for size,
still reads as stored. Here each record is signed and checked by this node's own
checker (`sign_records`: the client gossips the signed pointer before storing it), the
nearest `num_replicas` other peers of all keys are found in one lookup, each is asked to
store its key's record, and the record is kept in local storage; the result is the number
of those peers that hold each record when `store_records` returns.

It returns as soon as every record is held by `enough` of the peers asked (or each of
its peers has answered): the other stores go on in the background, and their answers are
counted (`dht_stores_late`, `dht_stores_refused`) but reported to nobody. So a publish
waits for the nearest peers' lookup and the first `enough` acceptances, never for the
slowest replica.

The keys of a node's records stay the same for a whole window (its pointer key and its
membership key), so the nearest peers found for them are kept (`NearestPeers`) for
`NEAREST_SECONDS`, or until fewer than `enough` of them took a record: most publishes of
a window then cost no lookup at all, only the signatures and the first acceptances.

A round's two outcomes read as one `Replication`: enough peers hold both records, or no
other peer was found to ask (a swarm's first node, every round until a peer joins: no
fault), or peers were asked and too few took them. `ReplicationLog` says so: one INFO line
for a stretch alone, a WARNING for each round that peers refused.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from typing import Optional

from hivemind.dht.node import DHTNode
from hivemind.dht.protocol import DHTProtocol
from hivemind.dht.routing import DHTID
from hivemind.dht.storage import DictionaryDHTValue
from hivemind.dht.validation import DHTRecord
from hivemind.p2p import PeerID

from ftis_swarm.swarm.counters import SwarmCounters
from ftis_swarm.swarm.keys import key_id

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Record:
    """One record to store: its key, serialized subkey, value (a dict, unsigned) and expiry."""

    key: str
    subkey: bytes
    value: dict
    expiration: float


@dataclasses.dataclass(frozen=True)
class StoreOutcome:
    """How many of the peers asked to hold a record accepted it."""

    accepted: int
    asked: int


@dataclasses.dataclass(frozen=True)
class Replication:
    """How far a round's pointer and membership record got, against `min_replicas`."""

    pointer: StoreOutcome
    member: StoreOutcome
    min_replicas: int

    @property
    def ok(self) -> bool:
        """Both records are held by `min_replicas` other peers at least."""
        return min(self.pointer.accepted, self.member.accepted) >= self.min_replicas

    @property
    def alone(self) -> bool:
        """No other peer was found to ask for either record: no refusal, nobody to ask yet."""
        return self.pointer.asked == 0 and self.member.asked == 0

    @property
    def reason(self) -> str:
        """Empty when `ok`, else one sentence saying how far the records got."""
        if self.ok:
            return ""
        return (f"the pointer reached {self.pointer.accepted} and the membership record {self.member.accepted} of "
                f"{self.pointer.asked} peers asked, fewer than min_replicas={self.min_replicas}")


class ReplicationLog:
    """What a node says about its publishes' replication, at the level it deserves.

    A WARNING for each round whose records peers were asked to hold and too few took; while
    no peer is there to ask, one INFO line for the whole stretch (said again only after a
    publish has found peers in between).
    """

    def __init__(self) -> None:
        self._alone = False
        self._had_peers = False

    def report(self, round: int, replication: Replication, *, kept_locally: bool) -> None:
        """Logs what round `round`'s `replication` means; `kept_locally`: this node stores its own records
        (a DHT server), so a peer that joins later can still read them from it."""
        if replication.alone:
            if not self._alone:
                where = "kept in this node's DHT storage" if kept_locally else "held by no one"
                logger.info("no peers %s to hold round %d's pointer: it is %s until peers join",
                            "any more" if self._had_peers else "yet", round, where)
            self._alone = True
            return
        self._alone, self._had_peers = False, True
        if not replication.ok:
            logger.warning("publish of round %d failed: %s", round, replication.reason)


@dataclasses.dataclass(frozen=True)
class SignedRecord:
    """A record with its key's DHT id and the signed DHT form (what peers store, and what is gossiped)."""

    record: Record
    kid: DHTID
    signed: DHTRecord


def sign_records(node: DHTNode, records: list[Record]) -> list[SignedRecord]:
    """Signs each record with this node's key and checks it as any peer would; raises ValueError if one fails."""
    validator = node.protocol.record_validator
    out = []
    for record in records:
        kid = key_id(record.key)
        raw = DHTRecord(kid.to_bytes(), DHTProtocol.serializer.dumps(record.subkey),
                        DHTProtocol.serializer.dumps(record.value), record.expiration)
        raw = dataclasses.replace(raw, value=validator.sign_value(raw))
        if not validator.validate(raw):
            raise ValueError(f"this node's own record under {record.key!r} fails its checks")
        out.append(SignedRecord(record, kid, raw))
    return out


NEAREST_SECONDS = 30.0
"""How long the nearest peers of a key are used without a new lookup (peers that join meanwhile get the
next window's records, or the next lookup's)."""


class NearestPeers:
    """The nearest other peers of each key, looked up once and kept `seconds` (see the module docstring)."""

    def __init__(self, seconds: float = NEAREST_SECONDS, clock=time.monotonic):
        self._seconds, self._clock = seconds, clock
        self._found: dict[DHTID, tuple[list[PeerID], float]] = {}

    async def find(self, node: DHTNode, kids: list[DHTID]) -> dict[DHTID, list[PeerID]]:
        now = self._clock()
        for kid in [k for k, (_, at) in self._found.items() if now - at > self._seconds]:
            del self._found[kid]
        missing = [kid for kid in kids if kid not in self._found]
        if missing:
            nearest = await node.find_nearest_nodes(missing, k_nearest=node.num_replicas, exclude_self=True)
            for kid in missing:
                peers = list(nearest.get(kid, {}).values())
                if peers:  # none found: look again next time
                    self._found[kid] = (peers, now)
        return {kid: self._found[kid][0] if kid in self._found else [] for kid in kids}

    def forget(self, kid: DHTID) -> None:
        """Look `kid`'s nearest peers up again next time (too few of them took a record)."""
        self._found.pop(kid, None)


_LATE: set[asyncio.Task] = set()
"""Stores still running after `store_records` returned (held here so that they run to the end)."""


async def store_records(node: DHTNode, signed: list[SignedRecord], counters: SwarmCounters, *,
                        enough: int, nearest_peers: Optional[NearestPeers] = None) -> list[StoreOutcome]:
    """Stores each signed record on the nearest other peers of its key, and locally; one outcome per record.

    Returns once each record is held by `enough` peers or all its peers answered (see the module docstring).
    `nearest_peers` keeps the lookups between calls (None: one lookup each call).
    """
    protocol = node.protocol
    cache = nearest_peers if nearest_peers is not None else NearestPeers(seconds=0.0)
    nearest = await cache.find(node, [s.kid for s in signed])
    outcomes = await asyncio.gather(*(_store_everywhere(protocol, nearest[s.kid], s, counters, enough=enough)
                                      for s in signed))
    for s, outcome in zip(signed, outcomes):
        if outcome.accepted < enough:
            cache.forget(s.kid)
    if not protocol.client_mode:  # after the first remote stores, so that no routing-table push pre-empts them
        for s in signed:
            protocol.storage.store_subkey(s.kid, s.record.subkey, s.signed.value, s.record.expiration)
    return list(outcomes)


async def _store_everywhere(protocol: DHTProtocol, peers: list[PeerID], signed: SignedRecord,
                            counters: SwarmCounters, *, enough: int) -> StoreOutcome:
    pending = {asyncio.ensure_future(_store_at(protocol, peer, signed, counters)) for peer in peers}
    accepted = 0
    while pending and accepted < enough:
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        accepted += sum(task.result() for task in done)
    for task in pending:
        _LATE.add(task)
        task.add_done_callback(lambda t: _late_answer(t, counters))
    logger.debug("record under %s: %d of %d peers hold it, %d still asked", signed.record.key, accepted,
                 len(peers), len(pending))
    return StoreOutcome(accepted=accepted, asked=len(peers))


def _late_answer(task: asyncio.Task, counters: SwarmCounters) -> None:
    _LATE.discard(task)
    if task.cancelled():
        return
    if task.exception() is not None:
        logger.debug("a late store failed: %r", task.exception())
        counters.add("dht_stores_refused")
    else:
        counters.add("dht_stores_late" if task.result() else "dht_stores_refused")


async def _store_at(protocol: DHTProtocol, peer: PeerID, signed: SignedRecord, counters: SwarmCounters) -> bool:
    """Whether `peer` holds the record after asking it to store it.

    A peer answers "no" both when it refuses a record and when it already has it (another
    peer may have passed it on while meeting it); only in the second case does it count.
    """
    kid, subkey, raw = signed.kid, signed.record.subkey, signed.signed
    counters.add("dht_requests")
    counters.add("dht_bytes", len(raw.subkey) + len(raw.value))
    answer = await protocol.call_store(peer, keys=[kid], values=[raw.value],
                                       expiration_time=[raw.expiration_time], subkeys=[subkey])
    if answer is None:
        return False
    if answer[0]:
        return True
    counters.add("dht_requests")
    found = await protocol.call_find(peer, [kid])
    held = found.get(kid, (None, None))[0] if found else None
    if held is None or not isinstance(held.value, DictionaryDHTValue):
        return False
    item = held.value.get(subkey)
    return item is not None and (item.value, item.expiration_time) == (raw.value, raw.expiration_time)
