"""The hostile peer's floods and bad body servers (see `hostile`), run in the background.

- `pointers`: n valid, signed pointers, spread over identities that only
  sign (their peer ids have no daemon behind them: every body is unreachable), each with
  its membership record claiming them all.
- `random_keys`: n pointer-form records of the hostile's own key under random keys.
- `dictionary`: one whole-dictionary store holding n unknown msgpack extension types.
- `bodies`: n pointers per bad body server, each server a libp2p daemon of its own
  identity: `stall` (reads the request, never answers), `silence` (a header, then
  nothing), `dribble` (a header, then one byte every 2 s), `endless` (a header, then
  random bytes without end).
- `replays`: every honest record it can read, stored again n times as it was.
- `gossip`: pointers pushed on the run's topic (`hostile_gossip`).
- `fill`: n valid pointers of the hostile's own key, stored by its own daemon on every
  honest peer (owner = requester: the rank of an honest peer storing its own records),
  spread over consecutive windows' keys (900 a key, below a key's 1 MiB), each window's
  membership record claiming them. Run by several hostile processes at once (`bench
  hostile`'s fill, `bench fill`), it fills every peer's storage with records that break no rule.
  With the setting `holds_nothing` the process holds no record of anyone's (`HoldsNothing`).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import secrets
import tempfile
import time
from pathlib import Path
from typing import Optional

import msgpack
import numpy as np
from hivemind.dht.protocol import DHTProtocol
from hivemind.dht.routing import DHTID
from hivemind.dht.storage import DHTLocalStorage, DictionaryDHTValue
from hivemind.p2p import P2P
from hivemind.proto import dht_pb2

from ftis_swarm.lab.hostile.base import HostilePeer, Signer
from ftis_swarm.lab.hostile.gossip import GossipFlood
from ftis_swarm.swarm.dht.codec import DICTIONARY_EXT
from ftis_swarm.swarm.fetch.streams import BODY_PROTOCOL, ID_LEN
from ftis_swarm.swarm.identity import load_identity
from ftis_swarm.swarm.keys import MEMBER_SUBKEY_NAME, key_id, member_key, member_shard, pointer_key, window_of
from ftis_swarm.swarm.records import RECORD_VERSION, make_subkey, round_name
from ftis_swarm.wire import Group

logger = logging.getLogger(__name__)

SER = DHTProtocol.serializer
BODY_KINDS = ("stall", "silence", "dribble", "endless")
BODY_SIZE = 4096
_CHUNK = 256
_FILL_PER_KEY = 900


def round_value(*, publisher: str, run_id: str, tokenizer_fp: str, window: int, round: int,
                groups: list[dict], puzzle: str) -> dict:
    """A round pointer's value as an honest publisher signs it (`records.RoundPointer`), unchecked;
    `puzzle` is the signer's nonce."""
    return {"v": RECORD_VERSION, "publisher": publisher, "run_id": run_id, "tokenizer_fp": tokenizer_fp,
            "window": window, "round": round, "groups": groups, "puzzle": puzzle}


def pointed_group(body: bytes, *, created_at: float, tokens: int) -> dict:
    """One group of a round pointer's value, for `body`."""
    return {"sha256": hashlib.sha256(body).digest(), "size": len(body), "created_at": float(created_at),
            "tokens": tokens}


def names_group(value: dict, group_id: str) -> bool:
    """Whether a round pointer's (unsigned) value names the group `group_id`."""
    return any(g.get("sha256", b"").hex().startswith(group_id) for g in value.get("groups", ()))


def make_group(*, sender: str, run_id: str, item: str, tokens: int, tokenizer_fp: str, vocab_size: int,
               created_at: Optional[float] = None, max_token: Optional[int] = None) -> Group:
    """A valid 4-completion group whose content depends on (sender, item, tokens)."""
    seed = hashlib.sha256(f"{sender}/{item}/{tokens}".encode()).digest()
    rng = np.random.default_rng(int.from_bytes(seed[:8], "big"))
    return Group.build(
        run_id=run_id, sender=sender, model_id="test-model", policy_version=3,
        created_at=time.time() if created_at is None else created_at, tokenizer_fp=tokenizer_fp,
        task_id="arith", item_id=item, prompt_ids=rng.integers(0, vocab_size, 12), temperature=0.7,
        completion_ids=[rng.integers(0, max_token or vocab_size, tokens) for _ in range(4)],
        logp_gen=[-rng.random(tokens, dtype=np.float32) for _ in range(4)],
    )


class HoldsNothing(DHTLocalStorage):
    """A DHT storage that takes no record: a filler that is a DHT peer of the swarm yet holds none of its
    records (setting `holds_nothing`), so that what honest publishes reach is what honest peers took."""

    def store(self, key, value, expiration_time, subkey=None) -> bool:
        return False

    def store_subkey(self, key, subkey, value, expiration_time) -> bool:
        return False


class Floods:
    def __init__(self, hostile: HostilePeer, signers: list[Signer]):
        self.h, self.signers = hostile, signers
        if hostile.s.get("holds_nothing"):
            hostile.node.protocol.storage = HoldsNothing()
        self.body_peers: dict[str, tuple[P2P, Signer]] = {}
        self._tasks: dict[str, asyncio.Task] = {}
        self._paced_until = 0.0
        """When the next chunk may go out at the defenders' store rate (`_store`)."""

    def identities(self) -> list[str]:
        return [s.peer_id for s in self.signers]

    def body_peer_ids(self) -> dict[str, str]:
        return {kind: signer.peer_id for kind, (_, signer) in self.body_peers.items()}

    async def start_body_peers(self) -> None:
        for kind in BODY_KINDS:
            path = Path(tempfile.mkdtemp(prefix=f"hostile-{kind}-")) / "id.key"
            P2P.generate_identity(str(path))
            p2p = await P2P.create(initial_peers=self.h.s["peers"], host_maddrs=[f"/ip4/{self.h.host}/tcp/0"],
                                   identity_path=str(path), check_if_identity_free=False)
            await p2p.add_binary_stream_handler(BODY_PROTOCOL, _bad_server(kind))
            self.body_peers[kind] = (p2p, Signer(load_identity(path).private_key, self.h.s))

    def launch(self, name: str, n: int, **params: object) -> None:
        """Starts flood `name` in the background; `gossip` takes `burst` and `targets` (peer ids)."""
        if name == "gossip":
            self._tasks[name] = asyncio.create_task(GossipFlood(self.h, self.signers).run(n, **params))
            return
        attack = {"pointers": self.pointers, "random_keys": self.random_keys, "dictionary": self.dictionary,
                  "bodies": self.bodies, "replays": self.replays, "fill": self.fill}[name]
        self._tasks[name] = asyncio.create_task(attack(n))

    async def results(self) -> dict:
        out = {}
        for name, task in self._tasks.items():
            try:
                out[name] = await task
            except Exception as exc:  # reported to the driver, which decides what a failed flood means
                logger.exception("flood %s failed", name)
                out[name] = {"error": repr(exc)}
        return out

    def done(self) -> bool:
        return all(task.done() for task in self._tasks.values())

    async def stop(self) -> None:
        for task in self._tasks.values():
            task.cancel()
        for p2p, _ in self.body_peers.values():
            await p2p.shutdown()

    async def announce(self, signer: Signer, w: int, groups: int) -> dict[str, int]:
        """Stores `signer`'s membership record of window `w`, claiming `groups` pointers."""
        s, now = self.h.s, time.time()
        member = {"v": RECORD_VERSION, "publisher": signer.peer_id, "run_id": s["run_id"], "window": w,
                  "shards": s["member_shards"], "groups": groups, "updated_at": now, "puzzle": signer.puzzle}
        kid = key_id(member_key(s["run_id"], w, member_shard(signer.peer_id, s["member_shards"])))
        subkey = make_subkey(signer.public_key, MEMBER_SUBKEY_NAME)
        return await self._store(kid, [(subkey, signer.sign(kid, subkey, SER.dumps(member), now + s["ttl"]),
                                        now + s["ttl"])])

    async def pointers(self, n: int) -> dict:
        per = max(1, n // len(self.signers))
        accepted: dict[str, int] = {}
        for signer in self.signers:  # each identity's pointers in the window current when it publishes them
            w = window_of(time.time(), self.h.s["window"])
            _add(accepted, await self._publish(signer, w, per, size=BODY_SIZE))
            _add(accepted, await self.announce(signer, w, per))
        return {"sent": per * len(self.signers) + len(self.signers), "accepted": accepted}

    async def fill(self, n: int) -> dict:
        me, accepted = self.h.me, {}
        w = window_of(time.time(), self.h.s["window"])
        for i, start in enumerate(range(0, n, _FILL_PER_KEY)):
            count = min(_FILL_PER_KEY, n - start)
            _add(accepted, await self._publish(me, w + i, count, size=BODY_SIZE))
            _add(accepted, await self.announce(me, w + i, count))
        return {"sent": n + -(-n // _FILL_PER_KEY), "accepted": accepted}

    async def bodies(self, n: int) -> dict:
        accepted: dict[str, int] = {}
        for _, signer in self.body_peers.values():
            w = window_of(time.time(), self.h.s["window"])
            _add(accepted, await self._publish(signer, w, n, size=BODY_SIZE))
            _add(accepted, await self.announce(signer, w, n))
        return {"sent": (n + 1) * len(self.body_peers), "accepted": accepted}

    async def random_keys(self, n: int) -> dict:
        s, me, now = self.h.s, self.h.me, time.time()
        accepted: dict[str, int] = {}
        for start in range(0, n, _CHUNK):
            items = []
            for _ in range(min(_CHUNK, n - start)):
                kid = DHTID.generate()
                name, pointer = self.pointer_value(me, window_of(now, s["window"]), BODY_SIZE)
                subkey = make_subkey(me.public_key, name)
                value = SER.dumps(pointer)
                items.append((kid, subkey, me.sign(kid, subkey, value, now + s["ttl"]), now + s["ttl"]))
            for peer in await self.h.honest_peers(items[0][0]):
                answer = await self.h.node.protocol.call_store(
                    peer, [i[0] for i in items], [i[2] for i in items], [i[3] for i in items],
                    subkeys=[i[1] for i in items])
                accepted[peer.to_base58()] = accepted.get(peer.to_base58(), 0) + sum(answer or [])
        return {"sent": n, "accepted": accepted}

    async def dictionary(self, n: int) -> dict:
        """One store whose dictionary holds `n` items keyed by unknown extension types (codes 1 to 31)."""
        protocol, now = self.h.node.protocol, time.time()
        items = [[msgpack.ExtType(1 + i % 31, b"x"), b"v", now + 60] for i in range(n)]
        payload = msgpack.packb([None, now + 60, items], use_bin_type=True)
        value = msgpack.packb(msgpack.ExtType(DICTIONARY_EXT, payload), use_bin_type=True)
        kid = key_id(member_key(self.h.s["run_id"], window_of(now, self.h.s["window"]), 0))
        request = dht_pb2.StoreRequest(keys=[kid.to_bytes()], subkeys=[DHTProtocol.IS_DICTIONARY], values=[value],
                                       expiration_time=[now + 60], in_cache=[False], peer=protocol.node_info)
        accepted = {}
        for peer in await self.h.honest_peers(kid):
            response = await protocol.get_stub(peer).rpc_store(request, timeout=30.0)
            accepted[peer.to_base58()] = sum(response.store_ok)
        return {"sent": 1, "bytes": len(value), "accepted": accepted}

    async def replays(self, n: int) -> dict:
        """Stores again, `n` times, every record under the membership keys of the last windows, as it was."""
        s, protocol, now = self.h.s, self.h.node.protocol, time.time()
        sent, accepted = 0, {}
        for w in range(window_of(now - 60, s["window"]), window_of(now, s["window"]) + 1):
            for shard in range(s["member_shards"]):
                kid = key_id(member_key(s["run_id"], w, shard))
                for peer in await self.h.honest_peers(kid):
                    found = await protocol.call_find(peer, [kid])
                    value = found and found[kid][0]
                    if value is None or not isinstance(value.value, DictionaryDHTValue):
                        continue
                    items = [(sk, raw, exp) for sk, (raw, exp) in value.value.items()]
                    for _ in range(n):
                        sent += len(items)
                        _add(accepted, await self._store(kid, items))
        return {"sent": sent, "accepted": accepted}

    def pointer_value(self, signer: Signer, w: int, size: int) -> tuple[str, dict]:
        """(subkey name, value) of a round pointer of `signer` in window `w` (a random round, one
        group) whose body it never serves."""
        s, number = self.h.s, secrets.randbelow(10 ** 9)
        return round_name(number), round_value(
            publisher=signer.peer_id, run_id=s["run_id"], tokenizer_fp=s["tokenizer_fp"], window=w, round=number,
            puzzle=signer.puzzle,
            groups=[{"sha256": secrets.token_bytes(32), "size": size, "created_at": time.time(), "tokens": 64}])

    async def _publish(self, signer: Signer, w: int, n: int, *, size: int) -> dict[str, int]:
        kid, exp = key_id(pointer_key(self.h.s["run_id"], signer.peer_id, w)), time.time() + self.h.s["ttl"]
        items = []
        for _ in range(n):
            name, value = self.pointer_value(signer, w, size)
            subkey = make_subkey(signer.public_key, name)
            items.append((subkey, signer.sign(kid, subkey, SER.dumps(value), exp), exp))
        return await self._store(kid, items)

    async def _store(self, kid: DHTID, items: list) -> dict[str, int]:
        """Stores (subkey, signed value, expiry) items under `kid` on every honest peer, in chunks.

        With `store_rate` in the settings (the defenders' documented `records.store_rate` and
        `store_burst`), the chunks are paced to it, as a patient filler would: every record it
        sends is then one the peer checks, none is refused for the rate."""
        accepted: dict[str, int] = {}
        peers = await self.h.honest_peers(kid)
        rate, size = self.h.s.get("store_rate"), min(_CHUNK, self.h.s.get("store_burst", _CHUNK))
        for start in range(0, len(items), size):
            chunk = items[start:start + size]
            if rate and self._paced_until > time.monotonic():
                await asyncio.sleep(self._paced_until - time.monotonic())
            for peer in peers:
                answer = await self.h.node.protocol.call_store(
                    peer, [kid] * len(chunk), [i[1] for i in chunk], [i[2] for i in chunk],
                    subkeys=[i[0] for i in chunk])
                accepted[peer.to_base58()] = accepted.get(peer.to_base58(), 0) + sum(answer or [])
            if rate:
                self._paced_until = time.monotonic() + len(chunk) / rate
        return accepted


def _add(total: dict[str, int], more: dict[str, int]) -> None:
    for peer, n in more.items():
        total[peer] = total.get(peer, 0) + n


def _bad_server(kind: str):
    header = b"\x00" + BODY_SIZE.to_bytes(8, "big")

    async def serve(info, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readexactly(ID_LEN * (await reader.readexactly(1))[0])  # the request; the first id answered
            if kind != "stall":
                writer.write(header)
            if kind == "dribble":
                while True:
                    writer.write(b"x")
                    await writer.drain()
                    await asyncio.sleep(2.0)
            elif kind == "endless":
                chunk = os.urandom(1 << 16)
                while True:
                    writer.write(chunk)
                    await writer.drain()
            await writer.drain()
            await asyncio.sleep(3600.0)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the victim gave up on the stream: the point of the attack
        finally:
            writer.close()

    return serve
