"""Holders: a node keeps the bodies it accepted and serves them to others, within its own upload cap."""

from __future__ import annotations

import asyncio
import builtins
import hashlib
import os
import time
from collections import Counter
from typing import Optional

import pytest
from hivemind.p2p import P2P
from record_peers import RUN, TTL, Scores, W

from ftis_swarm.config import SwarmConfig
from ftis_swarm.peers import faults
from ftis_swarm.peers.policy import ALLOW_ALL
from ftis_swarm.swarm.counters import SwarmCounters
from ftis_swarm.swarm.fetch import holders
from ftis_swarm.swarm.fetch.bodies import BodyStore, UploadCap
from ftis_swarm.swarm.fetch.holders import HolderBook
from ftis_swarm.swarm.fetch.scheduler import FetchScheduler
from ftis_swarm.swarm.fetch.streams import BodyUnavailable, fetch_body, serve_bodies
from ftis_swarm.swarm.gossip.gate import MAX_MESSAGE_BYTES, GossipGate, encode_message
from ftis_swarm.swarm.keys import pointer_key
from ftis_swarm.swarm.records import (
    HAVE_SUBKEY_NAME,
    MAX_HELD_ANNOUNCED,
    RECORD_VERSION,
    GroupPointer,
    HaveRecord,
    make_subkey,
)

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
    for short in ("s" * 32, "t" * 32):  # each expires on time, after an eviction scan too; the rest is kept
        store.put(short, b"short", until=time.time() + 0.3)
        assert store.lookup(short) == (b"short", False)
        time.sleep(0.4)
        assert store.lookup(short) is None and store.lookup("o" * 32) == (b"own" * 1000, False)
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
    with pytest.raises(ValueError, match="holders.hold_bytes=1000 must be 0 or at least wire.max_bytes"):
        SwarmConfig(holders={"hold_bytes": 1000})
    assert SwarmConfig(holders={"hold_bytes": 0}).holders.hold_bytes == 0


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


class _Writer:
    def __init__(self, reader: asyncio.StreamReader, body: bytes):
        self._reader, self._body = reader, body

    def write(self, data: bytes) -> None:  # one request of `ftis.body.v2`: the body for each id
        assert len(data) == 1 + 32 * data[0]
        self._reader.feed_data((b"\x00" + len(self._body).to_bytes(8, "big") + self._body) * data[0])

    async def drain(self) -> None:
        return None

    def close(self) -> None:
        return None


class _Sources:
    """The stream layer of `hivemind.P2P` (what a daemon hands back): each peer answers as `answers` says."""

    def __init__(self, answers: dict[str, Optional[bytes]]):
        self.answers, self.asked = answers, Counter()

    async def call_binary_stream_handler(self, peer_id, name: str):
        peer = peer_id.to_base58()
        self.asked[peer] += 1
        body = self.answers[peer]
        if body is None:  # a publisher that went away
            raise OSError(f"failed to dial {peer}: connection refused")
        reader = asyncio.StreamReader()
        return None, reader, _Writer(reader, body)


def _peer(letter: str) -> str:
    return "Qm" + letter * 44


def test_a_holders_wrong_bytes_cost_the_holder_and_the_body_comes_from_another_source():
    body = os.urandom(2048)
    publisher, liar, honest = _peer("p"), _peer("a"), _peer("b")  # the liar sorts first among equal holders
    digest = hashlib.sha256(body).hexdigest()
    wanted = GroupPointer(v=RECORD_VERSION, group_id=digest[:32], size=len(body), sha256=digest, publisher=publisher,
                          created_at=time.time(), run_id="run", tokenizer_fp="tok", window=1, round=0,
                          round_groups=1, puzzle="0" * 16)
    sources = _Sources({publisher: None, liar: os.urandom(len(body)), honest: body})
    counters, accepted, rejected = SwarmCounters(), [], []
    scheduler = FetchScheduler(p2p=sources, cfg=SwarmConfig(poll_interval=0.05), policy=ALLOW_ALL,
                               counters=counters, room=lambda p: 100,
                               on_body=lambda p, got: accepted.append(got) or True,
                               on_reject=lambda p, reason, detail: rejected.append(reason))

    async def run() -> None:
        scheduler.note_holders(liar, [wanted.group_id], until=time.time() + 600)
        scheduler.note_holders(honest, [wanted.group_id], until=time.time() + 600)
        scheduler.add(wanted)
        stop_at = time.monotonic() + 30.0
        while not accepted and time.monotonic() < stop_at:
            scheduler.schedule()
            await asyncio.sleep(0.02)
        scheduler.cancel()

    asyncio.run(run())
    assert accepted == [body] and rejected == []
    charged = counters.drain_peer_faults()
    assert charged[liar] == Counter({faults.HASH_MISMATCH: 1})  # the holder's bytes, the holder's fault
    assert set(charged[publisher]) == {faults.BODY_UNREACHABLE}  # gone: back-off only, priced 0
    assert honest not in charged
    assert faults.cost_of(faults.SWARM_PREFIX + faults.HASH_MISMATCH) > 0
    assert faults.cost_of(faults.SWARM_PREFIX + faults.BODY_UNREACHABLE) == 0
    assert sources.asked[liar] == 1 and sources.asked[honest] == 1
    assert counters.snapshot()["fetched_from_holders"] == 1


def _first_fetched(seed: str, pointers: list[GroupPointer], answers: dict[str, Optional[bytes]]) -> list[str]:
    """The group ids a scheduler seeded `seed` fetches, in order, one fetch at a time."""
    accepted: list[str] = []
    scheduler = FetchScheduler(p2p=_Sources(answers), cfg=SwarmConfig(max_fetches_per_peer=1), policy=ALLOW_ALL,
                               counters=SwarmCounters(), room=lambda p: 100, seed=seed,
                               on_body=lambda p, got: accepted.append(p.group_id) or True,
                               on_reject=lambda p, reason, detail: None)

    async def run() -> None:
        for pointer in pointers:
            scheduler.add(pointer)
        stop_at = time.monotonic() + 30.0
        while len(accepted) < len(pointers) and time.monotonic() < stop_at:
            scheduler.schedule()
            await asyncio.sleep(0.01)

    asyncio.run(run())
    return accepted


def test_fetchers_of_one_round_start_on_different_groups_so_its_first_serves_leave_many_held():
    publisher, body = _peer("p"), os.urandom(512)
    digest = hashlib.sha256(body).hexdigest()
    older = GroupPointer(v=RECORD_VERSION, group_id="0" * 32, size=len(body), sha256=digest, publisher=publisher,
                         created_at=time.time() - 5, run_id="run", tokenizer_fp="tok", window=1, round=0,
                         round_groups=1, puzzle="0" * 16)
    # the same body under 16 ids: `_Sources` answers by peer, the scheduler checks no hash from its publisher
    round1 = [older.model_copy(update={"group_id": f"{i:032x}", "created_at": time.time() + i * 1e-3, "round": 1,
                                 "round_groups": 16}) for i in range(1, 17)]
    orders = [_first_fetched(seed, [older, *round1], {publisher: body}) for seed in ("node-a", "node-b", "node-c")]
    assert all(sorted(order) == sorted(p.group_id for p in [older, *round1]) for order in orders)
    assert all(order[-1] == older.group_id for order in orders)  # the newest round first, whatever the seed
    firsts = {tuple(order[:4]) for order in orders}
    assert len(firsts) == 3  # three fetchers, three different starts (the old order: 16, 15, 14, 13 for all)
    assert len({gid for order in orders for gid in order[:4]}) > 4  # the first serves cover more than 4 groups


def _have(peer, groups: list[bytes], **changes: object):
    value = {"v": RECORD_VERSION, "holder": peer.peer_id, "run_id": RUN, "window": W, "created_at": time.time(),
             "puzzle": peer.puzzle, "groups": groups, **changes}
    return peer.sign(pointer_key(RUN, peer.peer_id, W), make_subkey(peer.public_key, HAVE_SUBKEY_NAME), value)


def test_a_gossiped_have_is_checked_like_any_record_and_bounded(alice, bob):
    gate = GossipGate(checker=bob.checker, policy=Scores(), rate=100.0, burst=1000, ttl=TTL)
    now, ids = time.time(), [os.urandom(16) for _ in range(MAX_HELD_ANNOUNCED)]
    message = encode_message(_have(alice, ids))
    assert len(message) < MAX_MESSAGE_BYTES
    admitted = gate.admit(alice.peer_id, message, now)
    assert admitted.reason == "" and isinstance(admitted.record.content, HaveRecord)
    assert admitted.record.content.group_ids() == [g.hex() for g in ids]
    refusals = {
        "too many groups": _have(alice, ids + [os.urandom(16)]),
        "a short id": _have(alice, [os.urandom(15)]),
        "a group twice": _have(alice, [ids[0], ids[0]]),
        "an extra field": _have(alice, ids[:1], extra=1),
    }
    assert {name: gate.admit(alice.peer_id, encode_message(r), now).reason for name, r in refusals.items()} == {
        name: "gossip_bad_schema" for name in refusals}
    assert gate.admit(alice.peer_id, encode_message(_have(alice, ids[:1], holder=bob.peer_id)), now).reason == \
        "gossip_owner_mismatch"  # a have says who holds: only that peer may sign it
    assert faults.cost_of(faults.SWARM_PREFIX + "gossip_bad_schema") > 0


def _gid(i: int) -> str:
    return f"{i:032x}"


def _book() -> HolderBook:
    return HolderBook(SwarmConfig(), SwarmCounters())


def test_past_its_bound_the_book_keeps_the_groups_whose_announcements_end_last(monkeypatch):
    monkeypatch.setattr(holders, "MAX_HELD_GROUPS", 3)
    book, a, b = _book(), _peer("a"), _peer("b")
    book.note(a, [_gid(1), _gid(2)], until=100.0)
    book.note(b, [_gid(2)], until=40.0)  # a later announcement of a group: its end is its latest holder's
    book.note(b, [_gid(3)], until=50.0)
    book.note(a, [_gid(4)], until=60.0)  # 4 groups > 3: 3 ends first (50 < 60 < 100)
    assert [book.has(_gid(i)) for i in range(1, 5)] == [True, True, False, True]
    assert len(book) == 3 and book.named_by(b) == 1  # b still holds 2
    book.note(b, [_gid(5)], until=10.0)  # the newcomer ends first: it goes at once
    assert not book.has(_gid(5)) and len(book) == 3
    book.note(a, [_gid(4)], until=5.0)  # an earlier end said later does not shorten the announcement
    assert book.serves(a, _gid(4), now=55.0)


def test_a_holder_past_its_cap_loses_its_own_announcements_that_end_first(monkeypatch):
    monkeypatch.setattr(holders, "MAX_GROUPS_PER_HOLDER", 3)
    counters = SwarmCounters()
    book, flooder, honest = HolderBook(SwarmConfig(), counters), _peer("f"), _peer("h")
    book.note(honest, [_gid(0)], until=1.0)  # ends before any of the flooder's
    for i in range(1, 6):
        book.note(flooder, [_gid(i)], until=10.0 + i)
    book.note(flooder, [_gid(5), _gid(4)], until=30.0)  # named again: no new group, nothing over the cap
    assert [book.has(_gid(i)) for i in range(6)] == [True, False, False, True, True, True]
    assert book.named_by(flooder) == 3 and book.named_by(honest) == 1
    assert book.over_cap == 2 and counters.drain_peer_faults() == {}  # charged to no one: honest holders churn too
    assert book.least_loaded(_gid(5), now=20.0) == flooder


def _suspended_only(book: HolderBook, holder: str, group_id: str) -> bool:
    return not book.serves(holder, group_id, now=0.5) and book.serves(holder, group_id, now=10.0)


def test_a_group_whose_holders_all_failed_is_forgotten_and_never_breaks_the_book(monkeypatch):
    monkeypatch.setattr(holders, "MAX_HELD_GROUPS", 2)
    counters = SwarmCounters()
    book, a, b = HolderBook(SwarmConfig(max_fetch_attempts=2), counters), _peer("a"), _peer("b")
    book.note(a, [_gid(1), _gid(2)], until=600.0)
    book.failed(a, _gid(1), BodyUnavailable(faults.BODY_MISSING, "not here"), now=0.0)
    assert not book.has(_gid(1)) and len(book) == 1  # its only holder said missing: the group is gone
    assert _suspended_only(book, a, _gid(2))  # still a source of what it did not deny, after its suspension
    book.note(b, [_gid(3), _gid(4), _gid(5)], until=700.0)  # past the bound (the old book: max() of an empty map)
    assert [book.has(_gid(i)) for i in range(1, 6)] == [False, False, False, True, True]
    assert book.least_loaded(_gid(1), now=1.0) is None and book.named_by(a) == 0
    book.failed(b, _gid(4), BodyUnavailable(faults.BODY_UNREACHABLE, "gone"), now=0.0)
    book.failed(b, _gid(4), BodyUnavailable(faults.BODY_UNREACHABLE, "gone"), now=0.0)  # 2 in a row: forgotten
    assert len(book) == 0 and book.named_by(b) == 0
    book.note(a, [_gid(6)], until=5.0)
    book.in_flight[b] += 1
    book.forget(now=6.0)  # a's announcement ended; b has a fetch in flight, so its record of failures stays
    assert len(book) == 0 and book.least_loaded(_gid(6), now=6.0) is None
    book.note(b, [_gid(7)], until=700.0)
    assert not book.serves(b, _gid(7), now=0.5)  # still suspended: 2 failures kept
    assert counters.snapshot()["holder_fetch_failures"] == 3


def test_a_flood_of_200k_ids_keeps_the_book_at_its_bound_with_no_scan_of_it(monkeypatch):
    scanned = Counter()

    def counting(name):
        builtin = getattr(builtins, name)

        def call(*args, **kwargs):
            items = list(args[0]) if len(args) == 1 else list(args)
            scanned[name] += len(items)
            return builtin(items, **kwargs)
        return call

    monkeypatch.setattr(holders, "max", counting("max"), raising=False)
    monkeypatch.setattr(holders, "min", counting("min"), raising=False)
    book, flooders, n = _book(), [_peer(c) for c in "abcdefghijklmnopqrst"], 200_000
    per = n // len(flooders)
    for f, flooder in enumerate(flooders):  # one flooder after another, each in haves of 64 ids, ends increasing
        for start in range(0, per, MAX_HELD_ANNOUNCED):
            first = f * per + start
            ids = [_gid(i) for i in range(first, min(first + MAX_HELD_ANNOUNCED, (f + 1) * per))]
            book.note(flooder, ids, until=1000.0 + first)
    assert len(book) == holders.MAX_HELD_GROUPS
    cap = holders.MAX_GROUPS_PER_HOLDER
    last = holders.MAX_HELD_GROUPS // cap  # the flooders whose newest groups end last: their newest `cap` each
    assert all(book.named_by(f) == (cap if i >= len(flooders) - last else 0) for i, f in enumerate(flooders))
    kept = {_gid(f * per + per - 1 - j) for f in range(len(flooders) - last, len(flooders)) for j in range(cap)}
    assert all(book.has(g) for g in kept)
    assert book.over_cap == n - len(flooders) * cap
    assert book._group_ends.heap_size() <= 2 * holders.MAX_HELD_GROUPS + holders._STALE_SLACK
    assert scanned["max"] + scanned["min"] <= 4 * n  # a few ends per id (the old book: all 4,096 groups' per id)
    book.forget(now=1000.0 + n)  # all ended
    assert len(book) == 0 and all(book.named_by(f) == 0 for f in flooders)
