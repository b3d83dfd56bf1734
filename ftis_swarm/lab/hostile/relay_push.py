"""A hostile relayed pair: one NAT'd peer pushes as many bytes as it can through a relay to another.

    python -m ftis_swarm.lab.hostile.relay_push sink '<settings>'
    python -m ftis_swarm.lab.hostile.relay_push push '<settings>'

Both are bare p2pd daemons in `relayed` mode (reach.py's flags: a slot on the `relays`, no
relay service), so the only path between them, each behind its own NAT, is a circuit
through the relay. The worst case for a relay: both ends are the attacker's, so nothing
downstream slows the flow; only the relay's own limits (bytes and seconds per relayed
connection, circuits per peer) bound it. The sink reads and discards whatever arrives on
`SINK_PROTOCOL`, counting bytes per stream. The pusher opens a circuit to the sink and
writes until the relay cuts it, then dials again, for `seconds`; it opens `streams`
streams at once (one relayed connection carries them all).

settings (JSON): {"relays": [multiaddr], "host": ip, "seconds": s, "streams": n,
"sink_peer": peer id, "sink_maddrs": [circuit multiaddr]} (the last three for `push`).
Each writes {"peer_id", "maddrs"} once its relay slot is reserved, then answers stdin:
`{"op": "report"}` -> the sink: {"streams": [bytes per stream, in order of opening]};
the pusher (after its `seconds`): {"circuits": dials that opened a stream, "refused": dials
or streams that failed, "written": bytes the pusher wrote, "errors": {error type: n}}.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections import Counter

from hivemind.p2p import P2P, P2PDaemonError, PeerID
from hivemind.utils.multiaddr import Multiaddr

from ftis_swarm.lab.hostile.gossip import _varint
from ftis_swarm.lab.hostile.peer import _send
from ftis_swarm.swarm.peer import reach

SINK_PROTOCOL = "ftis.hostile.sink"
CHUNK = 64 * 1024
_SLOT_WAIT = 60.0
_STARTS = 3


async def _relayed_daemon(settings: dict) -> P2P:
    flags = reach.daemon_flags("relayed", relay_service=False, max_circuits=0, max_reservations=0, data_limit=0,
                               time_limit=0.0)
    for attempt in range(_STARTS):
        try:
            p2p = await reach.with_flags(P2P, flags).create(
                initial_peers=settings["relays"], host_maddrs=[f"/ip4/{settings['host']}/tcp/0"], dht_mode="client",
                use_auto_relay=True, trusted_relays=settings["relays"], startup_timeout=30.0)
            break
        except P2PDaemonError:  # "failed to connect to bootstrap peers" now and then on a loaded machine
            if attempt == _STARTS - 1:
                raise
            await asyncio.sleep(1.0)
    stop_at = time.monotonic() + _SLOT_WAIT
    while time.monotonic() < stop_at:
        if any(reach.CIRCUIT in m for m in await _maddrs(p2p)):
            return p2p
        await asyncio.sleep(0.2)
    raise RuntimeError(f"no relay slot within {_SLOT_WAIT:.0f} s")


async def _maddrs(p2p: P2P) -> list[str]:
    try:
        return [str(m) for m in await p2p.get_visible_maddrs(latest=True)]
    except ValueError:  # hivemind's "no multiaddrs" while a private node has no relay address yet
        return []


async def _hello(p2p: P2P) -> None:
    maddrs = await _maddrs(p2p)
    _send({"peer_id": p2p.peer_id.to_base58(), "maddrs": [m for m in maddrs if reach.CIRCUIT in m]})


async def _sink(settings: dict) -> None:
    p2p = await _relayed_daemon(settings)
    streams: list[int] = []

    async def handle(_info, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        index = len(streams)
        streams.append(0)
        try:
            while chunk := await reader.read(CHUNK):
                streams[index] += len(chunk)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the relay reset the circuit: what arrived is counted
        finally:
            writer.close()

    await p2p.add_binary_stream_handler(SINK_PROTOCOL, handle)
    await _hello(p2p)
    await _serve(lambda: {"streams": list(streams)})


class _CircuitAddr:
    """`<relay address>/p2p/<relay>/p2p-circuit` in the bytes p2pd reads: python's multiaddr writes a peer id
    as a CID, which go-multiaddr in p2pd refuses ("length greater than remaining number of bytes")."""

    def __init__(self, text: str) -> None:
        relay_part = text.split(reach.CIRCUIT)[0]
        transport, relay = relay_part.rsplit("/p2p/", 1)
        peer = PeerID.from_base58(relay).to_bytes()
        self._bytes = (Multiaddr(transport).to_bytes() + _varint(0x01A5) + _varint(len(peer)) + peer
                       + _varint(0x0122))

    def to_bytes(self) -> bytes:
        return self._bytes


async def _push(settings: dict) -> None:
    p2p = await _relayed_daemon(settings)
    await _hello(p2p)
    sink = PeerID.from_base58(settings["sink_peer"])
    maddrs = [_CircuitAddr(m) for m in settings["sink_maddrs"]]
    stats = {"circuits": 0, "refused": 0, "written": 0}
    errors: Counter[str] = Counter()
    payload = b"\x00" * CHUNK
    stop_at = time.monotonic() + settings["seconds"]

    async def one_stream() -> None:
        _, _, writer = await p2p.call_binary_stream_handler(sink, SINK_PROTOCOL)
        try:
            while time.monotonic() < stop_at:
                writer.write(payload)
                await writer.drain()
                stats["written"] += CHUNK
        finally:
            writer.close()

    while time.monotonic() < stop_at:
        try:
            await asyncio.wait_for(p2p._client.connect(sink, maddrs), 10.0)
            stats["circuits"] += 1
            await asyncio.gather(*(one_stream() for _ in range(settings["streams"])))
        except Exception as exc:  # p2pd reports resets, refusals and limits in several types
            stats["refused"] += 1
            errors[f"{type(exc).__name__}: {str(exc)[:120]}"] += 1
            await asyncio.sleep(0.1)
    report = {**stats, "errors": dict(errors)}
    await _serve(lambda: report)


async def _serve(report) -> None:
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line or json.loads(line)["op"] == "quit":
            return
        _send(report())


def main() -> None:
    role, settings = sys.argv[1], json.loads(sys.argv[2])
    asyncio.run(_sink(settings) if role == "sink" else _push(settings))


if __name__ == "__main__":
    main()
