"""A hostile swarm peer for the tests and `ftis-node bench hostile`: a raw hivemind DHT node without checks.

    python -m ftis_swarm.lab.hostile.peer '<json settings>'

Settings: `peers`, `run_id`, `ttl`, `max_clock_skew`, `window`, `member_shards`, `max_bytes`,
`tokenizer_fp`, `vocab_size`, `identities` (keys that only sign, made at start, each with
its puzzle solved at `puzzle`, the run's `PuzzleConfig` as a dict; default: the default
one), `host` (the loopback address all its daemons listen on: one origin; default
127.0.0.1), `body_servers` (default true). Besides its own identity it runs one libp2p
daemon per kind of bad body server (`hostile_bodies`) unless `body_servers` is false.
It writes {"peer_id", "maddrs", "identities", "body_peers", "identity_costs"} once joined, then answers one
JSON line per command:

    {"op": "attack_records", "victim": peer id, "group_id": g}
        raw stores against the victim's pointer of group g (overwrite, forged signature,
        replays, far expiry, oversize, malformed, schema, old version, owner, subkey, regular
        value, whole dictionary) and a well-formed control of its own
        -> {"asked": [peer ids], "answers": {attack: [store_ok or null per peer]}, "key": key}
    {"op": "inspect", "key": k, "group_id": g}
        -> {peer id: {"records": n, "invalid": n, "honest": [value b64, expiry] or null}}
    {"op": "publish_bad", "victim_body": b64 body, "cap": n}
        valid pointers (its own key) to bad bodies it serves, plus cap + 2 good groups
        -> {"good": [group ids], "stored": {case: [store_ok per peer]}}
    {"op": "publish_groups", "bodies": [b64 body]}  one valid signed round pointer (its own key) to bodies
        the caller built (groups whose sender is this peer: poisoned content, not a broken envelope), served
        -> {"group_ids": [...], "stored": [[store_ok per peer]]}
    {"op": "flood", "attack": name, "n": count}   start a flood in the background -> {"started": name}
        pointers: n pointers spread over the signing identities (each in the current window)
        random_keys: n pointer-form records under random keys
        dictionary: one whole-dictionary store holding n unknown msgpack extension types
        bodies: n pointers per bad body server (stall, header then silence, dribble, endless)
        replays: n re-sends of every honest record it can read (old and current versions)
        fill: n valid pointers of its own key, stored by its own daemon, over consecutive windows
        gossip: pushed on the run's topic, n per identity and kind (`hostile_gossip`), with
            "params": {"burst": the nodes' gossip_burst, "targets": [peer ids]}
    {"op": "results"}  waits for the floods -> {name: {"sent": n, "accepted": {peer id: n}}}
    {"op": "done"}  whether every flood started has finished -> {"done": bool}
    {"op": "quit"}
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import secrets
import sys
import tempfile
import time
from pathlib import Path

import msgpack
from hivemind.dht.crypto import RSASignatureValidator
from hivemind.dht.node import DHTNode
from hivemind.dht.protocol import DHTProtocol
from hivemind.dht.routing import DHTID
from hivemind.dht.storage import DictionaryDHTValue
from hivemind.dht.validation import DHTRecord
from hivemind.p2p import P2P, PeerID
from hivemind.utils.crypto import RSAPrivateKey

from ftis_swarm.config import PuzzleConfig
from ftis_swarm.lab.hostile.base import Signer
from ftis_swarm.lab.hostile.floods import Floods, make_group, names_group, pointed_group, round_value
from ftis_swarm.swarm.dht.validators import RecordChecker
from ftis_swarm.swarm.fetch.streams import BODY_PROTOCOL, ID_LEN
from ftis_swarm.swarm.identity import create_identity, peer_id_from_public_key
from ftis_swarm.swarm.keys import key_id, pointer_key, window_of
from ftis_swarm.swarm.puzzle import PuzzleVerifier, solve
from ftis_swarm.swarm.records import make_subkey, round_name
from ftis_swarm.wire import Group, WireError, content_id, decode_group, encode_group

SER = DHTProtocol.serializer


class Hostile:
    def __init__(self, settings: dict):
        self.s = settings
        self.identity = create_identity(Path(tempfile.mkdtemp(prefix="hostile-")) / "id.key")
        self.me = Signer(self.identity.private_key, settings)
        self.host = settings.get("host", "127.0.0.1")
        """The loopback address of all its daemons: one machine, one network origin."""
        self.served: dict[str, bytes] = {}  # group id -> raw bytes sent after the status byte

    def make_signers(self, n: int) -> list[Signer]:
        """`n` identities that only sign, each with its puzzle solved; their costs in `identity_costs`
        (CPU seconds of this process: the RSA key, then the puzzle, and the puzzle's tries)."""
        signers = []
        for _ in range(n):
            started = time.process_time()
            key = RSAPrivateKey()
            keyed = time.process_time()
            signers.append(Signer(key, self.s))
            self.identity_costs.append({"rsa_cpu_s": keyed - started, "puzzle_cpu_s": time.process_time() - keyed,
                                        "tries": signers[-1].tries})
        return signers

    async def start(self) -> None:
        self.identity_costs: list[dict] = []
        signers = self.make_signers(self.s.get("identities", 50))  # before the daemons: a blocked loop drops none
        self.p2p = await P2P.create(initial_peers=self.s["peers"], host_maddrs=[f"/ip4/{self.host}/tcp/0"],
                                    identity_path=str(self.identity.path), check_if_identity_free=False)
        self.node = await DHTNode.create(p2p=self.p2p, initial_peers=self.s["peers"], record_validator=None,
                                         cache_nearest=0)
        await self.p2p.add_binary_stream_handler(BODY_PROTOCOL, self._serve)
        self.floods = Floods(self, signers)
        if self.s.get("body_servers", True):
            await self.floods.start_body_peers()

    async def _serve(self, info, reader, writer) -> None:
        """The body protocol without checks: each id answered with what `served` holds for it, else missing."""
        count = (await reader.readexactly(1))[0]
        raw = (await reader.readexactly(count * ID_LEN)).decode()
        for gid in (raw[i:i + ID_LEN] for i in range(0, len(raw), ID_LEN)):
            writer.write(b"\x00" + self.served[gid] if gid in self.served else b"\x01")
            await writer.drain()
        writer.close()

    async def honest_peers(self, kid: DHTID) -> list[PeerID]:
        """Up to 64 peers nearest to `kid`, by a lookup (on a testnet: every honest peer)."""
        nearest = await self.node.find_nearest_nodes([kid], k_nearest=64, exclude_self=True)
        return list(nearest[kid].values())

    async def store_everywhere(self, peers: list, kid: DHTID, values: list, exps: list, subkeys: list) -> list:
        answers = await asyncio.gather(*(self.node.protocol.call_store(p, [kid] * len(values), values, exps,
                                                                       subkeys=subkeys) for p in peers))
        return [a if a is None else list(a) for a in answers]

    async def find_honest_record(self, victim: str, group_id: str) -> tuple:
        now = time.time()
        for w in range(window_of(now - 60, self.s["window"]), window_of(now + 5, self.s["window"]) + 1):
            key = pointer_key(self.s["run_id"], victim, w)
            kid = key_id(key)
            peers = await self.honest_peers(kid)
            for peer in peers:
                found = await self.node.protocol.call_find(peer, [kid])
                value = found and found[kid][0]
                if value is None or not isinstance(value.value, DictionaryDHTValue):
                    continue
                for subkey, (raw, exp) in value.value.items():
                    if names_group(_unsigned(raw), group_id):
                        return key, kid, subkey, raw, exp, peers
        raise RuntimeError(f"no peer holds a pointer to {group_id}")

    async def attack_records(self, victim: str, group_id: str) -> dict:
        key, kid, honest_subkey, honest_raw, exp, peers = await self.find_honest_record(victim, group_id)
        pointer = _unsigned(honest_raw)
        junk = {**pointer["groups"][0], "sha256": hashlib.sha256(b"junk").digest()}
        forged = SER.dumps({**pointer, "groups": [junk] + pointer["groups"][1:]})
        mine_round = 424242
        my_subkey = make_subkey(self.me.public_key, round_name(mine_round))
        quiet = pointer["window"] // 2  # a window no reader reads: the control is stored, never fetched
        my_key = key_id(pointer_key(self.s["run_id"], self.me.peer_id, quiet))
        my_pointer = {**pointer, "round": mine_round, "groups": [{**junk, "sha256": hashlib.sha256(b"hostile").digest()}],
                      "publisher": self.me.peer_id, "window": quiet, "puzzle": self.me.puzzle}
        later, now = exp + 5.0, time.time()
        ttl, skew = self.s["ttl"], self.s["max_clock_skew"]

        def mine(value: object, exp_: float = later, subkey: bytes = my_subkey, at: DHTID = my_key) -> tuple:
            raw = value if isinstance(value, bytes) else SER.dumps(value)
            return at, [self.me.sign(at, subkey, raw, exp_)], [exp_], [subkey]

        cases = {
            "overwrite": (kid, [self.me.sign(kid, honest_subkey, forged, later)], [later], [honest_subkey]),
            "forged_signature": (kid, [forged + b"[signature:" + base64.b64encode(os.urandom(256)) + b"]"], [later],
                                 [honest_subkey]),
            "replay_changed_expiry": (kid, [honest_raw], [later], [honest_subkey]),
            "replay_into_other_key": (my_key, [honest_raw], [exp], [honest_subkey]),
            "mine_under_victims_key": mine(my_pointer, later, my_subkey, kid),
            "far_future_expiry": mine(my_pointer, now + 10 * (ttl + skew)),
            "oversize_record": mine({**my_pointer, "pad": "x" * 8000}),
            "malformed_value": mine(b"\xc1\xc1 not msgpack"),
            "schema_violation": mine({**my_pointer, "groups": [{**g, "size": float(g["size"])}
                                                               for g in my_pointer["groups"]]}),
            "extra_field": mine({**my_pointer, "extra": 1}),
            "publisher_not_owner": mine({**my_pointer, "publisher": pointer["publisher"]}),
            "old_version": mine({**my_pointer, "v": 3}),
            "subkey_without_owner": mine(my_pointer, later, b"plain-subkey"),
            "regular_value": (my_key, [SER.dumps(my_pointer)], [later], [None]),
        }
        answers = {name: await self.store_everywhere(peers, *case) for name, case in cases.items()}
        bundle = DictionaryDHTValue()
        bundle.store(honest_subkey, self.me.sign(kid, honest_subkey, forged, later), later)
        answers["dictionary_store"] = await self.store_everywhere(peers, kid, [bundle], [later], [None])
        answers["valid_control"] = await self.store_everywhere(peers, *mine(my_pointer, now + ttl / 2))
        # and serve the forged records itself, to whoever reads through this peer
        storage = self.node.protocol.storage
        storage.store_subkey(kid, honest_subkey, cases["overwrite"][1][0], later)
        storage.store_subkey(kid, my_subkey, cases["mine_under_victims_key"][1][0], later)
        return {"asked": [p.to_base58() for p in peers], "answers": answers, "key": key}

    async def inspect(self, key: str, group_id: str) -> dict:
        kid = key_id(key)
        puzzles = PuzzleVerifier(PuzzleConfig(**self.s.get("puzzle", {})))
        honest = RecordChecker(self.identity.private_key, puzzles=puzzles,
                               max_record_bytes=4096, ttl=self.s["ttl"], max_clock_skew=self.s["max_clock_skew"])
        out = {}
        for peer in await self.honest_peers(kid):
            found = await self.node.protocol.call_find(peer, [kid])
            value = found[kid][0] if found else None
            entries = list(value.value.items()) if value is not None else []
            invalid = sum(not honest.validate(DHTRecord(kid.to_bytes(), SER.dumps(sk), raw, exp))
                          for sk, (raw, exp) in entries)
            mine = [(base64.b64encode(raw).decode(), exp) for sk, (raw, exp) in entries
                    if names_group(_unsigned(raw), group_id)]
            out[peer.to_base58()] = {"records": len(entries), "invalid": invalid, "honest": mine[0] if mine else None}
        return out

    async def publish_bad(self, victim_body: bytes, cap: int) -> dict:
        run_id, ttl, me = self.s["run_id"], self.s["ttl"], self.me.peer_id
        now = time.time()
        w = window_of(now, self.s["window"])

        def group(item: str, **kw) -> Group:
            return make_group(sender=kw.pop("sender", me), run_id=run_id, item=item, tokens=32,
                              tokenizer_fp=kw.pop("tokenizer_fp", self.s["tokenizer_fp"]),
                              vocab_size=self.s["vocab_size"], **kw)

        good = [group(f"flood-{i}") for i in range(cap + 2)]
        twin_a, twin_b = group("twin-a"), group("twin-b")  # same size, different content
        junk = os.urandom(len(encode_group(twin_a)))
        victim_group = decode_group(victim_body)
        long, absent = group("long"), group("absent")
        tok = self.s["tokenizer_fp"]
        # name -> (group the pointer describes, pointer fields changed, body announced, bytes served)
        cases = {
            "hash_mismatch": (twin_a, {}, encode_group(twin_a), encode_group(twin_b)),
            "size_mismatch": (long, {}, encode_group(long), encode_group(long) + b"0123456789"),
            "malformed": (twin_a, {}, junk, junk),
            "out_of_vocab": (g := group("vocab", max_token=self.s["vocab_size"] * 10), {}, encode_group(g), None),
            "sender_mismatch": (g := group("impostor", sender=victim_group.sender), {}, encode_group(g), None),
            "reannounce_victim": (victim_group, {}, victim_body, None),
            "pointer_mismatch": (g := group("fp", tokenizer_fp="another-tokenizer"), {"tokenizer_fp": tok},
                                 encode_group(g), None),
            # another tokenizer's group without alignment data: its pointer does not say `aligned`, refused unfetched
            "tokenizer": (g := group("tok", tokenizer_fp="another-tokenizer"), {"tokenizer_fp": "another-tokenizer"},
                          encode_group(g), None),
            # the same, its pointer signing that it carries alignment data: fetched, and refused as a signed lie
            "aligned_lie": (g := group("unaligned", tokenizer_fp="another-tokenizer"),
                            {"tokenizer_fp": "another-tokenizer", "aligned": True}, encode_group(g), None),
            "another_run": (g := group("run"), {"run_id": "another-run"}, encode_group(g), None),
            "stale": (g := group("old"), {"created_at": now - 2 * ttl}, encode_group(g), None),
            "future": (g := group("new"), {"created_at": now + ttl}, encode_group(g), None),
            "oversize": (g := group("big"), {"size": self.s["max_bytes"] + 1}, encode_group(g), None),
            "fetch_failed": (absent, {}, encode_group(absent), b""),
        }
        cases.update({f"good-{i}": (g, {}, encode_group(g), None) for i, g in enumerate(good)})
        stored = {}
        for number, (name, (described, fields, body, served)) in enumerate(cases.items()):
            gid = content_id(body)  # each case its own round pointer of one group
            pointed = {**pointed_group(body, created_at=described.created_at, tokens=described.num_completion_tokens),
                       **{k: v for k, v in fields.items() if k in ("created_at", "size")}}
            pointer = {**round_value(publisher=me, run_id=run_id, tokenizer_fp=described.tokenizer_fp, window=w,
                                     round=number, groups=[pointed], puzzle=self.me.puzzle),
                       **{k: v for k, v in fields.items() if k not in ("created_at", "size")}}
            kid = key_id(pointer_key(run_id, me, w))  # another run's pointer here is refused as `unbound_key`
            served = body if served is None else served
            if served:
                self.served[gid] = len(served).to_bytes(8, "big") + served
            subkey = make_subkey(self.me.public_key, round_name(number))
            value = self.me.sign(kid, subkey, SER.dumps(pointer), now + ttl)
            peers = await self.honest_peers(kid)
            stored[name] = await self.store_everywhere(peers, kid, [value], [now + ttl], [subkey])
        await self.floods.announce(self.me, w, len(cases) - 1)  # the other run's pointer is never stored
        return {"good": [g.group_id for g in good], "stored": stored}

    async def publish_groups(self, bodies: list[bytes]) -> dict:
        run_id, ttl, me = self.s["run_id"], self.s["ttl"], self.me.peer_id
        now = time.time()
        w = window_of(now, self.s["window"])
        kid = key_id(pointer_key(run_id, me, w))
        peers = await self.honest_peers(kid)
        pointed = []
        for body in bodies:  # described from the raw record: the decoder refuses some of these bodies
            rec = msgpack.unpackb(body, raw=False)
            try:
                tokens = decode_group(body).num_completion_tokens
            except WireError:
                tokens = 0  # refused before its tokens are compared
            pointed.append(pointed_group(body, created_at=rec["ts"], tokens=tokens))
            self.served[content_id(body)] = len(body).to_bytes(8, "big") + body
        rec = msgpack.unpackb(bodies[0], raw=False)
        number = secrets.randbelow(10 ** 9)
        pointer = round_value(publisher=me, run_id=rec["run"], tokenizer_fp=rec["tfp"], window=w, round=number,
                              groups=pointed, puzzle=self.me.puzzle)  # one round, as an honest publisher's
        subkey = make_subkey(self.me.public_key, round_name(number))
        value = self.me.sign(kid, subkey, SER.dumps(pointer), now + ttl)
        stored = [await self.store_everywhere(peers, kid, [value], [now + ttl], [subkey])]
        await self.floods.announce(self.me, w, 1)
        return {"group_ids": [content_id(b) for b in bodies], "stored": stored}


def _unsigned(raw: bytes) -> dict:
    """The value of a signed record, signature stripped (a map, or {} when it is none)."""
    try:
        value = SER.loads(RSASignatureValidator._SIGNATURE_RE.sub(b"", raw))
    except (ValueError, TypeError, msgpack.UnpackException):  # a relayed record of another form names no group
        return {}
    return value if isinstance(value, dict) else {}


async def amain() -> None:
    hostile = Hostile(json.loads(sys.argv[1]))
    await hostile.start()
    maddrs = [str(m) for m in await hostile.p2p.get_visible_maddrs()]
    _send({"peer_id": hostile.me.peer_id, "maddrs": maddrs, "identities": hostile.floods.identities(),
           "body_peers": hostile.floods.body_peer_ids(), "identity_costs": hostile.identity_costs})
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            break
        cmd = json.loads(line)
        if cmd["op"] == "attack_records":
            _send(await hostile.attack_records(cmd["victim"], cmd["group_id"]))
        elif cmd["op"] == "inspect":
            _send(await hostile.inspect(cmd["key"], cmd["group_id"]))
        elif cmd["op"] == "publish_bad":
            _send(await hostile.publish_bad(base64.b64decode(cmd["victim_body"]), cmd["cap"]))
        elif cmd["op"] == "publish_groups":
            _send(await hostile.publish_groups([base64.b64decode(b) for b in cmd["bodies"]]))
        elif cmd["op"] == "flood":
            hostile.floods.launch(cmd["attack"], cmd["n"], **cmd.get("params", {}))
            _send({"started": cmd["attack"]})
        elif cmd["op"] == "results":
            _send(await hostile.floods.results())
        elif cmd["op"] == "done":
            _send({"done": hostile.floods.done()})
        else:
            break
    await hostile.floods.stop()
    await hostile.node.shutdown()
    await hostile.p2p.shutdown()


def _send(obj: object) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    asyncio.run(amain())
