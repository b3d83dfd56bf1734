"""`ftis-node bench scale`: what one node pays per round as the swarm grows, with and without a budget.

For each swarm size N and layout, N swarm-only nodes (real `SwarmClient`s, each with its
own p2pd, DHT peer and RSA key; `clients_per_worker` of them share a worker process,
`scale_worker`) run `rounds` rounds: every node publishes a round of `groups` synthetic
groups of `size` bytes (the paper's: 16 of about 48 KiB) as one signed pointer every
`period` seconds, at its own phase (not one burst), then gathers it with the round's
deadline `period`. Layouts, measured in the same run:

- `budget`: each node has the budget its update would apply (`peers.intake.Budget.of` a
  node config of the paper's round: 4 x its own tokens, 64 groups, 16 per peer) and the
  swarm fetches only what it takes (`swarm.fetch.selection`);
- `all`: no budget, every group of every live peer fetched (the layout before);
- `holders`: the budget, and each node's upload capped at `UPLOAD_COPIES` (2) copies of its
  own round per `period` (`upload_bytes_per_window`, `upload_window`; `fetch.bodies`), haves
  at least every `period / 2`; the last node leaves the swarm in round 1 once it served its first
  `scale_worker.DEPART_SERVES` bodies of that round (or `2 * period` s after publishing it: a
  departed publisher), and the others go on.

Holders' figures, per publisher and round: its own bodies' bytes out over one copy of its
round (`own copies`, mean and most) beside the number of peers that took a group of it
(`takers`); the most bytes one node sent in one upload window over its cap (`peak/cap`:
the cap's own check, at most 1 + one body over the cap); the held bodies' bytes each node
served (`held KiB`); of the departed publisher's round-1 groups, the bodies it served
before it left (`served`), the share some node gathered beside the same share of the
publishers that stayed (`departed`, `stayed`), and the share of the (peer, group) pairs
chosen that were delivered (`wanted`: delivered over delivered plus those given up on for
want of a source and not revived by the end), and that share over the groups some peer got
(`of held`: those a holder could serve); the p50 of a successful body fetch (stream to body
in) from the publisher and from a holder (`fetch pub`, `fetch hold`).

Each (N, layout) is measured once per `bodies_per_stream` K asked for (`max_bodies_per_stream`:
bodies one stream carries, `fetch.streams`; 1 is one body per stream), each a swarm of its own,
so K = 1 and K = 8 meet the same machine in one run; likewise once per `read_clocks` asked for
(`deadline`: each body read's clock a deadline on the running task, `fetch.streams.TASKLESS_TIMEOUTS`, the
default on Python 3.11+; `task`: `asyncio.wait_for`, a task per read, as before), set in the workers.

Publish-to-visible in legs (`scale_legs`): seen, choose, queue, stream, body, check, as means
that add up to visible's mean, and as p50s.

Round 0 (first connections) is not reported. Per node and round: bodies fetched, the
streams that carried them, body bytes in and out, messages (gossip received and DHT calls) and their bytes against the
gossip estimate N x mesh degree x pointer size, the publish call, publish-to-visible of
the groups chosen, the gather's time (to fill the budget) and the share of the budget
filled; per layout, the CPU seconds of all worker processes and their p2pd daemons over
the rounds beside the 1-minute load average, and the share of publishers whose groups
some node used, per round. All processes share this machine's cores and clock.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np

from ftis_swarm.config import FetchConfig, NodeConfig, SwarmConfig, TransportConfig
from ftis_swarm.lab.bench.scale_legs import leg_figures, leg_lines
from ftis_swarm.lab.bench.swarm import JsonProcess
from ftis_swarm.lab.bench.swarm_worker import synthetic_group
from ftis_swarm.peers.intake import Budget

logger = logging.getLogger(__name__)

LAYOUTS = ("budget", "all")
"""The default layouts; `holders` is measured when asked for."""
DEPART_ROUND = 1
UPLOAD_COPIES = 2
"""The holders layout's upload cap: copies of a node's own round per period (own bodies first, held ones in half)."""
MESH_DEGREE = 6
"""gossipsub's D in the bundled p2pd: each message reaches a peer from about D mesh peers."""
PAPER_GROUPS, PAPER_SIZE = 16, 48 * 1024
JOIN_TIMEOUT = 120.0
"""Seconds a node may take to join: dozens of p2pd daemons starting at once on a loaded machine."""


@dataclass(frozen=True)
class ScaleRow:
    """The figures of one (swarm size, layout), per node and round unless said otherwise."""

    nodes: int
    layout: str
    rounds: int
    """Rounds reported (round 0 left out)."""
    bodies: float
    """Mean bodies fetched."""
    body_kib_in: float
    body_kib_out: float
    """Mean KiB of bodies fetched, and served to peers."""
    messages: float
    """Mean gossip messages received plus DHT calls made."""
    pointer_kib: float
    """Mean KiB of gossip messages received and DHT records and replies."""
    gossip_estimate_kib: float
    """N x mesh degree x pointer size: the gossip bytes a node would receive for N pointers."""
    publish_p50_ms: float
    visible_p50_ms: float
    """Publish start to a chosen group's body accepted at the node that chose it (p50 over all)."""
    fill_p50_ms: float
    """The gather call: until the budget is filled (budget) or every live peer's round is in (all)."""
    fill_share: float
    """Mean completion tokens gathered over the budget's max_tokens."""
    publishers_used: float
    """Mean share, per round, of the N publishers whose groups some node gathered."""
    cpu_s: float
    """CPU seconds of the workers and their p2pd daemons, per node and round."""
    load: float
    """The 1-minute load average at the end of the rounds."""
    per_stream: int = 8
    """`max_bodies_per_stream` of every node: bodies one fetch stream carries at most."""
    reads: str = "deadline"
    """How each body read is timed: `deadline` (on the running task) or `task` (`wait_for`)."""
    streams: float = math.nan
    """Mean body streams a node opened."""
    own_copies: float = math.nan
    """Mean bytes of its own bodies a publisher served per round, over one copy of its round."""
    takers: float = math.nan
    """Mean peers that gathered at least one group of a publisher, per round."""
    held_kib_out: float = math.nan
    """Mean KiB of held (others') bodies a node served per round."""
    departed_share: float = math.nan
    stayed_share: float = math.nan
    """Share of the departed publisher's round-1 groups some node gathered; the same for the others (holders)."""
    own_copies_max: float = math.nan
    """The most own bytes out of one publisher in one round, over one copy of its round."""
    upload_peak: float = math.nan
    """The most body bytes one node sent in one upload window, over its cap (holders)."""
    departed_served: float = math.nan
    """Own bodies of round 1 the departed publisher served before it left."""
    departed_wanted: float = math.nan
    departed_wanted_held: float = math.nan
    """Of the (peer, group) pairs of the departed publisher's round 1 that peers chose, the share delivered;
    the same over the groups some peer got (the ones a holder could serve)."""
    fetch_publisher_ms: float = math.nan
    fetch_holder_ms: float = math.nan
    """p50 of a successful body fetch (stream opened to body in) from the publisher, from a holder."""
    failed: str = ""
    """Why the size did not run to the end (empty when it did)."""
    visible_mean_ms: float = math.nan
    legs_ms: dict = field(default_factory=dict)
    legs_p50_ms: dict = field(default_factory=dict)
    """Publish-to-visible's mean, and the mean and p50 ms of each of its legs (`scale_legs.LEGS`)."""


def paper_budget(*, groups: int, size: int) -> Budget:
    """The budget of a node whose own round is `groups` groups like the synthetic ones (Budget.of)."""
    sample = synthetic_group(sender="Qm" + "1" * 44, run_id="bench", size=size, seed=0)
    cfg = NodeConfig(prompts_per_round=groups, sampling={"group_size": len(sample.completion_ids),
                                                         "max_new_tokens": sample.completion_lengths[0]})
    return Budget.of(cfg, context=1 << 20)


def run_scale_bench(node_counts: list[int], *, layouts: tuple[str, ...] = LAYOUTS, rounds: int = 4,
                    period: float = 5.0, groups: int = PAPER_GROUPS, size: int = PAPER_SIZE,
                    clients_per_worker: int = 4, bodies_per_stream: tuple[int, ...] = (8,),
                    read_clocks: tuple[str, ...] = ("deadline",), progress=lambda step: None) -> list[ScaleRow]:
    """Measures every (N, layout, bodies per stream, read clock); worker processes never outlive this call."""
    budget = paper_budget(groups=groups, size=size)
    rows = []
    with tempfile.TemporaryDirectory(prefix="ftis-bench-scale-") as tmp:
        for n in node_counts:
            for layout in layouts:
                for k, reads in [(k, reads) for k in bodies_per_stream for reads in read_clocks]:
                    progress(f"{n} nodes, {layout}, {k} bodies per stream, reads timed by {reads}")
                    try:
                        rows.append(_measure(n, layout, Path(tmp), budget=budget, rounds=rounds, period=period,
                                             groups=groups, size=size, per_worker=clients_per_worker, per_stream=k,
                                             reads=reads))
                    except (RuntimeError, TimeoutError, OSError) as exc:  # a size the machine cannot hold: said
                        logger.warning("%d nodes, %s, %d per stream: %s", n, layout, k, exc)
                        rows.append(_failed_row(n, layout, k, f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}",
                                                reads))
                    logger.info("%s", rows[-1])
    return rows


def _failed_row(n: int, layout: str, per_stream: int, why: str, reads: str) -> ScaleRow:
    return ScaleRow(n, layout, 0, *[math.nan] * 12, load=os.getloadavg()[0], per_stream=per_stream, failed=why,
                    reads=reads)


def _start(n: int, cfg: SwarmConfig, logs: Path, per_worker: int, reads: str) -> list[JsonProcess]:
    def worker(first: int, k: int, c: SwarmConfig) -> JsonProcess:
        settings = {"cfg": c.model_dump_json(), "clients": k, "first": first, "taskless": reads == "deadline"}
        return JsonProcess([sys.executable, "-m", "ftis_swarm.lab.bench.scale_worker", json.dumps(settings)],
                           log=logs / f"{cfg.run_id}-{first}.log")

    workers = [worker(0, min(per_worker, n), cfg)]
    try:
        workers[0].joined()
        joined = cfg.replace(transport={"peers": workers[0].maddrs})
        rest = [worker(first, min(per_worker, n - first), joined) for first in range(per_worker, n, per_worker)]
        workers += rest
        for w in rest:
            w.joined()
    except BaseException:
        for w in workers:
            w.kill()
        raise
    return workers


def _measure(n: int, layout: str, logs: Path, *, budget: Budget, rounds: int, period: float, groups: int,
             size: int, per_worker: int, per_stream: int, reads: str) -> ScaleRow:
    cfg = SwarmConfig(run_id=f"scale-{n}-{layout}-{per_stream}-{reads}",
                      transport=TransportConfig(host="127.0.0.1", join_timeout=JOIN_TIMEOUT),
                      fetch=FetchConfig(max_bodies_per_stream=per_stream))
    if layout == "holders":
        cfg = cfg.replace(holders={"upload_bytes_per_window": UPLOAD_COPIES * groups * size, "upload_window": period,
                                   "have_interval": period / 2})
    workers = _start(n, cfg, logs, per_worker, reads)
    try:
        start_at = time.time() + 2.0
        cmd = {"op": "run", "rounds": rounds + 1, "period": period, "groups": groups, "size": size,
               "budget": asdict(budget) if layout in ("budget", "holders") else None, "start_at": start_at,
               "nodes": n, "depart": DEPART_ROUND if layout == "holders" else None}
        for w in workers:
            w.send(cmd)
        answers = [w.read() for w in workers]
        for w in workers:
            w.send({"op": "quit"})
        for w in workers:
            w.read()
    finally:
        for w in workers:
            w.kill()
    return _figures(n, layout, answers, rounds=rounds, budget=budget, copy_bytes=groups * size,
                    cap=UPLOAD_COPIES * groups * size if layout == "holders" else 0, per_stream=per_stream,
                    reads=reads)


def _p50_ms(values: list[float]) -> float:
    return 1e3 * float(np.percentile(values, 50)) if values else math.nan


def _departed(gathered: list[dict], departed: list[dict]) -> dict:
    """What became of the departed publisher's round: `departed_served`, `departed_wanted` and
    `departed_wanted_held` of `ScaleRow`."""
    if not departed:
        return {}
    ids = {gid for r in departed for gid, _ in r["published"]}
    delivered = {(g["node"], gid) for g in gathered for gid in g["arrivals"] if gid in ids}
    last = {g["node"]: g for g in sorted(gathered, key=lambda g: g["round"])}  # given up on: at the end
    missed = {(node, gid) for node, g in last.items() for gid in g["sourceless"] if gid in ids} - delivered
    held = {gid for _, gid in delivered}
    share = lambda got, lost: len(got) / (len(got) + len(lost)) if got or lost else math.nan  # noqa: E731
    return dict(departed_served=float(departed[0]["served"]), departed_wanted=share(delivered, missed),
                departed_wanted_held=share(delivered, {(n, gid) for n, gid in missed if gid in held}))


def _holding(rows: list[dict], *, copy_bytes: int, cap: int) -> dict:
    """The holders' figures of `ScaleRow` from the node rows (round 0 left out)."""
    gathered = [r for r in rows if not r.get("departed")]
    publishers = [r for r in rows if r["publish_ok"]]
    takers = [len({g["node"] for g in gathered if g["round"] == p["round"] and p["peer_id"] in g["senders"]})
              for p in publishers]
    own = [(p["traffic"]["served_bytes"] - p["traffic"]["held_served_bytes"]) / copy_bytes
           for p in publishers if not p.get("departed")]
    got = {gid for g in gathered if g["round"] >= DEPART_ROUND for gid in g["arrivals"]}
    departed = [gid for r in rows if r.get("departed") for gid, _ in r["published"]]
    stayed = [gid for r in rows if r["round"] == DEPART_ROUND and not r.get("departed") for gid, _ in r["published"]]
    share = lambda ids: sum(gid in got for gid in ids) / len(ids) if ids else math.nan  # noqa: E731
    times = {source: [t for r in rows for t in r["fetch_times"][source]] for source in ("publisher", "holder")}
    return dict(own_copies=float(np.mean(own)) if own else math.nan,
                own_copies_max=float(np.max(own)) if own else math.nan,
                upload_peak=max(r["upload_peak"] for r in rows) / cap if cap else math.nan,
                fetch_publisher_ms=_p50_ms(times["publisher"]), fetch_holder_ms=_p50_ms(times["holder"]),
                **_departed(gathered, [r for r in rows if r.get("departed")]),
                takers=float(np.mean(takers)) if takers else math.nan,
                held_kib_out=float(np.mean([r["traffic"]["held_served_bytes"] for r in rows])) / 1024,
                departed_share=share(departed), stayed_share=share(stayed))


def _figures(n: int, layout: str, answers: list[dict], *, rounds: int, budget: Budget, copy_bytes: int,
             cap: int, per_stream: int, reads: str) -> ScaleRow:
    every = [r for a in answers for r in a["rows"] if r["round"] >= 1]
    rows = [r for r in every if not r.get("departed")]
    published = {gid: start for a in answers for r in a["rows"] for gid, start in r["published"]}
    visible = [at - published[gid] for r in rows for gid, at in r["arrivals"].items() if gid in published]
    used_share = []
    for number in range(1, rounds + 1):
        senders = {s for r in rows if r["round"] == number for s in r["senders"]}
        used_share.append(len(senders) / n)
    pointer_bytes = float(np.median([r["pointer_bytes"] for r in rows if r["pointer_bytes"]] or [0]))
    mean = lambda key: float(np.mean([r["traffic"][key] for r in rows]))  # noqa: E731
    legs_ms, legs_p50_ms = leg_figures(rows, published)
    return ScaleRow(
        nodes=n, layout=layout, rounds=rounds,
        bodies=mean("fetched_bodies"), body_kib_in=mean("fetched_bytes") / 1024,
        body_kib_out=mean("served_bytes") / 1024,
        messages=mean("gossip_received") + mean("dht_requests"),
        pointer_kib=(mean("gossip_bytes") + mean("dht_bytes")) / 1024,
        gossip_estimate_kib=n * MESH_DEGREE * pointer_bytes / 1024,
        publish_p50_ms=1e3 * float(np.percentile([r["publish_s"] for r in rows], 50)),
        visible_p50_ms=1e3 * float(np.percentile(visible, 50)) if visible else math.nan,
        fill_p50_ms=1e3 * float(np.percentile([r["fill_s"] for r in rows], 50)),
        fill_share=float(np.mean([r["tokens"] / budget.max_tokens for r in rows])),
        publishers_used=float(np.mean(used_share)),
        cpu_s=sum(a["cpu_s"] for a in answers) / (n * (rounds + 1)),
        load=max(a["load"][1] for a in answers),
        per_stream=per_stream, reads=reads, streams=mean("body_streams"),
        **_holding(every, copy_bytes=copy_bytes, cap=cap),
        visible_mean_ms=1e3 * float(np.mean(visible)) if visible else math.nan,
        legs_ms=legs_ms, legs_p50_ms=legs_p50_ms,
    )


def format_table(rows: list[ScaleRow], *, period: float, groups: int, size: int, budget: Budget) -> str:
    """One line per row; `x all` is the row's body bytes over the `all` row of the same size."""
    everything: dict[int, float] = {}
    for r in rows:
        if r.layout == "all" and not r.failed:
            everything.setdefault(r.nodes, r.body_kib_in)
    lines = [
        f"scale on 127.0.0.1: per node and round ({groups} groups of {size // 1024} KiB a round, one every "
        f"{period:g} s at each node's phase; budget {budget.max_tokens} tokens, {budget.max_groups} groups, "
        f"{budget.max_groups_per_peer} per peer)",
        f"{'nodes':>5} {'layout':>6} {'K':>2} {'bodies':>6} {'strm':>5} {'KiB in':>8} {'x all':>6} {'x 8':>5} "
        f"{'KiB out':>8} {'msgs':>6} "
        f"{'ptr KiB':>7} {'NxDxptr':>7} {'publish':>7} {'visible':>7} {'fill ms':>7} {'filled':>6} {'used':>5} "
        f"{'CPU s':>6} {'load':>5}",
    ]
    base = {}
    for r in rows:
        if r.failed:
            lines.append(f"{r.nodes:>5} {r.layout:>6} {r.per_stream:>2} did not run: {r.failed} (load {r.load:.1f})")
            continue
        first = base.setdefault((r.layout, r.per_stream), r.body_kib_in)
        vs_all = r.body_kib_in / everything[r.nodes] if everything.get(r.nodes) else math.nan
        vs_first = r.body_kib_in / first if first else math.nan
        lines.append(
            f"{r.nodes:>5} {r.layout:>6} {r.per_stream:>2} {r.bodies:>6.1f} {r.streams:>5.1f} {r.body_kib_in:>8.0f} "
            f"{vs_all:>6.2f} {vs_first:>5.2f} "
            f"{r.body_kib_out:>8.0f} {r.messages:>6.0f} {r.pointer_kib:>7.1f} {r.gossip_estimate_kib:>7.1f} "
            f"{r.publish_p50_ms:>7.1f} {r.visible_p50_ms:>7.0f} {r.fill_p50_ms:>7.0f} {r.fill_share:>6.2f} "
            f"{r.publishers_used:>5.2f} {r.cpu_s:>6.2f} {r.load:>5.1f}")
    held = [r for r in rows if not r.failed]
    if held:
        lines.append(f"{'nodes':>5} {'layout':>7} {'K':>2} {'own copies':>10} {'most':>5} {'takers':>6} {'peak/cap':>8} "
                     f"{'held KiB':>8} {'served':>6} {'departed':>8} {'stayed':>6} {'wanted':>6} {'fetch pub':>9} "
                     f"{'fetch hold':>10}")
        lines += [f"{r.nodes:>5} {r.layout:>7} {r.per_stream:>2} {r.own_copies:>10.2f} {r.own_copies_max:>5.2f} {r.takers:>6.1f} "
                  f"{r.upload_peak:>8.2f} {r.held_kib_out:>8.0f} {r.departed_served:>6.0f} {r.departed_share:>8.2f} "
                  f"{r.stayed_share:>6.2f} {r.departed_wanted:>6.2f} {r.departed_wanted_held:>7.2f} {r.fetch_publisher_ms:>9.1f} "
                  f"{r.fetch_holder_ms:>10.1f}" for r in held]
    lines.append("own copies, most: a publisher's own bodies' bytes out per round over one copy of its round (mean, "
                 "most); takers: peers that gathered a group of it; peak/cap: most bytes a node sent in one upload "
                 "window over its cap; held KiB: others' bodies a node served per round; served: bodies the departed "
                 "publisher sent before leaving; departed, stayed: share of round-1 groups of the publisher that "
                 "left (holders), of those that stayed, some node gathered; wanted: share of the (peer, group) pairs "
                 "of the departed round chosen that were delivered, of held: over the groups some peer got; fetch pub, hold: p50 ms of a body fetch from the "
                 "publisher, from a holder")
    lines += leg_lines(held)
    lines.append("K: bodies per stream at most; strm: body streams a node opened; x all: body KiB in over the "
                 "fetch-everything row of the same size; x 8: over the layout's smallest size (same K); publish, visible: p50 ms; used: share of publishers whose groups some node "
                 "gathered, per round; CPU s: workers and p2pd daemons; load: 1-min load average")
    return "\n".join(lines)


def rows_as_json(rows: list[ScaleRow], *, extra: Optional[dict] = None) -> str:
    return json.dumps({"bench": "scale", "rows": [asdict(r) for r in rows], **(extra or {})}, indent=2)
