"""The hostile peer's gossip flood: pointers pushed on a run's topic from its 50 identities (see `hostile`).

The hostile peer runs no gossipsub of its own. It opens a `/meshsub/1.1.0` stream to each
target through its p2pd and writes gossipsub RPCs itself, so it signs each message with
whichever identity it likes (the target's p2pd checks that signature and hands the
message to its node as that identity's), or with none. The identities take turns by
category (identity i: category i mod 5); messages go out in batches of `BATCH`, `PAUSE`
apart, below what a subscriber can read:

- `oversize`: n messages just over the gate's 8 KiB         -> gossip_oversize
- `unsigned_record`: n pointers whose record has no signature -> gossip_bad_signature
- `replayed`: every pointer of the targets it can read from the DHT, sent as its own
  (-> gossip_not_sender), and n pointers of its own (another tokenizer) sent twice each
  (-> rejected `tokenizer` once, gossip_replayed once)
- `far_future`: n pointers whose record expires ten TTLs ahead -> gossip_far_expiry
- `unsigned_envelope`: n valid pointers in messages without a gossipsub signature: p2pd
  drops them before any node sees one
- `high_rate`: `3 * burst` junk messages from each of `LOUD` `oversize` identities and from
  the hostile peer's own id, interleaved, at the pace above (~32 a second per sender):
  bad_message while the sender has tokens (junk that does not decode is charged a token as a
  pointer would; only a decodable replay is dropped before the rate), then gossip_rate, then
  gossip_banned; its own id
  (connected) is disconnected.

p2pd drops messages silently when bursts outrun its validation queue or a subscriber:
what a target counts can fall short of what was written to it.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import logging
import os
import time

import base58
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding
from hivemind.dht.protocol import DHTProtocol
from hivemind.dht.storage import DictionaryDHTValue
from hivemind.dht.validation import DHTRecord
from hivemind.p2p import PeerID
from hivemind.proto import crypto_pb2, p2pd_pb2

from ftis_swarm.lab.hostile.base import HostilePeer, Signer
from ftis_swarm.swarm.gossip.gate import MAX_MESSAGE_BYTES, encode_message
from ftis_swarm.swarm.keys import gossip_topic, key_id, pointer_key, window_of
from ftis_swarm.swarm.records import make_subkey

logger = logging.getLogger(__name__)

SER = DHTProtocol.serializer
MESHSUB = "/meshsub/1.1.0"
BATCH, PAUSE = 8, 0.05
"""160 messages a second to each target, in bursts well under go-libp2p-pubsub's queues (32 messages)."""
LOUD = 4
CATEGORIES = ("oversize", "unsigned_record", "replayed", "far_future", "unsigned_envelope")


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (gossipsub's RPC: 1 subscriptions, 2 messages)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


class GossipFlood:
    """One flood of a run's topic (see the module docstring)."""

    def __init__(self, hostile: HostilePeer, signers: list[Signer]):
        self.h, self.signers, self.topic = hostile, signers, gossip_topic(hostile.s["run_id"])
        self._seqno = itertools.count(int(time.time() * 1e6))
        self._streams: dict[str, asyncio.StreamWriter] = {}
        self._written: dict[str, int] = {}
        self.stream_failures = 0

    async def run(self, n: int, burst: int, targets: list[str]) -> dict:
        s, now = self.h.s, time.time()
        by_category = {c: [x for i, x in enumerate(self.signers) if i % 5 == k] for k, c in enumerate(CATEGORIES)}
        batches: dict[str, list[bytes]] = {c: [] for c in [*CATEGORIES, "replayed_own", "high_rate"]}
        for signer in by_category["oversize"]:
            batches["oversize"] += [self._message(signer, os.urandom(MAX_MESSAGE_BYTES + 1)) for _ in range(n)]
        for signer in by_category["unsigned_record"]:
            batches["unsigned_record"] += [self._message(signer, encode_message(self._record(
                signer, tokenizer_fp=s["tokenizer_fp"], expiration=now + s["ttl"], signed=False))) for _ in range(n)]
        honest = await self._honest_pointers(targets)
        for signer, record in zip(itertools.cycle(by_category["replayed"]), honest):
            batches["replayed"].append(self._message(signer, encode_message(record)))
        for signer in by_category["replayed"]:
            for _ in range(n):
                record = self._record(signer, tokenizer_fp="another-tokenizer", expiration=now + s["ttl"])
                batches["replayed_own"] += [self._message(signer, encode_message(record)) for _ in range(2)]
        for signer in by_category["far_future"]:
            far = now + 10 * (s["ttl"] + s["max_clock_skew"])
            batches["far_future"] += [self._message(signer, encode_message(
                self._record(signer, tokenizer_fp=s["tokenizer_fp"], expiration=far))) for _ in range(n)]
        for signer in by_category["unsigned_envelope"]:
            batches["unsigned_envelope"] += [self._message(signer, encode_message(self._record(
                signer, tokenizer_fp="another-tokenizer", expiration=now + s["ttl"])), signed=False) for _ in range(n)]
        loud = [*by_category["oversize"][:LOUD], self.h.me]
        batches["high_rate"] = [self._message(signer, b"\x00" * 16) for _ in range(3 * burst) for signer in loud]
        sent: dict[str, dict[str, int]] = {target: {} for target in targets}  # messages written to each target
        for category, messages in batches.items():
            self._written = dict.fromkeys(targets, 0)
            await self._send(targets, messages)
            for target in targets:
                sent[target][category] = self._written[target]
        for writer in self._streams.values():
            writer.close()
        return {"sent": sent, "own_replays": {x.peer_id: n for x in by_category["replayed"]},
                "quiet": [x.peer_id for x in by_category["unsigned_envelope"]], "loud": [x.peer_id for x in loud],
                "stream_failures": self.stream_failures}

    def _record(self, signer: Signer, *, tokenizer_fp: str, expiration: float, signed: bool = True) -> DHTRecord:
        """A fresh pointer of `signer` under its own key of the current window, signed by it (or not)."""
        s = self.h.s
        w = window_of(time.time(), s["window"])
        name, pointer = self.h.floods.pointer_value(signer, w, 4096)
        kid, subkey = key_id(pointer_key(s["run_id"], signer.peer_id, w)), make_subkey(signer.public_key, name)
        value = SER.dumps({**pointer, "tokenizer_fp": tokenizer_fp})
        if signed:
            value = signer.sign(kid, subkey, value, expiration)
        return DHTRecord(kid.to_bytes(), SER.dumps(subkey), value, expiration)

    def _message(self, signer: Signer, data: bytes, *, signed: bool = True) -> bytes:
        """A gossipsub message from `signer`, signed as libp2p does it (or not at all)."""
        message = p2pd_pb2.PSMessage(data=data, seqno=next(self._seqno).to_bytes(8, "big"), topicIDs=[self.topic])
        setattr(message, "from", base58.b58decode(signer.peer_id))
        if signed:
            private = signer.key._private_key
            message.signature = private.sign(b"libp2p-pubsub:" + message.SerializeToString(), padding.PKCS1v15(),
                                             hashes.SHA256())
            der = private.public_key().public_bytes(serialization.Encoding.DER,
                                                    serialization.PublicFormat.SubjectPublicKeyInfo)
            message.key = crypto_pb2.PublicKey(key_type=crypto_pb2.RSA, data=der).SerializeToString()
        return message.SerializeToString()

    async def _honest_pointers(self, targets: list[str]) -> list[DHTRecord]:
        """Every pointer of the targets' keys of the last minute that their peers hand out."""
        s, now, out = self.h.s, time.time(), {}
        for target in targets:
            for w in range(window_of(now - 60, s["window"]), window_of(now, s["window"]) + 1):
                kid = key_id(pointer_key(s["run_id"], target, w))
                for peer in await self.h.honest_peers(kid):
                    found = await self.h.node.protocol.call_find(peer, [kid])
                    value = found and found[kid][0]
                    if value is not None and isinstance(value.value, DictionaryDHTValue):
                        for subkey, (raw, exp) in value.value.items():
                            record = DHTRecord(kid.to_bytes(), SER.dumps(subkey), raw, exp)
                            out[hashlib.sha256(SER.dumps(subkey) + raw).digest()] = record
        return list(out.values())

    async def _send(self, targets: list[str], messages: list[bytes]) -> None:
        for start in range(0, len(messages), BATCH):
            batch = messages[start:start + BATCH]
            rpc = b"".join(_field(2, m) for m in batch)
            await asyncio.gather(*(self._write(target, _varint(len(rpc)) + rpc, len(batch)) for target in targets))
            await asyncio.sleep(PAUSE)

    async def _write(self, target: str, frame: bytes, count: int) -> None:
        for attempt in range(2):
            try:
                writer = self._streams.get(target) or await self._open(target)
                writer.write(frame)
                await writer.drain()
                self._written[target] += count
                return
            except Exception as exc:  # the target disconnected this peer (the point of a ban), or p2pd refused
                logger.info("gossip stream to %s failed (%r); %s", target, exc, "giving up" if attempt else "again")
                self.stream_failures += 1
                self._streams.pop(target, None)

    async def _open(self, target: str) -> asyncio.StreamWriter:
        _, _, writer = await self.h.p2p.call_binary_stream_handler(PeerID.from_base58(target), MESHSUB)
        subscribe = _field(1, b"\x08\x01" + _field(2, self.topic.encode()))
        writer.write(_varint(len(subscribe)) + subscribe)
        self._streams[target] = writer
        return writer

