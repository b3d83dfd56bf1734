"""A hostile swarm peer in its own process: a DHTNode with no validators that sends raw stores.

    python tests/swarm/hostile_proc.py '<json: peers, run_id, ttl, max_clock_skew, window>'

Writes {"peer_id", "maddrs"} once joined, then answers one JSON line per command:

    {"op": "attack_records", "group_id": g}  raw stores against the honest pointer of group g
        -> {"asked": [peer ids], "answers": {attack: [store_ok or null per peer]}, "key": window key}
    {"op": "inspect", "key": k, "group_id": g}  what every honest peer now holds under k
        -> {peer id: {"records": n, "invalid": n, "honest": [value b64, expiry] or null}}
    {"op": "publish_bad", "victim": peer id, "victim_group": b64 body, "cap": n}
        valid signed pointers (its own key) to bad bodies it serves, plus cap + 2 good groups
        -> {"good": [group ids], "stored": {case: [store_ok per peer]}}
    {"op": "publish_groups", "bodies": [b64 body]}  valid signed pointers to bodies the test built
        (groups whose sender is this peer: poisoned content, not a broken envelope), served
        -> {"group_ids": [...], "stored": [[store_ok per peer] per body]}
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import msgpack

from hivemind.dht.crypto import RSASignatureValidator
from hivemind.dht.node import DHTNode
from hivemind.dht.protocol import DHTProtocol
from hivemind.dht.routing import DHTID
from hivemind.dht.storage import DictionaryDHTValue
from hivemind.dht.validation import DHTRecord
from hivemind.p2p import P2P
from node_proc import TOKENIZER_FP, VOCAB_SIZE, make_group

from ftis_swarm.swarm.bodies import BODY_PROTOCOL
from ftis_swarm.swarm.identity import create_identity
from ftis_swarm.swarm.records import make_pointer, make_subkey, window_keys
from ftis_swarm.swarm.validators import make_record_validator
from ftis_swarm.wire import Group, content_id, decode_group, encode_group

SER = DHTProtocol.serializer


class Hostile:
    def __init__(self, settings: dict):
        self.s = settings
        self.identity = create_identity(Path(tempfile.mkdtemp(prefix="hostile-")) / "id.key")
        self.signer = RSASignatureValidator(self.identity.private_key)  # for its record serialization
        self.pub = self.identity.public_key
        self.served: dict[str, bytes] = {}  # group id -> raw bytes sent after the status byte

    async def start(self) -> None:
        self.p2p = await P2P.create(initial_peers=self.s["peers"], host_maddrs=["/ip4/127.0.0.1/tcp/0"],
                                    identity_path=str(self.identity.path), check_if_identity_free=False)
        self.node = await DHTNode.create(p2p=self.p2p, initial_peers=self.s["peers"], record_validator=None,
                                         cache_nearest=0)
        await self.p2p.add_binary_stream_handler(BODY_PROTOCOL, self._serve)

    async def _serve(self, info, reader, writer) -> None:
        gid = (await reader.readexactly(32)).decode()
        writer.write(b"\x00" + self.served[gid] if gid in self.served else b"\x01")
        await writer.drain()
        writer.close()

    async def honest_peers(self, key_id: DHTID) -> list:
        nearest = await self.node.find_nearest_nodes([key_id], k_nearest=20, exclude_self=True)
        return list(nearest[key_id].values())

    def sign(self, key_id: DHTID, subkey: bytes, value: bytes, exp: float) -> bytes:
        """Signs with this peer's own key, whoever the subkey names as owner."""
        record = DHTRecord(key_id.to_bytes(), SER.dumps(subkey), value, exp)
        signature = self.identity.private_key.sign(self.signer._serialize_record(record))
        return value + b"[signature:" + signature + b"]"

    async def store_everywhere(self, peers: list, key_id: DHTID, values: list, exps: list, subkeys: list) -> list:
        answers = await asyncio.gather(*(self.node.protocol.call_store(p, [key_id] * len(values), values, exps,
                                                                       subkeys=subkeys) for p in peers))
        return [a if a is None else list(a) for a in answers]

    async def find_honest_record(self, group_id: str) -> tuple[str, DHTID, bytes, bytes, float, list]:
        now = time.time()
        for key in window_keys(self.s["run_id"], now - 60, now + 5, self.s["window"]):
            key_id = DHTID.generate(source=key)
            peers = await self.honest_peers(key_id)
            for peer in peers:
                found = await self.node.protocol.call_find(peer, [key_id])
                value = found and found[key_id][0]
                if value is None or not isinstance(value.value, DictionaryDHTValue):
                    continue
                for subkey, (raw, exp) in value.value.items():
                    if subkey.endswith(group_id.encode()):
                        return key, key_id, subkey, raw, exp, peers
        raise RuntimeError(f"no peer holds a pointer to {group_id}")

    async def attack_records(self, group_id: str) -> dict:
        key, key_id, honest_subkey, honest_raw, exp, peers = await self.find_honest_record(group_id)
        stripped = RSASignatureValidator._SIGNATURE_RE.sub(b"", honest_raw)
        pointer = SER.loads(stripped)
        forged = SER.dumps({**pointer, "sha256": hashlib.sha256(b"junk").hexdigest()[:32] + "0" * 32})
        mine_gid = hashlib.sha256(b"hostile").hexdigest()[:32]
        my_subkey = make_subkey(self.pub, mine_gid)
        my_pointer = {**pointer, "group_id": mine_gid, "sha256": mine_gid + "0" * 32, "publisher": self.identity.peer_id}
        later, now = exp + 5.0, time.time()
        ttl, skew = self.s["ttl"], self.s["max_clock_skew"]
        other_key_id = DHTID.generate(source=key + "-elsewhere")

        def mine(value: object, exp_: float = later, subkey: bytes = my_subkey) -> tuple:
            raw = value if isinstance(value, bytes) else SER.dumps(value)
            return [self.sign(key_id, subkey, raw, exp_)], [exp_], [subkey]

        cases = {
            "overwrite": ([self.sign(key_id, honest_subkey, forged, later)], [later], [honest_subkey]),
            "forged_signature": ([forged + b"[signature:" + base64.b64encode(os.urandom(256)) + b"]"], [later],
                                 [honest_subkey]),
            "replay_changed_expiry": ([honest_raw], [later], [honest_subkey]),
            "far_future_expiry": mine(my_pointer, now + 10 * (ttl + skew)),
            "oversize_record": mine({**my_pointer, "pad": "x" * 8000}),
            "malformed_value": mine(b"\xc1\xc1 not msgpack"),
            "schema_violation": mine({**my_pointer, "size": float(my_pointer["size"])}),
            "extra_field": mine({**my_pointer, "extra": 1}),
            "publisher_not_owner": mine({**my_pointer, "publisher": pointer["publisher"]}),
            "subkey_without_owner": mine(my_pointer, later, b"plain-subkey"),
            "regular_value": ([SER.dumps(my_pointer)], [later], [None]),
        }
        answers = {name: await self.store_everywhere(peers, key_id, *case) for name, case in cases.items()}
        control = self.sign(other_key_id, my_subkey, SER.dumps(my_pointer), now + ttl / 2)
        answers["valid_control"] = await self.store_everywhere(peers, other_key_id, [control], [now + ttl / 2],
                                                               [my_subkey])
        answers["replay_into_other_key"] = await self.store_everywhere(peers, other_key_id, [honest_raw], [later],
                                                                       [honest_subkey])
        bundle = DictionaryDHTValue()
        bundle.store(honest_subkey, self.sign(key_id, honest_subkey, forged, later), later)
        answers["dictionary_store"] = await self.store_everywhere(peers, key_id, [bundle], [later], [None])
        # and serve the forged records itself, to whoever reads through this peer
        self.node.protocol.storage.store_subkey(key_id, honest_subkey, cases["overwrite"][0][0], later)
        self.node.protocol.storage.store_subkey(key_id, my_subkey, cases["far_future_expiry"][0][0], now + 600)
        return {"asked": [p.to_base58() for p in peers], "answers": answers, "key": key}

    async def inspect(self, key: str, group_id: str) -> dict:
        key_id = DHTID.generate(source=key)
        honest = make_record_validator(self.identity.private_key, max_record_bytes=4096, ttl=self.s["ttl"],
                                       max_clock_skew=self.s["max_clock_skew"])
        out = {}
        for peer in await self.honest_peers(key_id):
            found = await self.node.protocol.call_find(peer, [key_id])
            value = found[key_id][0] if found else None
            entries = list(value.value.items()) if value is not None else []
            invalid = sum(not honest.validate(DHTRecord(key_id.to_bytes(), SER.dumps(sk), raw, exp))
                          for sk, (raw, exp) in entries)
            mine = [(base64.b64encode(raw).decode(), exp) for sk, (raw, exp) in entries
                    if sk.endswith(group_id.encode())]
            out[peer.to_base58()] = {"records": len(entries), "invalid": invalid, "honest": mine[0] if mine else None}
        return out

    async def publish_bad(self, victim: str, victim_body: bytes, cap: int) -> dict:
        run_id, ttl = self.s["run_id"], self.s["ttl"]
        now = time.time()
        me = self.identity.peer_id

        def group(item: str, **kw) -> Group:
            return make_group(sender=kw.pop("sender", me), run_id=run_id, item=item, tokens=32, **kw)

        good = [group(f"flood-{i}") for i in range(cap + 2)]
        twin_a, twin_b = group("twin-a"), group("twin-b")  # same size, different content
        junk = os.urandom(len(encode_group(twin_a)))
        victim_group = decode_group(victim_body)
        long, absent = group("long"), group("absent")
        # name -> (group the pointer describes, pointer fields changed, body announced, bytes served)
        cases = {
            "hash_mismatch": (twin_a, {}, encode_group(twin_a), encode_group(twin_b)),
            "size_mismatch": (long, {}, encode_group(long), encode_group(long) + b"0123456789"),
            "malformed": (twin_a, {}, junk, junk),
            "out_of_vocab": (g := group("vocab", max_token=VOCAB_SIZE * 10), {}, encode_group(g), None),
            "sender_mismatch": (g := group("impostor", sender=victim), {}, encode_group(g), None),
            "reannounce_victim": (victim_group, {}, victim_body, None),
            "pointer_mismatch": (g := group("fp", tokenizer_fp="another-tokenizer"), {"tokenizer_fp": TOKENIZER_FP},
                                 encode_group(g), None),
            "tokenizer": (g := group("tok"), {"tokenizer_fp": "another-tokenizer"}, encode_group(g), None),
            "run_id": (g := group("run"), {"run_id": "another-run"}, encode_group(g), None),
            "stale": (g := group("old"), {"created_at": now - 2 * ttl}, encode_group(g), None),
            "future": (g := group("new"), {"created_at": now + ttl}, encode_group(g), None),
            "oversize": (g := group("big"), {"size": self.s["max_bytes"] + 1}, encode_group(g), None),
            "fetch_failed": (absent, {}, encode_group(absent), b""),
        }
        cases.update({f"good-{i}": (g, {}, encode_group(g), None) for i, g in enumerate(good)})
        key_id = DHTID.generate(source=window_keys(run_id, now, now, self.s["window"])[0])
        peers = await self.honest_peers(key_id)
        stored = {name: await self.announce(key_id, peers, described, body, fields, served, now)
                  for name, (described, fields, body, served) in cases.items()}
        return {"good": [g.group_id for g in good], "stored": stored}

    async def announce(self, key_id: DHTID, peers: list, described: object, body: bytes, fields: dict,
                       served: bytes | None, now: float) -> list:
        """Stores a pointer signed with this peer's key, describing `described` with `fields` changed,
        and serves `served` (default: `body`) under the id of `body`."""
        gid = content_id(body)
        pointer = {**make_pointer(described, body, gid).dict(), "publisher": self.identity.peer_id, **fields}
        served = body if served is None else served
        if served:
            self.served[gid] = len(served).to_bytes(8, "big") + served
        exp = now + self.s["ttl"]
        subkey = make_subkey(self.pub, gid)
        value = self.sign(key_id, subkey, SER.dumps(pointer), exp)
        return await self.store_everywhere(peers, key_id, [value], [exp], [subkey])

    async def publish_groups(self, bodies: list[bytes]) -> dict:
        now = time.time()
        key_id = DHTID.generate(source=window_keys(self.s["run_id"], now, now, self.s["window"])[0])
        peers = await self.honest_peers(key_id)
        stored = []
        for body in bodies:  # described from the raw record: some of these bodies the decoder refuses
            rec = msgpack.unpackb(body, raw=False)
            described = SimpleNamespace(sender=rec["snd"], created_at=rec["ts"], run_id=rec["run"],
                                        tokenizer_fp=rec["tfp"])
            stored.append(await self.announce(key_id, peers, described, body, {}, None, now))
        return {"group_ids": [content_id(b) for b in bodies], "stored": stored}


async def amain() -> None:
    hostile = Hostile(json.loads(sys.argv[1]))
    await hostile.start()
    maddrs = [str(m) for m in await hostile.p2p.get_visible_maddrs()]
    _send({"peer_id": hostile.identity.peer_id, "maddrs": maddrs})
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            break
        cmd = json.loads(line)
        if cmd["op"] == "attack_records":
            _send(await hostile.attack_records(cmd["group_id"]))
        elif cmd["op"] == "inspect":
            _send(await hostile.inspect(cmd["key"], cmd["group_id"]))
        elif cmd["op"] == "publish_groups":
            _send(await hostile.publish_groups([base64.b64decode(b) for b in cmd["bodies"]]))
        elif cmd["op"] == "publish_bad":
            _send(await hostile.publish_bad(cmd["victim"], base64.b64decode(cmd["victim_body"]), cmd["cap"]))
        else:
            break
    await hostile.node.shutdown()
    await hostile.p2p.shutdown()


def _send(obj: object) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    asyncio.run(amain())
