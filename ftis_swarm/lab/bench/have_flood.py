"""`ftis-node bench hostile --phase have-flood`: one gather's loop work under a flood of haves, against none.

In one process, with no network: a real `Gatherer` (the swarm's, on a reader that finds no
record) takes what one gather of `deadline` s brings to its event loop. Without the flood:
`honest` holders' haves of `MAX_HELD_ANNOUNCED` groups each (`on_gossip`, the path an admitted
have takes) and a poll every `poll_interval` (`poll_once`, whose forgetting scans the holders).
With it: the same, and `ids` random group ids in haves of `MAX_HELD_ANNOUNCED` from `holders`
identities, each in turn, between them. Each have ends `ttl` after it arrives, as the gate
sees it. The records are built beforehand (the gate's parse and signature check are not
measured: they cost per message, the flood's cost per id is the book's).

The figures: the CPU seconds of the loop's thread for that work (the least of `repeats`
runs), against the run without the flood and against the deadline, and per flood id; and,
from a `HolderBook` fed the same announcements, what the book keeps: its groups (at most
`MAX_HELD_GROUPS`), the most one holder names (at most `MAX_GROUPS_PER_HOLDER`), the
announcements dropped past that cap, and how many of the honest holders' groups it still
knows (each honest have came while the flood went on).
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import random
import time
from typing import Collection

from hivemind.utils.timed_storage import get_dht_time

from ftis_swarm.config import SwarmConfig
from ftis_swarm.peers.policy import ALLOW_ALL
from ftis_swarm.swarm.counters import SwarmCounters
from ftis_swarm.swarm.dht.reading import FoundRecord
from ftis_swarm.swarm.fetch.gatherer import Gatherer
from ftis_swarm.swarm.fetch.holders import MAX_GROUPS_PER_HOLDER, MAX_HELD_GROUPS, HolderBook
from ftis_swarm.swarm.keys import window_of
from ftis_swarm.swarm.records import MAX_HELD_ANNOUNCED, RECORD_VERSION, HaveRecord

_RUN = "bench-have-flood"
_NODE = "QmNode" + "z" * 40
_PUZZLE = "0" * 16


@dataclasses.dataclass(frozen=True)
class FloodRun:
    """One gather's loop work, with or without the flood."""

    name: str
    haves: int
    ids: int
    """Group ids the haves named, honest ones included."""
    loop_s: float
    """CPU seconds of the loop's thread: the least of the repeats."""
    wall_s: float
    """Wall seconds of the same run."""
    groups: int
    """Groups the book remembered at the end."""
    most_named: int
    """The most groups one holder was remembered to hold."""
    over_cap: int
    """Announcements dropped because their holder named more than `MAX_GROUPS_PER_HOLDER` groups."""
    honest_known: int
    """Honest holders' groups the book still knew a holder of."""
    honest_named: int


@dataclasses.dataclass(frozen=True)
class HaveFloodBench:
    flood_ids: int
    flood_holders: int
    honest: int
    deadline: float
    polls: int
    repeats: int
    runs: list[FloodRun]

    def as_dict(self) -> dict:
        return {"bench": "hostile", "phase": "have-flood", "max_held_groups": MAX_HELD_GROUPS,
                "max_groups_per_holder": MAX_GROUPS_PER_HOLDER, **dataclasses.asdict(self)}


class _NoRecords:
    """A `KeyReader` that finds nothing: the polls' forgetting runs, no network."""

    async def read(self, keys: Collection[str], *, timeout: float) -> dict:
        return {}


def _peer(kind: str, i: int) -> str:
    return f"Qm{kind}{i:09d}".replace("0", "z").ljust(46, "x")


def _haves(owner: str, ids: list[bytes], cfg: SwarmConfig, now: float) -> list[HaveRecord]:
    window = window_of(now, cfg.records.window)
    return [HaveRecord(v=RECORD_VERSION, holder=owner, run_id=cfg.run_id, window=window, created_at=now,
                       puzzle=_PUZZLE, groups=ids[i:i + MAX_HELD_ANNOUNCED])
            for i in range(0, len(ids), MAX_HELD_ANNOUNCED)]


def _arrivals(*, ids: int, holders: int, honest: int, cfg: SwarmConfig, seed: int) -> list[FoundRecord]:
    """The haves of one gather in the order they arrive: the honest ones spread evenly through the flood."""
    rng, now = random.Random(seed), get_dht_time()
    per = math.ceil(ids / holders) if ids else 0
    flood = [have for h in range(holders)
             for have in _haves(_peer("Attack", h), [rng.randbytes(16) for _ in range(min(per, ids - h * per))],
                                cfg, now)]
    honest_haves = [_haves(_peer("Honest", h), [rng.randbytes(16) for _ in range(MAX_HELD_ANNOUNCED)], cfg, now)[0]
                    for h in range(honest)]
    order: list[HaveRecord] = []
    step = len(flood) / max(honest, 1)
    for i, have in enumerate(honest_haves):
        order += flood[round(i * step):round((i + 1) * step)] + [have]
    order += flood[round(len(honest_haves) * step):]
    return [FoundRecord(owner=have.holder, content=have, expiration=now + cfg.records.ttl + i * 1e-6)
            for i, have in enumerate(order)]


async def _gather_work(records: list[FoundRecord], cfg: SwarmConfig, polls: int) -> tuple[float, float]:
    """(CPU s of this thread, wall s) for a fresh gatherer to take `records` with `polls` polls between them."""
    gatherer = Gatherer(reader=_NoRecords(), p2p=None, cfg=cfg, peer_id=_NODE, tokenizer_fp="tok", vocab_size=None,
                        counters=SwarmCounters(), policy=ALLOW_ALL)
    every = max(1, math.ceil(len(records) / polls))
    started_cpu, started = time.thread_time(), time.perf_counter()
    for i in range(0, len(records), every):
        for record in records[i:i + every]:
            gatherer.on_gossip(record)
        await gatherer.poll_once()
    return time.thread_time() - started_cpu, time.perf_counter() - started


def _measure(name: str, records: list[FoundRecord], cfg: SwarmConfig, polls: int, repeats: int) -> FloodRun:
    times = [asyncio.run(_gather_work(records, cfg, polls)) for _ in range(repeats)]
    loop_s, wall_s = min(times)
    book = HolderBook(cfg, SwarmCounters())
    for record in records:
        book.note(record.owner, record.content.group_ids(), until=record.expiration)
    honest = [(r.owner, g) for r in records if r.owner.startswith("QmHonest") for g in r.content.group_ids()]
    owners = {r.owner for r in records}
    return FloodRun(name=name, haves=len(records), ids=sum(len(r.content.groups) for r in records),
                    loop_s=loop_s, wall_s=wall_s, groups=len(book),
                    most_named=max((book.named_by(o) for o in owners), default=0), over_cap=book.over_cap,
                    honest_known=sum(book.has(g) for _, g in honest), honest_named=len(honest))


def run_have_flood_bench(*, ids: int, holders: int, honest: int = 8, deadline: float = 2.0, repeats: int = 3,
                         seed: int = 0) -> HaveFloodBench:
    cfg = SwarmConfig(run_id=_RUN)
    polls = max(1, round(deadline / cfg.fetch.poll_interval))
    runs = [_measure("no flood", _arrivals(ids=0, holders=holders, honest=honest, cfg=cfg, seed=seed), cfg, polls,
                     repeats),
            _measure("flood", _arrivals(ids=ids, holders=holders, honest=honest, cfg=cfg, seed=seed), cfg, polls,
                     repeats)]
    return HaveFloodBench(flood_ids=ids, flood_holders=holders, honest=honest, deadline=deadline, polls=polls,
                          repeats=repeats, runs=runs)


def format_have_flood(bench: HaveFloodBench) -> str:
    base = bench.runs[0].loop_s
    lines = [
        f"have flood: {bench.flood_ids:,} random group ids in haves of {MAX_HELD_ANNOUNCED} from {bench.flood_holders} "
        f"identities, among {bench.honest} honest holders' haves, {bench.polls} poll(s): one gather of "
        f"{bench.deadline:g} s on one gatherer's loop (CPU s of its thread, least of {bench.repeats}); the book holds "
        f"at most {MAX_HELD_GROUPS:,} groups, {MAX_GROUPS_PER_HOLDER} a holder",
        f"{'run':>9} {'haves':>6} {'ids':>8} {'loop s':>8} {'wall s':>7} {'vs base':>8} {'of deadline':>11} "
        f"{'us/id':>6} {'groups':>6} {'most/holder':>11} {'over cap':>8} {'honest known':>12}",
    ]
    for run in bench.runs:
        ratio = run.loop_s / base if base > 0 else math.inf
        lines.append(
            f"{run.name:>9} {run.haves:>6} {run.ids:>8} {run.loop_s:>8.3f} {run.wall_s:>7.3f} {ratio:>8.1f} "
            f"{run.loop_s / bench.deadline:>11.1%} {run.loop_s / max(run.ids, 1) * 1e6:>6.1f} {run.groups:>6} "
            f"{run.most_named:>11} {run.over_cap:>8} {run.honest_known:>5}/{run.honest_named:<6}")
    return "\n".join(lines)
