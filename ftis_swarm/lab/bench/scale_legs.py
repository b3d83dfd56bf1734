"""`bench scale`'s legs of publish-to-visible: where a chosen group's time goes at the node that chose it.

From the publish call's start (at the publisher) to the body accepted (at the node that chose
it), in the six legs of `swarm.fetch.legs.Legs`, each the difference of two of its times, so
they add up to publish-to-visible exactly, for each group and so for their means:

    seen    publish start to its pointer considered here (the publish call's stores or gossip, and delivery)
    choose  to chosen (`selection`: strangers wait for the gather to open)
    queue   to its stream taking a slot (slots, allowance, room)
    stream  to that stream beginning on its body (the bodies before it in the stream, and their checks)
    body    to its bytes in (for a stream's first body: the dial and the request too)
    check   to checked against its pointer, decoded and accepted

Beside them, the p50 of the `body` leg of each stream's first body alone (`1st body`: the
stream's set-up through both daemons, the request, and the first body's bytes), which every
later body of that stream waits for in its `stream` leg.
"""

from __future__ import annotations

import math

import numpy as np

LEGS = ("seen", "choose", "queue", "stream", "body", "check")
_ENDS = ("seen", "chosen", "started", "began", "received", "accepted")
"""The `Legs` time each leg ends at; each starts at the one before (the first at publish start)."""


def leg_spans(published_at: float, legs: dict[str, float]) -> dict[str, float]:
    """Seconds of each leg of one group (`legs`: its `Legs` as a dict); they add up to accepted - published_at."""
    starts = (published_at, *[legs[end] for end in _ENDS[:-1]])
    return {leg: legs[end] - start for leg, end, start in zip(LEGS, _ENDS, starts)}


def leg_figures(rows: list[dict], published: dict[str, float]) -> tuple[dict[str, float], dict[str, float]]:
    """(mean ms, p50 ms) of each leg over the groups the node rows gathered whose publish start is known; the
    p50s also hold `first_body` (see the module docstring)."""
    spans = [leg_spans(published[gid], legs) for r in rows for gid, legs in r["legs"].items() if gid in published]
    ms = lambda f: {leg: 1e3 * float(f([s[leg] for s in spans])) if spans else math.nan  # noqa: E731
                    for leg in LEGS}
    firsts: dict[tuple[int, int, float], dict[str, float]] = {}  # (node, round, slot taken) -> its first body's legs
    for r in rows:
        for legs in r["legs"].values():
            key = (r["node"], r["round"], legs["started"])
            if key not in firsts or legs["began"] < firsts[key]["began"]:
                firsts[key] = legs
    first = [legs["received"] - legs["began"] for legs in firsts.values()]
    return ms(np.mean), {**ms(np.median), "first_body": 1e3 * float(np.median(first)) if first else math.nan}


def leg_lines(rows: list) -> list[str]:
    """The legs' table: per row, visible's mean and each leg's mean (they add up to it), then the p50s."""
    head = " ".join(f"{leg:>6}" for leg in LEGS)
    lines = [f"{'nodes':>5} {'layout':>7} {'K':>2} {'reads':>8} {'vis mean':>8} {head} | {'vis p50':>7} {head} "
             f"{'1st body':>8}"]
    for r in rows:
        means = " ".join(f"{r.legs_ms.get(leg, math.nan):>6.1f}" for leg in LEGS)
        p50s = " ".join(f"{r.legs_p50_ms.get(leg, math.nan):>6.1f}" for leg in LEGS)
        lines.append(f"{r.nodes:>5} {r.layout:>7} {r.per_stream:>2} {r.reads:>8} {r.visible_mean_ms:>8.1f} {means} | "
                     f"{r.visible_p50_ms:>7.1f} {p50s} {r.legs_p50_ms.get('first_body', math.nan):>8.1f}")
    lines.append("legs of publish-to-visible, ms at the node that chose the group (means add up to vis mean; p50s "
                 "need not): seen: publish start to pointer seen; choose: to chosen; queue: to its stream's slot; "
                 "stream: to the stream beginning on its body; body: to its bytes in (a stream's first: with the "
                 "dial); check: to checked and accepted; 1st body: p50 of the body leg of a stream's first body; reads: each body read timed by a deadline on the running task, or by a "
                 "task of its own (wait_for)")
    return lines
