"""An honest swarm node in its own process, driven by the tests over JSON lines.

    python tests/swarm/node_proc.py '<SwarmConfig json>'

Writes {"peer_id", "maddrs"} once joined, then answers one line per command:

    {"op": "publish", "items": [...], "tokens": n, "round": r}
        -> [{"ok", "reason", "group_id", "replicas", "gossiped", "body", "started"}]  (round r's groups, one pointer:
           one entry per group, the publish's outcome in each)
    {"op": "gather", "deadline": s, "round": r or null}
        -> {"bodies": [...], "elapsed": s, "arrivals": {group id: unix time accepted},
            "legs": {group id: its `fetch.legs.Legs` as a dict}}
    {"op": "counters"}                                -> the client's counters
    {"op": "connections"}                             -> {peer id: remote multiaddrs of its connections}
    {"op": "budget", "max_tokens": n, ...}            -> {"ok": true}: fetch only what that Budget takes
    {"op": "quit"}                                    -> {"ok": true}, after shutdown

Bodies are base64 of the canonical wire encoding, so the test compares them bit for bit.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import sys
import time

from ftis_swarm.config import SwarmConfig
from ftis_swarm.lab.hostile import floods as hostile_floods
from ftis_swarm.peers.intake import Budget
from ftis_swarm.swarm import SwarmClient
from ftis_swarm.wire import Group, encode_group

TOKENIZER_FP = "test-tokenizer"
VOCAB_SIZE = 1000


def make_group(*, sender: str, run_id: str, item: str, tokens: int) -> Group:
    """A valid 4-completion group whose content depends on (sender, item, tokens)."""
    return hostile_floods.make_group(sender=sender, run_id=run_id, item=item, tokens=tokens,
                                     tokenizer_fp=TOKENIZER_FP, vocab_size=VOCAB_SIZE)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _handle(client: SwarmClient, cfg: SwarmConfig, cmd: dict) -> object:
    if cmd["op"] == "publish":
        groups = [make_group(sender=client.peer_id, run_id=cfg.run_id, item=item, tokens=cmd["tokens"])
                  for item in cmd["items"]]
        started = time.time()
        result = client.publish_round(groups, round=cmd.get("round", 0))
        return [{"ok": result.ok, "reason": result.reason, "group_id": group.group_id, "replicas": result.replicas,
                 "gossiped": result.gossiped, "body": b64(encode_group(group)), "started": started} for group in groups]
    if cmd["op"] == "gather":
        started = time.monotonic()
        groups = client.gather(cmd["deadline"], round=cmd.get("round"))
        return {"bodies": [b64(encode_group(g)) for g in groups], "elapsed": time.monotonic() - started,
                "arrivals": client.arrival_times(),
                "legs": {gid: dataclasses.asdict(legs) for gid, legs in client.visible_legs().items()}}
    if cmd["op"] == "counters":
        return client.counters()
    if cmd["op"] == "connections":
        return client.connections()
    if cmd["op"] == "budget":
        fields = {k: v for k, v in cmd.items() if k != "op"}
        client.set_budget(Budget(**fields, context=1 << 20))
        return {"ok": True}
    raise ValueError(f"unknown op {cmd['op']!r}")


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    cfg = SwarmConfig.model_validate_json(sys.argv[1])
    client = SwarmClient.start(cfg, tokenizer_fp=TOKENIZER_FP, vocab_size=VOCAB_SIZE)
    _send({"peer_id": client.peer_id, "maddrs": client.visible_maddrs})
    try:
        for line in sys.stdin:
            cmd = json.loads(line)
            if cmd["op"] == "quit":
                break
            _send(_handle(client, cfg, cmd))
    finally:
        client.shutdown()
    _send({"ok": True})


def _send(obj: object) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
