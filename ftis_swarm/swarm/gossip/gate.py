"""Gossiped pointers and haves: the message format, and the gate every message passes before anything acts on it.

Owns: the gossip message's form (`msgpack [1, key id, subkey, signed value, expiry]`, one DHT
record exactly as a peer would store it, checked by the same `RecordChecker`), and per sender
its token bucket, drop count, bans, per-kind replay horizon and the bounded queue of records
refused as `puzzle_busy`.

Contract: `GossipGate.admit` takes one message from a sender (p2pd authenticated it) and names
the first check that fails, cheapest first: `replayed` (before any rate is charged: a replay
is never its signer's fault), `banned`, `denied`, `rate` (a ban with a disconnect past
`burst` drops), `oversize`, `bad_message`, `not_pointer_form`, `not_pointer`, `not_sender`,
then `RecordChecker.examine`'s reasons. `retry` checks the waiting `puzzle_busy` records again,
oldest first, while the verifier has room.

Invariants: memory is bounded (`MAX_REMEMBERED` digests, `MAX_SENDERS` horizons,
`WAITING_PER_SENDER` and `MAX_WAITING` waiting records); a record expiring at or before its
signer's horizon for its kind is a replay; `banned`, `denied`, `rate` and `replayed` cost the
sender nothing in the ledger (`peers/faults.py`). Runs on the swarm's event loop thread only.
Imports the DHT layer's checker and records, peers' policy and faults; nothing of fetch. Why each rule, and the measured
figures: docs/swarm.md, "Gossip" and "Identity".
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections import Counter, OrderedDict
from typing import Optional, Union

import msgpack
from hivemind.dht.validation import DHTRecord

from ftis_swarm.peers import faults
from ftis_swarm.peers.policy import PeerPolicy
from ftis_swarm.swarm.dht.reading import FoundRecord
from ftis_swarm.swarm.dht.validators import Owner, RecordChecker, owner_of, record_digest
from ftis_swarm.swarm.keys import MEMBER_SUBKEY_NAME
from ftis_swarm.swarm.records import HAVE_SUBKEY_NAME, HaveRecord, RoundPointer

GOSSIP_VERSION = 1
MAX_MESSAGE_BYTES = 8192
"""A round pointer message is at most ~3.4 KB (32 groups); p2pd itself would carry up to 1 MiB."""
BAN_SECONDS = 30.0
"""The default of `LedgerConfig.gossip_ban_seconds`, which the swarm passes in."""
DISCONNECT_EVERY = 5.0
MAX_SENDERS = 4096
"""Senders whose bucket and ban are kept (the longest-quiet unbanned one leaves first); as many horizons."""
MAX_REMEMBERED = 1 << 14
"""Admitted records known by digest (about 150 bytes each); older ones fall to their signer's horizon."""
MAX_WAITING = 128
"""Messages refused as `puzzle_busy` kept to check again (each at most `MAX_MESSAGE_BYTES`: 1 MiB)."""
WAITING_PER_SENDER = 2
_KEY_ID_BYTES = 20


def encode_message(record: DHTRecord) -> bytes:
    """The gossip message of a signed record."""
    return msgpack.packb([GOSSIP_VERSION, record.key, record.subkey, record.value, record.expiration_time],
                         use_bin_type=True)


def decode_message(data: bytes) -> DHTRecord:
    """The record a message holds; raises ValueError for anything but the form above."""
    try:
        obj = msgpack.unpackb(data, raw=False, max_bin_len=MAX_MESSAGE_BYTES, max_str_len=0, max_array_len=5,
                              max_map_len=0, max_ext_len=0)
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise ValueError(f"a message that does not decode ({type(exc).__name__})") from None
    if not (isinstance(obj, list) and len(obj) == 5 and type(obj[0]) is int and obj[0] == GOSSIP_VERSION
            and all(isinstance(part, bytes) for part in obj[1:4]) and len(obj[1]) == _KEY_ID_BYTES
            and type(obj[4]) is float and math.isfinite(obj[4])):
        raise ValueError("a message that is not [1, key id, subkey, value, expiry]")
    return DHTRecord(obj[1], obj[2], obj[3], obj[4])


class _Message:
    """A message that decodes: its record and digest, and (derived when first asked) the record's owner."""

    def __init__(self, record: DHTRecord):
        self.record, self.digest = record, record_digest(record)

    @functools.cached_property
    def owner(self) -> Optional[Owner]:
        """The owner its subkey names (None: not a record subkey); ~40 us for a key not seen lately."""
        return owner_of(self.record.subkey)

    @property
    def lineage(self) -> tuple[str, bool]:
        """(owner, a have?): the records one horizon covers (for a message with an owner)."""
        return self.owner.peer_id, self.owner.name == HAVE_SUBKEY_NAME


def _decode(data: bytes) -> Union[_Message, str]:
    """The message in `data`, or why it is none; the size first, so the decode is bounded."""
    if len(data) > MAX_MESSAGE_BYTES:
        return faults.GOSSIP_OVERSIZE
    try:
        return _Message(decode_message(data))
    except ValueError:
        return faults.GOSSIP_BAD_MESSAGE


@dataclasses.dataclass(frozen=True)
class MessageVerdict:
    """What to do with one message: act on `record` when `reason` is empty; else drop it."""

    reason: str
    record: Optional[FoundRecord] = None
    disconnect: bool = False
    """Close the connections to the sender (it went on flooding)."""


@dataclasses.dataclass
class _Sender:
    tokens: float
    updated: float
    dropped: int = 0
    bans: int = 0
    banned_until: float = -math.inf
    disconnected_at: float = -math.inf


class GossipGate:
    """Admits gossiped pointers (see the module docstring for the order of the checks)."""

    def __init__(self, *, checker: RecordChecker, policy: PeerPolicy, rate: float, burst: int, ttl: float,
                 ban_seconds: float = BAN_SECONDS, max_ban_seconds: float = math.inf):
        self._checker, self._policy = checker, policy
        self._rate, self._burst = rate, burst
        self._ban_seconds, self._max_ban = ban_seconds, min(max_ban_seconds, ttl / 4)
        self._senders: OrderedDict[str, _Sender] = OrderedDict()
        self._admitted: OrderedDict[bytes, tuple[tuple[str, bool], float]] = OrderedDict()
        """Digest -> (lineage, expiry) of the last admitted records."""
        self._horizons: OrderedDict[tuple[str, bool], float] = OrderedDict()
        self._waiting: OrderedDict[bytes, tuple[str, _Message]] = OrderedDict()
        self._waiting_of: Counter[str] = Counter()

    def admit(self, sender: str, data: bytes, now: float) -> MessageVerdict:
        message = _decode(data)
        if isinstance(message, _Message) and self._is_replay(sender, message, now):
            return MessageVerdict(faults.GOSSIP_REPLAYED)
        state = self._sender(sender, now)
        if now < state.banned_until:
            return MessageVerdict(faults.GOSSIP_BANNED, disconnect=self._disconnect_due(state, now))
        if not self._policy.allows(sender):
            return MessageVerdict(faults.GOSSIP_DENIED)
        state.tokens = min(self._burst, state.tokens + (now - state.updated) * self._rate)
        state.updated = now
        if state.tokens < 1:
            state.dropped += 1
            if state.dropped <= self._burst:
                return MessageVerdict(faults.GOSSIP_RATE)
            state.dropped, state.bans = 0, state.bans + 1
            state.banned_until = now + min(self._max_ban, self._ban_seconds * 2 ** (state.bans - 1))
            return MessageVerdict(faults.GOSSIP_RATE, disconnect=self._disconnect_due(state, now))
        state.tokens -= 1
        if isinstance(message, str):
            return MessageVerdict(message)
        if message.owner is None:
            return MessageVerdict(faults.gossip_twin(faults.NOT_POINTER_FORM))
        if message.owner.name == MEMBER_SUBKEY_NAME:
            return MessageVerdict(faults.GOSSIP_NOT_POINTER)
        if message.owner.peer_id != sender:
            return MessageVerdict(faults.GOSSIP_NOT_SENDER)
        return self._examine(sender, message, now)

    @property
    def waiting(self) -> int:
        """Messages waiting for the puzzle verifier (see the module docstring)."""
        return len(self._waiting)

    def retry(self, now: float) -> list[tuple[str, MessageVerdict]]:
        """(sender, verdict) of each waiting message checked again now, oldest first, while the verifier has room."""
        out = []
        for _ in range(len(self._waiting)):
            if not self._waiting or not self._checker.puzzles.has_room():
                break
            _, (sender, message) = self._waiting.popitem(last=False)
            self._waiting_of[sender] -= 1
            if self._waiting_of[sender] <= 0:
                del self._waiting_of[sender]
            state = self._senders.get(sender)
            banned = state is not None and now < state.banned_until
            if not (banned or not self._policy.allows(sender) or self._is_replay(sender, message, now)):
                out.append((sender, self._examine(sender, message, now)))
        return out

    def _examine(self, sender: str, message: _Message, now: float) -> MessageVerdict:
        verdict = self._checker.examine(message.record)
        if verdict.reason == faults.PUZZLE_BUSY:  # this node's verifier is busy: no one's fault, checked again later
            self._wait(sender, message)
            return MessageVerdict(faults.PUZZLE_BUSY)
        if verdict.reason:
            return MessageVerdict(faults.gossip_twin(verdict.reason))
        if not isinstance(verdict.content, (RoundPointer, HaveRecord)):
            return MessageVerdict(faults.GOSSIP_NOT_POINTER)
        self._remember(message, now)
        return MessageVerdict("", FoundRecord(owner=message.owner.peer_id, content=verdict.content,
                                         expiration=message.record.expiration_time))

    def _is_replay(self, sender: str, message: _Message, now: float) -> bool:
        """A record of the sender's own that is expired, admitted before, or at or before its horizon. The owner
        (the dearest part) is derived only for a record that looks old by its expiry."""
        admitted = self._admitted.get(message.digest)
        if admitted is not None:
            return admitted[0][0] == sender  # another's admitted record: the sender's own message, `not_sender`
        expiry = message.record.expiration_time
        if expiry > now and expiry > max(self._horizons.get((sender, False), -math.inf),
                                         self._horizons.get((sender, True), -math.inf)):
            return False
        owner = message.owner
        return (owner is not None and owner.peer_id == sender
                and (expiry <= now or expiry <= self._horizons.get(message.lineage, -math.inf)))

    def _remember(self, message: _Message, now: float) -> None:
        self._admitted[message.digest] = (message.lineage, message.record.expiration_time)
        while len(self._admitted) > MAX_REMEMBERED:
            _, (lineage, expiry) = self._admitted.popitem(last=False)
            if expiry > now:  # an expired one needs no horizon: `_is_replay` refuses it anyway
                self._horizons[lineage] = max(expiry, self._horizons.pop(lineage, -math.inf))
                if len(self._horizons) > MAX_SENDERS:
                    self._horizons.popitem(last=False)

    def _wait(self, sender: str, message: _Message) -> None:
        if message.digest in self._waiting or self._checker.puzzles.suspect(message.owner.public_key):
            return
        if self._waiting_of[sender] >= WAITING_PER_SENDER:  # keep the sender's newest
            oldest = next(digest for digest, (peer, _) in self._waiting.items() if peer == sender)
            del self._waiting[oldest]
            self._waiting_of[sender] -= 1
        elif len(self._waiting) >= MAX_WAITING:
            return  # full: the sender's next message may find room
        self._waiting[message.digest] = (sender, message)
        self._waiting_of[sender] += 1

    def _sender(self, sender: str, now: float) -> _Sender:
        state = self._senders.get(sender)
        if state is None:
            state = self._senders[sender] = _Sender(tokens=float(self._burst), updated=now)
            if len(self._senders) > MAX_SENDERS:  # forget the longest-quiet sender that is not banned
                for peer, old in self._senders.items():
                    if peer != sender and old.banned_until < now:
                        del self._senders[peer]
                        break
        self._senders.move_to_end(sender)
        return state

    @staticmethod
    def _disconnect_due(state: _Sender, now: float) -> bool:
        if now - state.disconnected_at < DISCONNECT_EVERY:
            return False
        state.disconnected_at = now
        return True
