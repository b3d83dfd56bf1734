"""One benchmark node in its own process: `python -m ftis_swarm.lab.bench.swarm_worker '<SwarmConfig json>'
['<LedgerConfig json>']`.

With a ledger config, the node keeps a `PeerLedger` as a real node does: it is the swarm's
policy, every `exchange` charges what the swarm drained and credits each gathered group's
sender (a used group), and `ledger` / `ban` read and change it.

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
        {"published": [[group id, ok, reason]], "received": [[group id, sender]], "round_s": s, "gather_s": s}
    {"op": "counters"}  the client's counters
    {"op": "connections"}  {peer id: the remote multiaddr of each connection p2pd holds to it} (a
        `/p2p-circuit` one is relayed), as the gatherer last read them
    {"op": "stored"}  records held for others: {"held": n, "by_origin": {origin: n}}
    {"op": "ledger"}  {peer id: {"bans", "ban_reason", "cost", "charged", "allowed"}} for every peer the ledger
        knows ("charged": reasons counted against it, free ones too)
    {"op": "ban", "peer": id}  charges the peer one forged group (a ban by any cause) -> the same as "ledger"
    {"op": "quit"}  leaves the swarm and answers {"ok": true}
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time

import numpy as np

from ftis_swarm.config import LedgerConfig, SwarmConfig
from ftis_swarm.peers import faults
from ftis_swarm.peers.ledger import PeerLedger
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


def _exchange(client: SwarmClient, cmd: dict, *, run_id: str, seed_base: int, ledger: PeerLedger | None) -> dict:
    started = time.monotonic()
    groups = [synthetic_group(sender=client.peer_id, run_id=run_id, size=cmd["size"], seed=seed_base + i)
              for i in range(cmd["count"])]
    published = []
    if groups:  # a node may sit a round out (count 0)
        result = client.publish_round(groups)
        published = [[group.group_id, result.ok, result.reason] for group in groups]
    gather_started = time.monotonic()
    gathered = client.gather(cmd["deadline"])
    ended = time.monotonic()
    received = [[group.group_id, group.sender] for group in gathered]
    if ledger is not None:
        ledger.charge_swarm(client.drain_peer_faults(), me=client.peer_id)
        for group in gathered:
            if ledger.allows(group.sender):
                ledger.credit(group.sender)
    return {"published": published, "received": received, "round_s": ended - started,
            "gather_s": ended - gather_started}


def _ledger_view(ledger: PeerLedger | None) -> dict:
    if ledger is None:
        return {}
    return {peer: {"bans": rec["bans"], "ban_reason": rec["ban_reason"], "cost": rec["cost"],
                   "charged": sum(rec["counts"].values()), "allowed": rec["allowed"]}
            for peer, rec in ledger.snapshot().items()}


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")  # to its log
    cfg = SwarmConfig.model_validate_json(sys.argv[1])
    ledger = PeerLedger(LedgerConfig.model_validate_json(sys.argv[2])) if len(sys.argv) > 2 else None
    client = SwarmClient.start(cfg, tokenizer_fp=TOKENIZER_FP, vocab_size=VOCAB_SIZE,
                               **({"policy": ledger, "bans": ledger.cfg} if ledger is not None else {}))
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
            elif cmd["op"] == "connections":
                _send(client.connections())
            elif cmd["op"] == "stored":
                _send({"held": client.counters()["stored_records"], "by_origin": client.stored_by_origin()})
            elif cmd["op"] == "exchange":
                _send(_exchange(client, cmd, run_id=cfg.run_id, seed_base=seed_base, ledger=ledger))
            elif cmd["op"] == "ledger":
                _send(_ledger_view(ledger))
            elif cmd["op"] == "ban":
                ledger.charge(cmd["peer"], faults.FORGERY)
                _send(_ledger_view(ledger))
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
