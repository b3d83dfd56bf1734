"""One benchmark node in its own process: `python -m ftis_swarm.lab.bench.swarm_worker '<SwarmConfig json>'`.

It speaks JSON lines: it writes `{"peer_id", "maddrs"}` once joined, then answers each
command read from stdin with one line.

    {"op": "round", "round": r, "size": bytes, "count": k, "expect": n, "start_at": unix time,
     "timeout": s, "min_seconds": s}
        publishes k synthetic groups of about `size` bytes (round r, one pointer) from `start_at`,
        while a watcher thread gathers until n peers' groups arrived or `timeout` passed, and
        the round lasted `min_seconds` at least; answers {"published": [[group id, publish
        start, ok, seconds, reason], ...] (the round's one publish, once per group), "arrivals": {group id: unix time its body was
        accepted}, "traffic": {counter: increase over the round}}
    {"op": "exchange", "size": bytes, "count": k, "deadline": s}
        one node round: publishes k groups, then gathers once with `deadline`; answers
        {"published": [[group id, ok]], "received": [[group id, sender]], "round_s": s, "gather_s": s}
    {"op": "counters"}  the client's counters
    {"op": "quit"}  leaves the swarm and answers {"ok": true}
"""

from __future__ import annotations

import json
import sys
import threading
import time

import numpy as np

from ftis_swarm.config import SwarmConfig
from ftis_swarm.swarm import SwarmClient
from ftis_swarm.wire import Group, encode_group

TOKENIZER_FP = "bench-tokenizer"
VOCAB_SIZE = 50_000
_PROMPT_TOKENS = 64
_WATCH_EVERY = 0.05
TRAFFIC = ("gossip_received", "gossip_bytes", "dht_requests", "dht_bytes", "fetched_bytes")


def synthetic_group(*, sender: str, run_id: str, size: int, seed: int) -> Group:
    """A valid group whose encoding is at most `size` bytes and within 1% of it."""
    rng = np.random.default_rng(seed)
    group_size = 8 if size <= 256 * 1024 else 16
    overhead = 512 + 4 * _PROMPT_TOKENS + 4 * group_size
    length = max(1, (size - overhead) // (8 * group_size))
    group = Group.build(
        run_id=run_id, sender=sender, model_id="bench", policy_version=seed, created_at=time.time(),
        tokenizer_fp=TOKENIZER_FP, task_id="bench", item_id=f"item-{seed}",
        prompt_ids=rng.integers(0, VOCAB_SIZE, _PROMPT_TOKENS), temperature=1.0,
        completion_ids=[rng.integers(0, VOCAB_SIZE, length) for _ in range(group_size)],
        logp_gen=[-rng.random(length, dtype=np.float32) for _ in range(group_size)],
    )
    assert len(encode_group(group)) <= size, "synthetic group overshoots its size"
    return group


def _round(client: SwarmClient, cmd: dict, *, run_id: str, seed_base: int) -> dict:
    arrivals: dict[str, float] = {}
    deadline = time.time() + cmd["timeout"]
    before = client.counters()

    def watch() -> None:
        while len(arrivals) < cmd["expect"] and time.time() < deadline:
            client.gather(_WATCH_EVERY)
            for group_id, accepted_at in client.arrival_times().items():
                arrivals.setdefault(group_id, accepted_at)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    time.sleep(max(0.0, cmd["start_at"] - time.time()))
    groups = [synthetic_group(sender=client.peer_id, run_id=run_id, size=cmd["size"], seed=seed_base + i)
              for i in range(cmd["count"])]
    started = time.time()
    result = client.publish_round(groups, round=cmd["round"])
    published = [[group.group_id, started, result.ok, result.seconds, result.reason] for group in groups]
    watcher.join()
    time.sleep(max(0.0, cmd["start_at"] + cmd["min_seconds"] - time.time()))
    after = client.counters()
    return {"published": published, "arrivals": arrivals,
            "traffic": {name: after[name] - before[name] for name in TRAFFIC}}


def _exchange(client: SwarmClient, cmd: dict, *, run_id: str, seed_base: int) -> dict:
    started = time.monotonic()
    groups = [synthetic_group(sender=client.peer_id, run_id=run_id, size=cmd["size"], seed=seed_base + i)
              for i in range(cmd["count"])]
    ok = client.publish_round(groups).ok
    published = [[group.group_id, ok] for group in groups]
    gather_started = time.monotonic()
    received = [[group.group_id, group.sender] for group in client.gather(cmd["deadline"])]
    ended = time.monotonic()
    return {"published": published, "received": received, "round_s": ended - started,
            "gather_s": ended - gather_started}


def main() -> None:
    cfg = SwarmConfig.model_validate_json(sys.argv[1])
    client = SwarmClient.start(cfg, tokenizer_fp=TOKENIZER_FP, vocab_size=VOCAB_SIZE)
    _send({"peer_id": client.peer_id, "maddrs": client.visible_maddrs})
    seed_base = 0
    try:
        for line in sys.stdin:
            cmd = json.loads(line)
            if cmd["op"] == "quit":
                break
            seed_base += 1000
            if cmd["op"] == "counters":
                _send(client.counters())
            elif cmd["op"] == "exchange":
                _send(_exchange(client, cmd, run_id=cfg.run_id, seed_base=seed_base))
            else:
                _send(_round(client, cmd, run_id=cfg.run_id, seed_base=seed_base))
    finally:
        client.shutdown()
    _send({"ok": True})


def _send(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
