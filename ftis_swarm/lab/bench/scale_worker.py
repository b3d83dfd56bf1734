"""Several swarm-only nodes in one process: `python -m ftis_swarm.lab.bench.scale_worker '<json>'`.

Settings: {"cfg": SwarmConfig as JSON, "clients": k, "first": index of its first node}, and
optionally "hosts" (the address each node listens on: one network origin per /24; default
`cfg.transport.host` for all), "taskless" (`fetch.streams.TASKLESS_TIMEOUTS` in this process; default as
installed) and "tokenizer_fp", "vocab_size" (those of the groups it will publish;
default the synthetic groups'). Its first node joins through `cfg.transport.peers` (none: it
starts the swarm), the others through it (or through those peers too, when given).
Each node is a real `SwarmClient` with its own p2pd, DHT peer and RSA key, and a policy
that scores a peer by how many of its groups this node used (as the ledger credits them).
It speaks JSON lines: it writes {"peer_id" (its first node's), "peer_ids", "maddrs"} once its nodes joined, then:

    {"op": "run", "rounds": R, "period": s, "groups": g, "size": bytes, "budget": {Budget fields} or null,
     "start_at": unix time, "nodes": N, "depart": round or null}
        each node publishes a round of g synthetic groups every `period` s, at its own phase
        (node i at start_at + (i / N) * period: not one burst), then gathers it with the
        round's deadline `period` (with "depart", the last node leaves that round once it served
        `DEPART_SERVES` bodies of it, or `2 * period` s after publishing it (a new upload window opens in that time), its row marked "departed", with
        "served" (own bodies sent before it left) and "left_at" (unix time)); answers {"rows": [one per node and round], "cpu_s": CPU
        seconds of this process and its p2pd daemons over the run, "load": [1-min load
        average at start, at end]}
    {"op": "publish", "round": r, "bodies": [[base64 encoded group, ...] per node]}
        each node with bodies publishes them, groups the caller built with that node's peer id as
        sender (`bench attacks`' crowd with daemons: real groups of a model), as its round r, all
        nodes at once; answers {"ok": [publish ok or null (no bodies) per node], "reasons": [...]}
    {"op": "quit"}  leaves the swarm and answers {"ok": true}

A row: {"node", "round", "peer_id", "publish_s", "pointer_bytes", "published": [[group id, publish start]],
"arrivals": {group id: accepted at}, "legs": {group id: its `fetch.legs.Legs` as a dict}, "senders": [publisher of each group gathered], "bodies",
"tokens", "fill_s", "traffic": {counter: increase since the end of the node's round before},
"fetch_times": {"publisher" | "holder": [seconds of each fetch]}, "sourceless": [group ids given up on for
want of a source, now], "upload_peak": most bytes sent in one upload window}.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Optional

import psutil

from ftis_swarm.config import SwarmConfig
from ftis_swarm.lab.bench.swarm_worker import TOKENIZER_FP, VOCAB_SIZE, _send, synthetic_group
from ftis_swarm.peers.intake import Budget
from ftis_swarm.swarm import SwarmClient
from ftis_swarm.swarm.fetch import streams
from ftis_swarm.wire import decode_group

TRAFFIC = ("gossip_received", "gossip_bytes", "dht_requests", "dht_bytes", "fetched_bytes", "fetched_bodies",
           "served_bytes", "chosen", "not_chosen", "held_served_bytes", "fetched_from_holders", "body_streams")
DEPART_SERVES = 4
"""Own bodies a departing node serves of its last round before it leaves: its first few fetches, so some
peers hold its groups (the issue's publisher that goes offline after its first few fetches)."""



class UsedPolicy:
    """Everyone allowed; a peer's score is the number of its groups this node used (earned > 0)."""

    def __init__(self) -> None:
        self._used: Counter[str] = Counter()
        self._lock = threading.Lock()

    def allows(self, peer_id: str) -> bool:
        return True

    def score(self, peer_id: str) -> float:
        with self._lock:
            return float(self._used[peer_id])

    def credit(self, peer_id: str) -> None:
        with self._lock:
            self._used[peer_id] += 1


def _node_rounds(client: SwarmClient, policy: UsedPolicy, cmd: dict, index: int, budget: Optional[Budget], *,
                 run_id: str) -> list:
    period, rows = cmd["period"], []
    phase = index / cmd["nodes"] * period
    before = client.counters()  # each round counts from the end of the one before (earned bodies come between)
    for r in range(cmd["rounds"]):
        time.sleep(max(0.0, cmd["start_at"] + r * period + phase - time.time()))
        groups = [synthetic_group(sender=client.peer_id, run_id=run_id, size=cmd["size"],
                                  seed=index * 100_000 + r * 100 + i) for i in range(cmd["groups"])]
        started, own_before = time.time(), _own_served(client.counters())
        result = client.publish_round(groups, round=r)
        departs = cmd.get("depart") is not None and r == cmd["depart"] and index == cmd["nodes"] - 1
        if departs:  # the last node leaves the swarm after its first fetches: only holders have its groups
            served = _wait_for_serves(client, DEPART_SERVES * cmd["size"], since=own_before,
                                      until=started + 2 * period)
            after = client.counters()
            rows.append({"node": index, "round": r, "peer_id": client.peer_id, "publish_s": result.seconds,
                         "publish_ok": result.ok, "pointer_bytes": result.pointer_bytes, "departed": True,
                         "served": served // cmd["size"], "left_at": time.time(),
                         "published": [[gid, started] for gid in result.group_ids], "arrivals": {}, "legs": {},
                         "senders": [],
                         "bodies": 0, "tokens": 0, "fill_s": 0.0, "max_tokens": 0,
                         "traffic": {name: after[name] - before[name] for name in TRAFFIC},
                         "fetch_times": client.fetch_times(), "sourceless": client.sourceless(),
                         "upload_peak": after["upload_window_peak"]})
            client.shutdown()
            return rows
        got = client.gather(period, round=r)
        fill = client.last_fill()
        for group in got:
            policy.credit(group.sender)
        after = client.counters()
        rows.append({
            "node": index, "round": r, "peer_id": client.peer_id, "publish_s": result.seconds,
            "publish_ok": result.ok,
            "pointer_bytes": result.pointer_bytes,
            "published": [[gid, started] for gid in result.group_ids],
            "arrivals": client.arrival_times(),
            "legs": {gid: dataclasses.asdict(legs) for gid, legs in client.visible_legs().items()},
            "senders": [g.sender for g in got], "bodies": len(got),
            "tokens": sum(g.num_completion_tokens for g in got), "fill_s": fill.seconds,
            "max_tokens": budget.max_tokens if budget is not None else 0,
            "traffic": {name: after[name] - before[name] for name in TRAFFIC},
            "fetch_times": client.fetch_times(), "sourceless": client.sourceless(),
            "upload_peak": after["upload_window_peak"],
        })
        before = after
    return rows


def _own_served(counts: dict) -> int:
    return counts["served_bytes"] - counts["held_served_bytes"]


def _wait_for_serves(client: SwarmClient, size: int, *, since: int, until: float) -> int:
    """Waits until this node served `size` bytes of its own bodies more than `since`, or until `until`
    (unix time); the bytes it served."""
    while (served := _own_served(client.counters()) - since) < size and time.time() < until:
        time.sleep(0.05)
    return served


def _cpu_seconds() -> float:
    me = psutil.Process()
    total = 0.0
    for proc in [me, *me.children(recursive=True)]:
        try:
            times = proc.cpu_times()
            total += times.user + times.system
        except psutil.NoSuchProcess:
            continue
    return total


def _publish(clients: list[SwarmClient], cmd: dict, cfg: SwarmConfig) -> dict:
    """The "publish" op: each node's given bodies as its round, all nodes at once."""
    def one(i: int) -> tuple[Optional[bool], str]:
        bodies = cmd["bodies"][i] if i < len(cmd["bodies"]) else []
        if not bodies:
            return None, ""
        groups = [decode_group(base64.b64decode(b), limits=cfg.wire) for b in bodies]
        result = clients[i].publish_round(groups, round=cmd["round"])
        return result.ok, result.reason

    with ThreadPoolExecutor(max_workers=len(clients)) as pool:
        done = list(pool.map(one, range(len(clients))))
    return {"ok": [ok for ok, _ in done], "reasons": [why for _, why in done]}


def main() -> None:
    settings = json.loads(sys.argv[1])
    cfg = SwarmConfig.model_validate_json(settings["cfg"])
    k = settings["clients"]
    streams.TASKLESS_TIMEOUTS = settings.get("taskless", streams.TASKLESS_TIMEOUTS)
    hosts = settings.get("hosts") or [cfg.transport.host] * k
    fp, vocab = settings.get("tokenizer_fp", TOKENIZER_FP), settings.get("vocab_size", VOCAB_SIZE)
    policies = [UsedPolicy() for _ in range(k)]

    def start(c: SwarmConfig, i: int) -> SwarmClient:
        return SwarmClient.start(c.replace(transport={"host": hosts[i]}), tokenizer_fp=fp, vocab_size=vocab,
                                 policy=policies[i])

    clients = [start(cfg, 0)]
    if not cfg.transport.peers:  # the swarm's first worker: its other nodes join through its first
        cfg = cfg.replace(transport={"peers": clients[0].visible_maddrs})
    with ThreadPoolExecutor(max_workers=k) as pool:
        clients += list(pool.map(lambda i: start(cfg, i), range(1, k)))
    _send({"peer_id": clients[0].peer_id, "peer_ids": [c.peer_id for c in clients], "maddrs": clients[0].visible_maddrs})
    try:
        for line in sys.stdin:
            cmd = json.loads(line)
            if cmd["op"] == "quit":
                break
            if cmd["op"] == "publish":
                _send(_publish(clients, cmd, cfg))
                continue
            budget = Budget(**cmd["budget"]) if cmd["budget"] else None
            for client in clients:
                client.set_budget(budget)
            load0, cpu0 = os.getloadavg()[0], _cpu_seconds()
            with ThreadPoolExecutor(max_workers=len(clients)) as pool:
                rows = list(pool.map(lambda i: _node_rounds(clients[i], policies[i], cmd, settings["first"] + i,
                                                            budget, run_id=cfg.run_id), range(len(clients))))
            _send({"rows": [row for node in rows for row in node], "cpu_s": _cpu_seconds() - cpu0,
                   "load": [load0, os.getloadavg()[0]]})
    finally:
        with ThreadPoolExecutor(max_workers=len(clients)) as pool:
            list(pool.map(lambda c: c.shutdown(), clients))
    _send({"ok": True})


if __name__ == "__main__":
    main()
