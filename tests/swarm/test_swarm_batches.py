"""Several bodies per stream (`ftis.body.v2`) between real libp2p daemons: each body answered, checked and
settled on its own; bad requests charged to the requester; a stall mid-stream leaves the rest pending."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import time
from collections import Counter
from typing import Callable

import pytest
from hivemind.p2p import P2P, PeerID

from ftis_swarm.config import SwarmConfig
from ftis_swarm.peers.policy import ALLOW_ALL
from ftis_swarm.swarm.counters import SwarmCounters
from ftis_swarm.swarm.fetch.bodies import BodyStore, UploadCap
from ftis_swarm.swarm.fetch.legs import Legs
from ftis_swarm.swarm.fetch.pointers import key_of
from ftis_swarm.swarm.fetch.scheduler import FetchScheduler
from ftis_swarm.swarm.fetch.streams import (
    BODY_PROTOCOL,
    BUSY,
    FOUND,
    MAX_BODIES_PER_STREAM,
    MISSING,
    BodyUnavailable,
    fetch_bodies,
    serve_bodies,
)
from ftis_swarm.swarm.records import RECORD_VERSION, GroupPointer

pytestmark = [pytest.mark.net, pytest.mark.slow]

STEP = 1.0


async def _pair() -> tuple[P2P, P2P]:
    server = await P2P.create(host_maddrs=["/ip4/127.0.0.1/tcp/0"])
    maddrs = [str(m) for m in await server.get_visible_maddrs()]
    return server, await P2P.create(initial_peers=maddrs, host_maddrs=["/ip4/127.0.0.1/tcp/0"])


def _pointer(publisher: str, body: bytes) -> GroupPointer:
    digest = hashlib.sha256(body).hexdigest()
    return GroupPointer(v=RECORD_VERSION, group_id=digest[:32], size=len(body), sha256=digest, publisher=publisher,
                        created_at=time.time(), run_id="run", tokenizer_fp="tok", window=1, round=1,
                        round_groups=16, puzzle="0" * 16)


class _Fetcher:
    """A real `FetchScheduler` on a real daemon; a body is accepted when its sha256 is its pointer's."""

    def __init__(self, p2p: P2P, **cfg: object):
        self.accepted: list[str] = []
        self.accepted_at: list[float] = []
        self.rejected: list[tuple[str, str]] = []
        self.legs: list[Legs] = []
        self.counters = SwarmCounters()
        self.scheduler = FetchScheduler(p2p=p2p, cfg=SwarmConfig(**cfg), policy=ALLOW_ALL, counters=self.counters,
                                        room=lambda publisher: 100, on_body=self._body, on_reject=self._reject)

    def _body(self, pointer: GroupPointer, body: bytes) -> bool:
        if hashlib.sha256(body).hexdigest() != pointer.sha256:
            self._reject(pointer, "hash_mismatch", "")
            return False
        table = self.scheduler.table
        self.accepted.append(pointer.group_id)
        self.accepted_at.append(time.monotonic())
        self.legs.append(table.accept(table.get(key_of(pointer))))
        return True

    def _reject(self, pointer: GroupPointer, reason: str, detail: str) -> None:
        self.scheduler.table.reject(pointer, reason, revivable=False)
        self.rejected.append((pointer.group_id, reason))

    async def until(self, done: Callable[[], bool], pointers: list[GroupPointer], *, limit: float = 30.0) -> None:
        for pointer in pointers:
            self.scheduler.add(pointer)
        stop_at = time.monotonic() + limit
        while not done() and time.monotonic() < stop_at:
            self.scheduler.schedule()
            await asyncio.sleep(0.02)


def test_one_stream_carries_a_publishers_bodies_each_checked_on_its_own():
    bodies, liar, after = [os.urandom(48 << 10) for _ in range(6)], b"x" * 1000, [os.urandom(4096) for _ in range(3)]

    async def run() -> tuple[_Fetcher, list, Counter]:
        server, client = await _pair()
        store, served = BodyStore(), []
        publisher = server.peer_id.to_base58()
        await serve_bodies(server, store, first_byte_timeout=STEP, min_rate=1 << 20, max_streams_per_peer=4,
                           policy=ALLOW_ALL, counters=SwarmCounters(), on_served=lambda n, held: served.append(n))
        fetcher = _Fetcher(client, max_bodies_per_stream=8, max_fetches_per_peer=1)
        try:
            good = [_pointer(publisher, body) for body in bodies]
            for pointer, body in zip(good, bodies):
                store.put(pointer.group_id, body, until=time.time() + 600)
            await fetcher.until(lambda: len(fetcher.accepted) == 6, good)
            streams = Counter(first=fetcher.counters.snapshot()["body_streams"])
            lying = _pointer(publisher, liar).model_copy(update={"round": 2})  # the newest round: first in its stream
            store.put(lying.group_id, b"y" * len(liar), until=time.time() + 600)  # same length, other bytes
            rest = [_pointer(publisher, body) for body in after]
            for pointer, body in zip(rest, after):
                store.put(pointer.group_id, body, until=time.time() + 600)
            await fetcher.until(lambda: len(fetcher.accepted) == 9 and len(fetcher.rejected) == 1, [lying, *rest])
            streams["second"] = fetcher.counters.snapshot()["body_streams"] - streams["first"]
        finally:
            fetcher.scheduler.cancel()
            await client.shutdown()
            await server.shutdown()
        return fetcher, served, streams

    fetcher, served, streams = asyncio.run(run())
    assert sorted(fetcher.accepted) == sorted(hashlib.sha256(b).hexdigest()[:32] for b in bodies + after)
    assert streams["first"] == 1 and sorted(served[:6]) == sorted(len(b) for b in bodies)  # six in one stream
    legs = fetcher.legs[:6]  # in the stream's order: each waits in it for the one before, then its own bytes
    assert len({leg.started for leg in legs}) == 1
    assert all(a.received <= b.began < b.received <= b.accepted for a, b in zip(legs, legs[1:])), legs
    assert legs[0].began - legs[0].started < 1.0 and legs[-1].began - legs[-1].started >= legs[0].received - legs[0].started
    assert fetcher.rejected == [(hashlib.sha256(liar).hexdigest()[:32], "hash_mismatch")]  # its own pointer only
    assert streams["second"] == 2  # the lie ended its stream; the three after it came in the next, uncharged
    assert fetcher.counters.snapshot()["faults"] == {}


def test_a_mixed_answer_gives_each_pointer_its_own_outcome():
    found, held = os.urandom(4096), os.urandom(4096)

    async def run() -> tuple[list, _Fetcher, dict, list[str]]:
        server, client = await _pair()
        publisher = server.peer_id.to_base58()
        missing_p, busy_p, found_p = (_pointer(publisher, os.urandom(4096)), _pointer(publisher, held),
                                      _pointer(publisher, found))
        store = BodyStore(hold_bytes=1 << 20)
        store.put(found_p.group_id, found, until=time.time() + 600)
        store.hold(busy_p.group_id, held, until=time.time() + 600)
        counters = SwarmCounters()
        await serve_bodies(server, store, first_byte_timeout=STEP, min_rate=1 << 20, max_streams_per_peer=4,
                           policy=ALLOW_ALL, counters=counters,
                           upload=UploadCap(bytes_per_window=0, window=10.0, max_held_serves=0))  # held: busy
        fetcher = _Fetcher(client, max_bodies_per_stream=8, poll_interval=60.0)  # no second try in the test
        try:
            wanted = [(p.group_id, p.size) for p in (missing_p, busy_p, found_p)]
            async with contextlib.aclosing(fetch_bodies(client, publisher, wanted, timeout=10.0,
                                                        first_byte_timeout=STEP, min_rate=1 << 20)) as answers:
                raw = [(i, a if isinstance(a, bytes) else a.reason) async for i, a in answers]
            await fetcher.until(lambda: bool(fetcher.accepted), [missing_p, busy_p, found_p])
            await asyncio.sleep(0.5)
            pending = sorted(p.group_id for p in fetcher.scheduler.pending())
            return raw, fetcher, counters.drain_peer_faults(), pending, (missing_p, busy_p, found_p)
        finally:
            fetcher.scheduler.cancel()
            await client.shutdown()
            await server.shutdown()

    raw, fetcher, server_faults, pending, (missing_p, busy_p, found_p) = asyncio.run(run())
    assert raw == [(0, "body_missing"), (1, "body_busy"), (2, found)]  # answered in order, the stream went on
    assert fetcher.accepted == [found_p.group_id] and fetcher.rejected == []
    assert fetcher.counters.snapshot()["faults"] == {"body_missing": 1}  # busy is free; missing costs its pointer
    assert fetcher.counters.snapshot()["body_streams"] == 1
    assert pending == sorted([missing_p.group_id, busy_p.group_id])  # both tried again later
    assert server_faults == {}  # an honest requester is charged nothing


def test_a_request_over_the_bound_or_with_a_garbage_count_is_refused_and_charged():
    async def run() -> tuple[dict[str, bytes], dict, str]:
        server, client = await _pair()
        counters = SwarmCounters()
        await serve_bodies(server, BodyStore(), first_byte_timeout=STEP, min_rate=1 << 20, max_streams_per_peer=8,
                           policy=ALLOW_ALL, counters=counters)
        requests = {
            "over the bound": bytes([MAX_BODIES_PER_STREAM + 1]) + b"a" * 32 * (MAX_BODIES_PER_STREAM + 1),
            "a count of 0": b"\x00" + b"a" * 32,
            "garbage count": b"\xff" + os.urandom(64),
            "an id not ASCII": b"\x01" + b"\xff" * 32,
            "the bound": bytes([MAX_BODIES_PER_STREAM]) + b"a" * 32 * MAX_BODIES_PER_STREAM,
        }
        answers = {}
        try:
            target = PeerID.from_base58(server.peer_id.to_base58())
            for name, request in requests.items():
                _, reader, writer = await client.call_binary_stream_handler(target, BODY_PROTOCOL)
                writer.write(request)
                await writer.drain()
                answers[name] = await asyncio.wait_for(reader.read(), 10.0)  # until the server closes it
                writer.close()
            await asyncio.sleep(0.2)
            return answers, counters.drain_peer_faults(), client.peer_id.to_base58()
        finally:
            await client.shutdown()
            await server.shutdown()

    answers, charged, requester = asyncio.run(run())
    assert answers["the bound"] == MISSING * MAX_BODIES_PER_STREAM  # valid: each of the 32 answered
    assert {name: a for name, a in answers.items() if name != "the bound"} == {
        "over the bound": b"", "a count of 0": b"", "garbage count": b"", "an id not ASCII": b""}
    assert charged == {requester: Counter(bad_request=4)}


def test_a_stall_after_the_first_body_accepts_it_and_leaves_the_rest_pending_for_later():
    bodies = [os.urandom(8192) for _ in range(5)]
    asked: list[list[str]] = []
    stalled_at: list[float] = []

    async def run() -> _Fetcher:
        server, client = await _pair()
        publisher = server.peer_id.to_base58()
        pointers = [_pointer(publisher, body) for body in bodies]
        by_id = {p.group_id: body for p, body in zip(pointers, bodies)}

        async def first_then_silence(info, reader, writer) -> None:  # the first stream stalls after one body
            count = (await reader.readexactly(1))[0]
            raw = (await reader.readexactly(32 * count)).decode()
            ids = [raw[i:i + 32] for i in range(0, len(raw), 32)]
            asked.append(ids)
            for number, gid in enumerate(ids):
                if number == 1 and len(asked) == 1:
                    stalled_at.append(time.monotonic())
                    await asyncio.sleep(3600)
                writer.write(FOUND + len(by_id[gid]).to_bytes(8, "big") + by_id[gid])
                await writer.drain()
            writer.close()

        await server.add_binary_stream_handler(BODY_PROTOCOL, first_then_silence)
        fetcher = _Fetcher(client, max_bodies_per_stream=8, max_fetches_per_peer=1, first_byte_timeout=STEP,
                           poll_interval=0.05)
        try:
            await fetcher.until(lambda: len(fetcher.accepted) == len(pointers), pointers)
        finally:
            fetcher.scheduler.cancel()
            await client.shutdown()
            await server.shutdown()
        return fetcher

    fetcher = asyncio.run(run())
    assert len(asked[0]) == 5 and fetcher.accepted[0] == asked[0][0]
    assert fetcher.accepted_at[0] - stalled_at[0] < 0.8 * STEP  # handed on before the stall's clock ran out
    assert sorted(fetcher.accepted) == sorted(asked[0]) and fetcher.rejected == []  # none lost
    assert fetcher.counters.snapshot()["faults"] == {"body_stalled": 1}  # the stall, charged once
    assert sorted(asked[1]) == sorted(asked[0][1:])  # the second stream: the four left, none twice
    assert asked[1][-1] == asked[0][1]  # the stalled one tried last (one attempt), the three unanswered first
    assert fetcher.counters.snapshot()["body_streams"] == 2
