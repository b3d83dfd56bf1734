"""Holders: a node keeps the bodies it accepted and serves them to others, within its own upload cap."""

from __future__ import annotations

import asyncio
import os
import time

import pytest
from hivemind.p2p import P2P

from ftis_swarm.config import SwarmConfig
from ftis_swarm.peers.policy import ALLOW_ALL
from ftis_swarm.swarm.counters import SwarmCounters
from ftis_swarm.swarm.fetch.bodies import BodyStore, BodyUnavailable, UploadCap, fetch_body, serve_bodies

STEP = 2.0


def test_a_store_holds_others_bodies_within_its_bytes_dropping_the_oldest_first():
    store = BodyStore(hold_bytes=10_000)
    later = time.time() + 600
    store.put("o" * 32, b"own" * 1000, until=later)
    assert store.hold("a" * 32, b"a" * 4000, until=later) and store.hold("b" * 32, b"b" * 4000, until=later)
    assert store.hold("c" * 32, b"c" * 4000, until=later)  # 12,000 > 10,000: the oldest held one goes
    assert store.lookup("a" * 32) is None
    assert store.lookup("b" * 32) == (b"b" * 4000, True) and store.lookup("o" * 32) == (b"own" * 1000, False)
    assert store.held(8) == ["c" * 32, "b" * 32]
    assert not store.hold("d" * 32, b"d" * 10_001, until=later)  # larger than the whole room
    store.hold("e" * 32, b"e", until=time.time() - 1)
    assert store.lookup("e" * 32) is None  # expired: never served
    assert not BodyStore().hold("f" * 32, b"f", until=later)  # holding off by default


def test_the_upload_cap_serves_own_bodies_first_and_held_ones_within_half_of_it():
    cap = UploadCap(bytes_per_window=10_000, window=10.0, max_held_serves=1)
    assert cap.admit(4000, held=True, now=0.0)  # 4,000 <= 5,000: held bodies may fill half
    assert not cap.admit(100, held=True, now=0.0)  # one held serve at once
    cap.release(True)
    assert not cap.admit(2000, held=True, now=0.0)  # 6,000 > 5,000
    assert cap.admit(5000, held=False, now=0.0) and cap.admit(3000, held=False, now=0.0)  # own: while below the cap
    assert not cap.admit(1, held=False, now=0.0)  # 12,000 >= 10,000: busy until the window ends
    assert cap.admit(4000, held=True, now=10.0)  # a new window


def test_config_refuses_a_hold_smaller_than_one_body():
    with pytest.raises(ValueError, match="hold_bytes=1000 must be 0 or at least wire.max_bytes"):
        SwarmConfig(hold_bytes=1000)
    assert SwarmConfig(hold_bytes=0).hold_bytes == 0


@pytest.mark.net
@pytest.mark.slow
def test_a_holder_serves_a_held_body_and_answers_busy_past_its_cap():
    own, held = os.urandom(6000), os.urandom(6000)

    async def run() -> tuple[bytes, str, bytes, list[tuple[int, bool]]]:
        holder = await P2P.create(host_maddrs=["/ip4/127.0.0.1/tcp/0"])
        maddrs = [str(m) for m in await holder.get_visible_maddrs()]
        fetcher = await P2P.create(initial_peers=maddrs, host_maddrs=["/ip4/127.0.0.1/tcp/0"])
        store, served = BodyStore(hold_bytes=1 << 20), []
        store.put("o" * 32, own, until=time.time() + 600)
        assert store.hold("h" * 32, held, until=time.time() + 600)
        await serve_bodies(holder, store, first_byte_timeout=STEP, min_rate=1 << 20, max_streams_per_peer=4,
                           policy=ALLOW_ALL, counters=SwarmCounters(),
                           upload=UploadCap(bytes_per_window=14_000, window=600.0, max_held_serves=2),
                           on_served=lambda n, is_held: served.append((n, is_held)))
        target = holder.peer_id.to_base58()

        async def get(gid: str, body: bytes) -> bytes:
            return await fetch_body(fetcher, target, gid, size=len(body), timeout=30.0, first_byte_timeout=STEP,
                                    min_rate=1 << 20)

        try:
            first = await get("h" * 32, held)  # 6,000 <= 7,000: within the held half
            with pytest.raises(BodyUnavailable) as busy:
                await get("h" * 32, held)  # 12,000 > 7,000: own bodies keep the rest
            second = await get("o" * 32, own)
            return first, busy.value.reason, second, served
        finally:
            await fetcher.shutdown()
            await holder.shutdown()

    first, reason, second, served = asyncio.run(run())
    assert first == held and second == own
    assert reason == "body_busy"
    assert served == [(6000, True), (6000, False)]
