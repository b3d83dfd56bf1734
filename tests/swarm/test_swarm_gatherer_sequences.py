"""Seeded sequences of what several identities send a gatherer with a budget: it never raises, never charges
an honest publisher, keeps its tables consistent, and still gathers afterwards (issue 38).

The gatherer, its selection, scheduler, holder book and round tracker are the product's. What
stands in is the network below them: pointers and haves arrive as the gossip gate would hand
them over (`Gatherer.on_gossip`, records already checked), the DHT answers no read (pointers
come by gossip here), and the stream layer of the daemon (`call_binary_stream_handler`) answers
each body request as its peer behaves: honest publishers serve their own real bodies, a copier
serves an honest publisher's bodies under its own pointers (the same group ids: issue 38's
crash), a liar serves other bytes, a staller never answers, and holders announce real and random
ids, then vanish. Each seed draws a sequence of rounds, copies, replays, reorders, stale and
future pointers, haves and gathers; afterwards the hostile ones fall silent and one more honest
round must come in whole, with no wait for what was in flight: a chosen body that stalls gives
its budget back at once (its publisher loses its place, `fetch.scheduler`), so nothing a
staller holds delays the honest round (issue 40).
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import time
from collections import Counter

import base58
import pytest
from hivemind.utils.timed_storage import get_dht_time

from ftis_swarm.config import SwarmConfig, WireConfig
from ftis_swarm.lab.hostile.floods import make_group
from ftis_swarm.peers.intake import Budget
from ftis_swarm.peers.policy import ALLOW_ALL
from ftis_swarm.swarm.counters import SwarmCounters
from ftis_swarm.swarm.dht.reading import FoundRecord
from ftis_swarm.swarm.fetch.gatherer import Gatherer
from ftis_swarm.swarm.records import RECORD_VERSION, HaveRecord, make_round_pointer
from ftis_swarm.wire import encode_group

RUN, TFP, VOCAB = "seq", "tok", 1000
NONCE = "0" * 16


def pid(name: str) -> str:
    return base58.b58encode(b"\x12\x20" + hashlib.sha256(name.encode()).digest()).decode()


HONEST = [pid("honest-0"), pid("honest-1")]
COPIER, LIAR, STALLER = pid("copier"), pid("liar"), pid("staller")
HOLDERS = [pid("holder-0"), pid("holder-1")]


class _Writer:
    def __init__(self, on_request):
        self._on_request = on_request

    def write(self, data: bytes) -> None:
        self._on_request([data[i:i + 32].decode() for i in range(1, len(data), 32)])

    async def drain(self) -> None:
        return None

    def close(self) -> None:
        return None


class Network:
    """The daemon's stream layer as the peers behave: who serves which bytes for which group id."""

    def __init__(self) -> None:
        self.bodies: dict[str, dict[str, bytes]] = {}  # peer -> group id -> the bytes it sends
        self.silent: set[str] = {STALLER}
        self.gone: set[str] = set()

    async def call_binary_stream_handler(self, peer_id, name: str):
        peer = peer_id.to_base58()
        if peer in self.gone:
            raise OSError(f"failed to dial {peer}: no addresses")
        reader = asyncio.StreamReader()

        def answer(ids: list[str]) -> None:
            if peer in self.silent:
                return
            out = b""
            for gid in ids:
                body = self.bodies.get(peer, {}).get(gid)
                out += b"\x01" if body is None else b"\x00" + len(body).to_bytes(8, "big") + body
            reader.feed_data(out)

        return None, reader, _Writer(answer)


class NoDHT:
    async def read(self, keys, *, timeout: float) -> dict:
        return {}


def _round(publisher: str, items: list[str], round: int, *, created_at: float) -> tuple[list, list[bytes]]:
    groups = [make_group(sender=publisher, run_id=RUN, item=f"{round}-{item}", tokens=8, tokenizer_fp=TFP,
                         vocab_size=VOCAB, created_at=created_at) for item in items]
    encoded = [(g, encode_group(g)) for g in groups]
    return encoded, [body for _, body in encoded]


def _pointer(publisher: str, encoded: list, round: int) -> FoundRecord:
    pointer = make_round_pointer(encoded, publisher=publisher, run_id=RUN, tokenizer_fp=TFP, window=1,
                                 round=round, puzzle=NONCE)
    return FoundRecord(owner=publisher, content=pointer, expiration=get_dht_time() + 60)


def _have(holder: str, ids: list[str]) -> FoundRecord:
    have = HaveRecord(v=RECORD_VERSION, holder=holder, run_id=RUN, window=1, created_at=get_dht_time(),
                      puzzle=NONCE, groups=[bytes.fromhex(g) for g in ids[:64]])
    return FoundRecord(owner=holder, content=have, expiration=get_dht_time() + 30)


async def _sequence(seed: int) -> tuple[Gatherer, SwarmCounters, Network, list[str], list[str]]:
    rng = random.Random(seed)
    cfg = SwarmConfig(run_id=RUN, poll_interval=0.05, ttl=60.0, max_clock_skew=5.0, fetch_timeout=1.0,
                      first_byte_timeout=0.3, max_fetch_attempts=2, wire=WireConfig(max_bytes=256 * 1024))
    counters, net = SwarmCounters(), Network()
    gatherer = Gatherer(reader=NoDHT(), p2p=net, cfg=cfg, peer_id=pid("me"), tokenizer_fp=TFP, vocab_size=VOCAB,
                        counters=counters, policy=ALLOW_ALL)
    await gatherer.use_budget(Budget(max_groups=6, max_groups_per_peer=3, max_tokens=6 * 32,
                                     max_tokens_per_peer=3 * 32, context=4096, strangers_share=1.0))
    sent: list[FoundRecord] = []
    honest_ids: list[str] = []
    got: list[str] = []
    rounds = Counter()
    for step in range(rng.randint(40, 80)):
        kind = rng.choice(["honest", "honest", "copy", "liar", "stall", "replay", "reorder", "stale", "future",
                           "have", "gather", "gather", "vanish"])
        now = time.time()
        if kind == "honest":
            who = rng.choice(HONEST)
            rounds[who] += 1
            encoded, bodies = _round(who, ["a", "b", "c"][:rng.randint(1, 3)], rounds[who], created_at=now)
            record = _pointer(who, encoded, rounds[who])
            ids = [v.group_id for v in record.content.views()]
            net.bodies.setdefault(who, {}).update(zip(ids, bodies))
            honest_ids += ids
        elif kind == "copy" and honest_ids:  # the copier's own pointer to an honest publisher's bodies
            gid = rng.choice(honest_ids)
            owner = next(p for p in HONEST if gid in net.bodies.get(p, {}))
            body = net.bodies[owner][gid]
            encoded = [(make_group(sender=owner, run_id=RUN, item="x", tokens=8, tokenizer_fp=TFP, vocab_size=VOCAB,
                                   created_at=now), body)]  # the pointer describes `body`: its hash and size
            record = _pointer(COPIER, encoded, rng.randint(0, 3))
            net.bodies.setdefault(COPIER, {})[gid] = body
        elif kind in ("liar", "stall", "stale", "future"):
            who = {"liar": LIAR, "stall": STALLER}.get(kind, rng.choice(HONEST))
            at = now + (-1000 if kind == "stale" else 1000 if kind == "future" else 0)
            encoded, bodies = _round(who, ["z"], 50 + step, created_at=at)
            record = _pointer(who, encoded, 50 + step)
            if kind == "liar":
                net.bodies.setdefault(LIAR, {})[record.content.views()[0].group_id] = bodies[0][::-1]
        elif kind == "replay" and sent:
            record = rng.choice(sent)
        elif kind == "reorder" and sent:
            record = min(sent, key=lambda r: getattr(r.content, "round", 0))
        elif kind == "have":
            holder = rng.choice(HOLDERS)
            ids = rng.sample(honest_ids, min(len(honest_ids), 4)) + [f"{rng.getrandbits(128):032x}" for _ in range(8)]
            for gid in ids:
                owner = next((p for p in HONEST if gid in net.bodies.get(p, {})), None)
                if owner is not None:
                    net.bodies.setdefault(holder, {})[gid] = net.bodies[owner][gid]
            record = _have(holder, ids)
        elif kind == "gather":
            await gatherer.open_gather(2.0, round=step)
            await asyncio.sleep(rng.choice([0.0, 0.05, 0.2]))
            await gatherer.poll_once()
            await gatherer.close_gather()
            got += [g.group_id for g, _ in gatherer.drain()]
            continue
        elif kind == "vanish":
            net.gone.add(rng.choice(HOLDERS + HONEST[:1]))
            continue
        else:
            continue
        gatherer.on_gossip(record)
        sent.append(record)
        await asyncio.sleep(0)
    return gatherer, counters, net, honest_ids, got


@pytest.mark.parametrize("seed", range(12))
def test_any_sequence_leaves_the_gatherer_whole_and_the_honest_uncharged(seed):
    async def run() -> tuple:
        gatherer, counters, net, honest_ids, got = await _sequence(seed)
        net.silent.add(LIAR)
        net.gone.clear()
        last = HONEST[1]
        encoded, bodies = _round(last, ["final-1", "final-2"], 10_000, created_at=time.time())
        record = _pointer(last, encoded, 10_000)
        final = [v.group_id for v in record.content.views()]
        net.bodies.setdefault(last, {}).update(zip(final, bodies))
        gatherer.on_gossip(record)
        gathers = 0
        for r in range(40):  # the gatherer still gathers: the last honest round comes in whole
            gathers += 1
            await gatherer.open_gather(2.0, round=20_000 + r)
            waited = time.monotonic() + 1.0  # a gather waits for its chosen bodies, as the node's does, up to 1 s
            while gatherer._selection.in_flight() and time.monotonic() < waited:
                await asyncio.sleep(0.05)
            await gatherer.poll_once()
            await gatherer.close_gather()
            got += [g.group_id for g, _ in gatherer.drain()]
            if set(final) <= set(got):
                break
        gatherer._scheduler.cancel()
        return counters.snapshot(), honest_ids, got, final, gathers

    snapshot, honest_ids, got, final, gathers = asyncio.run(run())
    assert snapshot["loop_errors"] == 0  # nothing raised anywhere on the loop
    assert set(final) <= set(got), (final, got)
    assert gathers <= 3, gathers  # no stall holds the budget past a gather or two (each waits at most 1 s)
    assert len(got) == len(set(got))  # a group is delivered at most once
    assert set(got) <= set(honest_ids) | set(final)  # only honest bodies, whoever pointed at them
    charged = snapshot["rejected_by_peer"]
    assert set(charged.get(HONEST[1], {})) <= {"stale", "future"}, charged  # its own old and future pointers only
    assert set(charged.get(HONEST[0], {})) <= {"stale", "future", "fetch_failed"}, charged  # it may vanish
    copier = snapshot["rejected_by_peer"].get(COPIER, {})
    assert set(copier) <= {"sender_mismatch"}, copier


def test_a_bug_in_the_selection_is_contained_counted_and_the_gatherer_starts_its_selection_afresh(monkeypatch, caplog):
    """The last net: were the selection's own bookkeeping to raise (a bug, injected here), the gather neither
    raises nor ends; the error is counted and logged once with its traceback, and the next round comes in."""
    from ftis_swarm.swarm.fetch.selection import Selection

    async def run() -> tuple:
        cfg = SwarmConfig(run_id=RUN, poll_interval=0.05, ttl=60.0, max_clock_skew=5.0,
                          wire=WireConfig(max_bytes=256 * 1024))
        counters, net = SwarmCounters(), Network()
        gatherer = Gatherer(reader=NoDHT(), p2p=net, cfg=cfg, peer_id=pid("me"), tokenizer_fp=TFP,
                            vocab_size=VOCAB, counters=counters, policy=ALLOW_ALL)
        await gatherer.use_budget(Budget(max_groups=6, max_groups_per_peer=3, max_tokens=192,
                                         max_tokens_per_peer=96, context=4096, strangers_share=1.0))
        broken = monkeypatch.context()
        with broken as m:
            m.setattr(Selection, "next_gather", lambda self: {}["a bug"])
            m.setattr(Selection, "choose", lambda self: {}["a bug"])
            encoded, bodies = _round(HONEST[0], ["a"], 1, created_at=time.time())
            record = _pointer(HONEST[0], encoded, 1)
            net.bodies[HONEST[0]] = dict(zip([v.group_id for v in record.content.views()], bodies))
            gatherer.on_gossip(record)
            await gatherer.open_gather(2.0, round=1)
            assert await gatherer.close_gather() == (0, 0)
        got = []
        encoded, bodies = _round(HONEST[0], ["b"], 2, created_at=time.time())
        record = _pointer(HONEST[0], encoded, 2)
        ids = [v.group_id for v in record.content.views()]
        net.bodies[HONEST[0]].update(zip(ids, bodies))
        gatherer.on_gossip(record)
        for r in range(20):
            await gatherer.open_gather(2.0, round=2 + r)
            await asyncio.sleep(0.05)
            await gatherer.close_gather()
            got += [g.group_id for g, _ in gatherer.drain()]
            if set(ids) <= set(got):
                break
        gatherer._scheduler.cancel()
        return counters.snapshot(), ids, got

    snapshot, ids, got = asyncio.run(run())
    assert set(ids) <= set(got)
    assert snapshot["loop_errors"] >= 3  # on gossip (its choose), at the gather's open and at its close
    logged = [r for r in caplog.records if "contained" in r.getMessage()]
    assert len(logged) == len({r.getMessage() for r in logged}) and all(r.exc_info for r in logged)
