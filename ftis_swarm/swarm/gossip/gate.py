"""Gossiped pointers and haves: the message format, and the gate every message passes before anything acts on it.

A gossip message is one DHT record, self-contained, exactly as a peer would store it:

    msgpack [1, key id (20 bytes), subkey (serialized, as in the DHT), signed value, expiry]

about 0.9 KB plus 76 bytes per group for a round pointer (2.1 KB for 16 groups; the
owner's RSA public key in the subkey is 0.4 KB of it), or a holder's `HaveRecord` (0.9 KB
plus 17 bytes per held group; `fetch.bodies`). The
record is checked by the same `RecordChecker` as a record read from the DHT (signature,
owner, size, expiry, key binding, schema), so a gossiped pointer is worth exactly what
the DHT record is. `GossipGate.admit` takes one message from a sender (the peer that
signed the gossipsub message, checked by p2pd), cheapest check first, and names the first
that fails:

1. `banned` (the sender went on flooding, below), `denied` (the node's policy refuses it);
2. `rate`: each sender has a token bucket of `burst` messages refilled at `rate` a
   second; a message without a token is dropped. A sender whose drops since its last ban
   exceed `burst` is banned for `LedgerConfig.gossip_ban_seconds * 2^k` (k earlier bans;
   at most `max_ban_seconds` and a quarter of the TTL) and disconnected, again at most every `DISCONNECT_EVERY` s while it sends;
3. `oversize` (more than `MAX_MESSAGE_BYTES`), `bad_message` (not the form above);
4. `not_pointer_form`, `not_pointer` (a membership record: only pointers and haves are gossiped),
   `not_sender` (the record's owner is not the sender: nobody gossips another's pointer);
5. `replayed` (a record this gate admitted before), then every refusal of
   `RecordChecker.examine` under its own name (`bad_signature`, `far_expiry`, ...).

Each refusal is named `gossip_<reason>` (`peers/faults.py`), and the channel counts it
against the sender for the node's ledger. What the sender signed costs what its DHT
twin costs (`faults.gossip_twin`: a forged signature as much as in a store); `banned`,
`denied`, `rate` and `replayed` cost nothing (the ban is this gate's own answer to a
flood; the ledger never bans again for what a banned peer keeps sending). Runs on the
swarm's event loop thread only.
"""

from __future__ import annotations

import dataclasses
import math
from collections import OrderedDict
from typing import Optional

import msgpack
from hivemind.dht.validation import DHTRecord

from ftis_swarm.swarm.keys import MEMBER_SUBKEY_NAME
from ftis_swarm.peers.policy import PeerPolicy
from ftis_swarm.swarm.dht.reading import FoundRecord
from ftis_swarm.swarm.records import HaveRecord, RoundPointer
from ftis_swarm.swarm.dht.validators import RecordChecker, owner_of, record_digest
from ftis_swarm.peers import faults

GOSSIP_VERSION = 1
MAX_MESSAGE_BYTES = 8192
"""A round pointer message is at most ~3.4 KB (32 groups); p2pd itself would carry up to 1 MiB."""
BAN_SECONDS = 30.0
"""The default of `LedgerConfig.gossip_ban_seconds`, which the swarm passes in."""
DISCONNECT_EVERY = 5.0
MAX_SENDERS = 4096
MAX_REMEMBERED = 1 << 14
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
        self._admitted: OrderedDict[bytes, None] = OrderedDict()

    def admit(self, sender: str, data: bytes, now: float) -> MessageVerdict:
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
        if len(data) > MAX_MESSAGE_BYTES:
            return MessageVerdict(faults.GOSSIP_OVERSIZE)
        try:
            record = decode_message(data)
        except ValueError:
            return MessageVerdict(faults.GOSSIP_BAD_MESSAGE)
        owner = owner_of(record.subkey)
        if owner is None:
            return MessageVerdict(faults.gossip_twin(faults.NOT_POINTER_FORM))
        if owner.name == MEMBER_SUBKEY_NAME:
            return MessageVerdict(faults.GOSSIP_NOT_POINTER)
        if owner.peer_id != sender:
            return MessageVerdict(faults.GOSSIP_NOT_SENDER)
        digest = record_digest(record)
        if digest in self._admitted:
            return MessageVerdict(faults.GOSSIP_REPLAYED)
        verdict = self._checker.examine(record)
        if verdict.reason == faults.PUZZLE_BUSY:  # this node's verifier is busy: no one's fault, not remembered
            return MessageVerdict(faults.PUZZLE_BUSY)
        if verdict.reason:
            return MessageVerdict(faults.gossip_twin(verdict.reason))
        if not isinstance(verdict.content, (RoundPointer, HaveRecord)):
            return MessageVerdict(faults.GOSSIP_NOT_POINTER)
        self._admitted[digest] = None
        if len(self._admitted) > MAX_REMEMBERED:
            self._admitted.popitem(last=False)
        return MessageVerdict("", FoundRecord(owner=owner.peer_id, content=verdict.content,
                                         expiration=record.expiration_time))

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
