"""The fetch scheduler's slots, stalls and unexpected errors, against stand-in body servers (no daemon).

The stand-in is only the stream layer of `hivemind.P2P` (what a real daemon would hand
back): real `asyncio.StreamReader`s that a publisher feeds a body, nothing, or an error.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections import Counter, defaultdict
from typing import Callable, Optional

import pytest
from pydantic import ValidationError
from record_peers import Scores

from ftis_swarm.config import FetchConfig, SwarmConfig
from ftis_swarm.peers.policy import ALLOW_ALL
from ftis_swarm.swarm.counters import SwarmCounters
from ftis_swarm.swarm.fetch.pointers import key_of
from ftis_swarm.swarm.fetch.scheduler import FetchScheduler
from ftis_swarm.swarm.origins import RELAYED
from ftis_swarm.swarm.records import RECORD_VERSION, GroupPointer

BODY = b"b" * 64


def peer(i: int) -> str:
    return "Qm" + "abcdefghij"[i % 10] * 40 + f"{i:04d}".replace("0", "z")


class Writer:
    """The request side of a stream: hands the request's ids to the server, tells it when it is closed."""

    def __init__(self, on_close, on_request=lambda ids: None):
        self._on_close, self._on_request = on_close, on_request

    def write(self, data: bytes) -> None:
        assert 1 <= data[0] <= 32 and len(data) == 1 + 32 * data[0]  # one request of `ftis.body.v2`
        self._on_request([data[i:i + 32].decode() for i in range(1, len(data), 32)])

    async def drain(self) -> None:
        return None

    def close(self) -> None:
        self._on_close()


class StandInP2P:
    """Answers each stream as its publisher's behaviour says: "good", "hang", "error", "undialable",
    "backing off" or "gone"."""

    def __init__(self, behaviour: dict[str, str]):
        self.behaviour = behaviour
        self.open: Counter[str] = Counter()
        self.most_open: Counter[str] = Counter()
        self.opened: Counter[str] = Counter()
        self.refused: Counter[str] = Counter()
        self.dials: dict[str, float] = {}
        self.asked: dict[str, list[int]] = defaultdict(list)
        """Ids in each request, per publisher."""

    async def call_binary_stream_handler(self, peer_id, name: str):
        publisher = peer_id.to_base58()
        reader = asyncio.StreamReader()
        kind = self.behaviour[publisher]
        if kind == "undialable":  # what p2pd says of a peer behind NAT with no relay slot
            raise OSError(f"failed to dial {publisher}: no addresses")
        if kind == "gone":  # one failed dial, then p2pd's backoff for good (p2pd grows it while dials fail)
            self.refused[publisher] += 1
            raise OSError(f"failed to dial {publisher}: all dials failed * [/ip4/11.0.0.2/tcp/1/p2p-circuit] " +
                          ("i/o timeout" if self.refused[publisher] == 1 else "dial backoff"))
        if kind == "backing off":  # one failed circuit dial, then p2pd's backoff for a second, then a stream
            self.dials[publisher] = self.dials.get(publisher) or time.monotonic()
            if self.opened[publisher] == 0 and self.refused[publisher] == 0:
                self.refused[publisher] += 1
                raise OSError(f"failed to dial {publisher}: all dials failed * [/ip4/11.0.0.2/tcp/1/p2p-circuit] "
                              "i/o timeout")
            if time.monotonic() - self.dials[publisher] < 1.0:
                self.refused[publisher] += 1
                raise OSError(f"failed to dial {publisher}: all dials failed * [/ip4/11.0.0.2/tcp/1/p2p-circuit] "
                              "dial backoff")
            kind = "good"
        if kind == "error":
            reader.set_exception(RuntimeError("a bug in the stream layer"))
        self.opened[publisher] += 1
        self.open[publisher] += 1
        self.most_open[publisher] = max(self.most_open[publisher], self.open[publisher])

        def closed() -> None:
            self.open[publisher] -= 1

        def answer(ids: list[str]) -> None:
            self.asked[publisher].append(len(ids))
            if kind == "good":
                reader.feed_data((b"\x00" + len(BODY).to_bytes(8, "big") + BODY) * len(ids))

        return None, reader, Writer(closed, answer)


def pointer(publisher: str) -> GroupPointer:
    gid = secrets.token_hex(16)
    return GroupPointer(v=RECORD_VERSION, group_id=gid, size=len(BODY), sha256=gid + "0" * 32, publisher=publisher,
                        created_at=time.time(), run_id="run", tokenizer_fp="tok", window=1, round=0, round_groups=1,
                        puzzle="0" * 16)


class Harness:
    def __init__(self, behaviour: dict[str, str], *, policy=ALLOW_ALL, origins: Optional[dict[str, str]] = None,
                 room: int = 1000, **cfg: object):
        self.p2p = StandInP2P(behaviour)
        self.accepted: list[str] = []
        self.rejected: Counter[tuple[str, str]] = Counter()
        self.counters = SwarmCounters()
        self.scheduler = FetchScheduler(
            p2p=self.p2p, cfg=SwarmConfig(poll_interval=0.05, **cfg), policy=policy, counters=self.counters,
            room=lambda publisher: room - self.accepted.count(publisher), on_body=self._body, on_reject=self._reject,
            origin_of=(origins or {}).get)

    def _body(self, p: GroupPointer, body: bytes) -> bool:
        self.scheduler.table.accept(self.scheduler.table.get(key_of(p)))
        self.accepted.append(p.publisher)
        return True

    def _reject(self, p: GroupPointer, reason: str, detail: str) -> None:
        self.scheduler.table.reject(p, reason, revivable=False)
        self.rejected[(p.publisher, reason)] += 1

    async def until(self, done: Callable[[], bool], *, add: Optional[list[GroupPointer]] = None,
                    then: float = 0.2) -> None:
        """Schedules (as polls would) until `done()`, 60 s at most, then `then` seconds more."""
        for p in add or []:
            self.scheduler.add(p)
        stop_at = time.monotonic() + 60.0
        while not done() and time.monotonic() < stop_at:
            self.scheduler.schedule()
            await asyncio.sleep(0.02)
        stop_at = time.monotonic() + then
        while time.monotonic() < stop_at:
            self.scheduler.schedule()
            await asyncio.sleep(0.02)


def test_slots_per_publisher_and_for_strangers_leave_room_for_proven_peers():
    strangers = [peer(i) for i in range(10)]
    proven = peer(99)
    harness = Harness({**{s: "hang" for s in strangers}, proven: "good"}, first_byte_timeout=30.0)

    def strangers_open() -> int:
        return sum(harness.p2p.open[s] for s in strangers)

    async def run() -> None:
        await harness.until(lambda: len(harness.accepted) == 1, add=[pointer(proven)])  # one body: proven
        await harness.until(lambda: strangers_open() == 4, add=[pointer(s) for s in strangers for _ in range(5)])
        assert strangers_open() == 4  # strangers: half of the 8 slots, and no more
        await harness.until(lambda: len(harness.accepted) == 7, add=[pointer(proven) for _ in range(6)])
        harness.scheduler.cancel()

    asyncio.run(run())
    assert len(harness.accepted) == 7  # the proven publisher's bodies came past the hanging strangers
    assert max(harness.p2p.most_open[s] for s in strangers) <= 2  # max_fetches_per_peer, below the slots
    assert harness.p2p.most_open[proven] <= 2


@pytest.mark.parametrize("per_stream, room, requests", [(8, 1000, [8, 8, 4]), (1, 1000, [1] * 20), (8, 6, [6])])
def test_a_stream_carries_up_to_max_bodies_per_stream_of_one_publisher_within_its_room(per_stream, room, requests):
    good = peer(8)
    harness = Harness({good: "good"}, room=room, max_bodies_per_stream=per_stream)

    async def run() -> None:
        await harness.until(lambda: len(harness.accepted) == min(room, 20), add=[pointer(good) for _ in range(20)])
        harness.scheduler.cancel()

    asyncio.run(run())
    assert harness.p2p.asked[good] == requests  # two streams at once (max_fetches_per_peer), each a batch
    assert harness.counters.snapshot()["body_streams"] == len(requests)
    assert len(harness.accepted) == min(room, 20)


def test_publishers_of_one_origin_share_its_fetch_slots():
    crowd = [peer(i) for i in range(10)]  # one machine's identities, all scored (no stranger limit)
    others = [peer(20), peer(21)]
    scores = Scores()
    scores.scores.update({p: 1.0 for p in crowd + others})
    origins = {**{p: "10.0.0.0/24" for p in crowd}, others[0]: "10.0.1.0/24", others[1]: RELAYED}
    harness = Harness({**{p: "hang" for p in crowd}, **{p: "good" for p in others}}, policy=scores,
                      origins=origins, first_byte_timeout=30.0)

    def crowd_open() -> int:
        return sum(harness.p2p.open[p] for p in crowd)

    async def run() -> None:
        await harness.until(lambda: crowd_open() == 4, add=[pointer(p) for p in crowd for _ in range(3)])
        assert crowd_open() == 4  # max_fetches_per_origin, of the 8 slots
        await harness.until(lambda: len(harness.accepted) == 6, add=[pointer(p) for p in others for _ in range(3)])
        assert crowd_open() == 4
        harness.scheduler.cancel()

    asyncio.run(run())
    assert sorted(harness.accepted) == sorted(others * 3)  # other origins, and the relayed one, came past it


def test_a_stalling_publisher_loses_its_slots_and_then_its_pointers():
    staller, good = peer(1), peer(2)
    harness = Harness({staller: "hang", good: "good"}, first_byte_timeout=0.1)

    async def run() -> None:
        await harness.until(lambda: sum(harness.rejected.values()) == 20 and len(harness.accepted) == 5,
                            add=[pointer(staller) for _ in range(20)] + [pointer(good) for _ in range(5)], then=0.5)
        harness.scheduler.cancel()

    asyncio.run(run())
    assert harness.rejected == {(staller, "stalled"): 20}  # all of them, after 3 failed fetches in a row
    assert harness.p2p.opened[staller] == 3  # two at first, then one at a time: never more
    assert sorted(harness.accepted) == [good] * 5


def test_an_undialable_publisher_is_said_unreachable_once_and_loses_its_pointers(caplog):
    home, good = peer(4), peer(5)
    harness = Harness({home: "undialable", good: "good"}, max_fetch_attempts=2)

    async def run() -> None:
        await harness.until(lambda: sum(harness.rejected.values()) == 3 and len(harness.accepted) == 2,
                            add=[pointer(home) for _ in range(3)] + [pointer(good) for _ in range(2)], then=0.3)
        harness.scheduler.cancel()

    with caplog.at_level("WARNING", logger="ftis_swarm.swarm.fetch.scheduler"):
        asyncio.run(run())
    assert harness.rejected == {(home, "fetch_failed"): 3}
    assert harness.counters.snapshot()["publishers_unreachable"] == 1  # once per series, not per pointer
    assert [r.getMessage() for r in caplog.records if "cannot fetch the groups of" in r.getMessage()][0].count(home)
    assert sorted(harness.accepted) == [good] * 2


def test_a_dial_backoff_after_one_failed_dial_is_waited_out_not_counted_as_another_failure():
    home = peer(6)
    harness = Harness({home: "backing off"}, max_fetch_attempts=2)

    async def run() -> None:
        await harness.until(lambda: len(harness.accepted) == 2 or bool(harness.rejected),
                            add=[pointer(home) for _ in range(2)])
        harness.scheduler.cancel()

    started = time.monotonic()
    asyncio.run(run())
    assert harness.rejected == {} and harness.accepted == [home, home]
    assert harness.p2p.refused[home] == 2  # the failed dial, and the fetch beside it that p2pd refused
    assert harness.counters.snapshot()["faults"] == {"body_unreachable": 1}  # the refusal is not a second failure
    assert time.monotonic() - started >= 5.0  # it waited p2pd's backoff out


def test_a_publisher_p2pd_keeps_backing_off_from_is_still_dropped_and_said_unreachable():
    gone = peer(7)
    harness = Harness({gone: "gone"}, max_fetch_attempts=2)

    async def run() -> None:
        await harness.until(lambda: bool(harness.rejected), add=[pointer(gone) for _ in range(2)])
        harness.scheduler.cancel()

    started = time.monotonic()
    asyncio.run(run())
    assert harness.rejected == {(gone, "fetch_failed"): 2} and harness.accepted == []
    assert harness.counters.snapshot()["publishers_unreachable"] == 1
    assert harness.counters.snapshot()["faults"] == {"body_unreachable": 2}  # the dial, then a backoff long after
    assert time.monotonic() - started >= 10.0  # the backoffs soon after the failed dial were waited out


def test_an_unexpected_error_rejects_the_pointer_once_instead_of_fetching_it_again():
    buggy = peer(3)
    harness = Harness({buggy: "error"})

    async def run() -> None:
        await harness.until(lambda: bool(harness.rejected), add=[pointer(buggy)], then=0.5)
        harness.scheduler.cancel()

    asyncio.run(run())
    assert harness.rejected == {(buggy, "fetch_error"): 1}
    assert harness.p2p.opened[buggy] == 1


def test_a_publisher_may_never_hold_every_slot():
    with pytest.raises(ValidationError, match="max_fetches_per_peer=8 must be below max_concurrent_fetches=8"):
        FetchConfig(max_fetches_per_peer=8, max_concurrent_fetches=8)
    assert FetchConfig(max_fetches_per_peer=7, max_concurrent_fetches=8).max_fetches_per_peer == 7
