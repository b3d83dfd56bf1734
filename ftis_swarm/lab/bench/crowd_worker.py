"""Crowd identities of `bench hostile --phase crowd`, each a real swarm node: `python -m ftis_swarm.lab.bench.crowd_worker '<json>'`.

Settings: {"cfg": SwarmConfig as JSON, "hosts": [the address each identity listens on: one
origin each], "tokenizer_fp", "vocab_size"}. Each identity is a real `SwarmClient` with its
own p2pd, DHT peer, RSA key and puzzle (the run's `cfg.puzzle`), all joining through
`cfg.transport.peers`. It writes {"peer_ids", "maddrs"} once they joined, then answers JSON lines:

    {"op": "publish", "round": r, "bodies": [[base64 encoded group, ...] per identity]}
        as `scale_worker`'s: each identity with bodies publishes them as its round r, all at once;
        answers {"ok": [publish ok or null per identity], "reasons": [...]}
    {"op": "stall", "on": bool}
        while on, every body request to any identity of this process is accepted and never
        answered (the stream stays open, nothing is written: a body that stalls after its pointer
        was announced); the DHT and gossip go on as before. Answers {"ok": true}
    {"op": "quit"}  leaves the swarm and answers {"ok": true}
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

from ftis_swarm.config import SwarmConfig
from ftis_swarm.lab.bench.scale_worker import UsedPolicy, _publish
from ftis_swarm.lab.bench.swarm_worker import _send
from ftis_swarm.swarm import SwarmClient
from ftis_swarm.swarm.fetch import streams

STALL_SECONDS = 600.0
"""How long a stalled body request is held open (longer than any gather waits)."""

_stall = threading.Event()
_answer = streams._answer


async def _stalling_answer(reader, writer, store, **kwargs):  # the body server's one answer, stalled while on
    if _stall.is_set():
        await asyncio.sleep(STALL_SECONDS)
        return ""
    return await _answer(reader, writer, store, **kwargs)


def main() -> None:
    settings = json.loads(sys.argv[1])
    cfg = SwarmConfig.model_validate_json(settings["cfg"])
    hosts = settings["hosts"]
    streams._answer = _stalling_answer  # `serve_bodies`' handler looks it up by name at each request
    with ThreadPoolExecutor(max_workers=len(hosts)) as pool:
        clients = list(pool.map(lambda h: SwarmClient.start(cfg.replace(transport={"host": h}),
                                                            tokenizer_fp=settings["tokenizer_fp"],
                                                            vocab_size=settings["vocab_size"], policy=UsedPolicy()),
                                hosts))
    _send({"peer_id": clients[0].peer_id, "peer_ids": [c.peer_id for c in clients],
           "maddrs": clients[0].visible_maddrs})
    try:
        for line in sys.stdin:
            cmd = json.loads(line)
            if cmd["op"] == "quit":
                break
            if cmd["op"] == "publish":
                _send(_publish(clients, cmd, cfg))
            elif cmd["op"] == "stall":
                (_stall.set if cmd["on"] else _stall.clear)()
                _send({"ok": True})
    finally:
        with ThreadPoolExecutor(max_workers=len(clients)) as pool:
            list(pool.map(lambda c: c.shutdown(), clients))
    _send({"ok": True})


if __name__ == "__main__":
    main()
