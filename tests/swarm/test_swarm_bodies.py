"""Body streams between real libp2p daemons: stalls end in seconds, and a server sheds greedy or slow requesters."""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter

import pytest
from hivemind.p2p import P2P, PeerID

from ftis_swarm.peers.policy import ALLOW_ALL
from ftis_swarm.swarm.counters import SwarmCounters
from ftis_swarm.swarm.fetch.bodies import BodyStore
from ftis_swarm.swarm.fetch.streams import BODY_PROTOCOL, BodyUnavailable, fetch_body, serve_bodies

pytestmark = [pytest.mark.net, pytest.mark.slow]

STEP = 0.5


async def _daemons(n: int) -> list[P2P]:
    first = await P2P.create(host_maddrs=["/ip4/127.0.0.1/tcp/0"])
    maddrs = [str(m) for m in await first.get_visible_maddrs()]
    return [first] + [await P2P.create(initial_peers=maddrs, host_maddrs=["/ip4/127.0.0.1/tcp/0"])
                      for _ in range(n - 1)]


def _bad_server(kind: str, size: int):
    async def serve(info, reader, writer) -> None:
        await reader.readexactly(32 * (await reader.readexactly(1))[0])
        if kind != "stall":
            writer.write(b"\x00" + size.to_bytes(8, "big"))
        while kind == "dribble":
            writer.write(b"x")
            await writer.drain()
            await asyncio.sleep(STEP * 2)
        await asyncio.sleep(3600)

    return serve


def test_stalled_and_dribbled_bodies_fail_within_their_budget():
    async def run() -> dict:
        client, *servers = await _daemons(3)
        outcomes = {}
        try:
            for kind, server in zip(("stall", "dribble"), servers):
                await server.add_binary_stream_handler(BODY_PROTOCOL, _bad_server(kind, 4096))
                started = time.monotonic()
                with pytest.raises(BodyUnavailable) as caught:
                    await fetch_body(client, server.peer_id.to_base58(), "0" * 32, size=4096, timeout=60.0,
                                     first_byte_timeout=STEP, min_rate=1 << 20)
                outcomes[kind] = (caught.value.reason, time.monotonic() - started)
        finally:
            for daemon in (client, *servers):
                await daemon.shutdown()
        return outcomes

    outcomes = asyncio.run(run())
    assert {kind: reason for kind, (reason, _) in outcomes.items()} == {"stall": "body_stalled", "dribble": "body_stalled"}
    assert all(seconds < 30.0 for _, seconds in outcomes.values()), outcomes  # not the 60 s timeout: the step


def test_server_answers_busy_past_its_stream_cap_and_drops_slow_readers():
    async def run() -> tuple[list[bytes], bytes, dict]:
        server, greedy, slow = await _daemons(3)
        counters, store = SwarmCounters(), BodyStore()
        store.put("a" * 32, os.urandom(64 << 20), until=time.time() + 600)
        await serve_bodies(server, store, first_byte_timeout=STEP, min_rate=32 << 20, max_streams_per_peer=2,
                           policy=ALLOW_ALL, counters=counters)
        try:
            target = PeerID.from_base58(server.peer_id.to_base58())
            streams = [await greedy.call_binary_stream_handler(target, BODY_PROTOCOL) for _ in range(3)]
            first_bytes = [await asyncio.wait_for(reader.read(1), 10.0) for _, reader, _ in streams]
            _, reader, writer = await slow.call_binary_stream_handler(target, BODY_PROTOCOL)
            writer.write(b"\x01" + b"a" * 32)
            await writer.drain()
            header = await asyncio.wait_for(reader.readexactly(9), 10.0)
            await asyncio.sleep(STEP + 2.0 + 3.0)  # the body's budget is STEP + 64 MiB / (32 MiB/s): never read it
            return first_bytes, header, counters.drain_peer_faults()
        finally:
            for daemon in (server, greedy, slow):
                await daemon.shutdown()

    first_bytes, header, faults = asyncio.run(run())
    assert first_bytes.count(b"\x02") == 1  # the third stream of one requester: busy
    assert first_bytes.count(b"") == 2  # the two it allowed waited for an id, then were closed
    assert header == b"\x00" + (64 << 20).to_bytes(8, "big")
    assert sorted(faults.values(), key=len) == [Counter(slow_reader=1), Counter(too_many_streams=1, slow_request=2)]
