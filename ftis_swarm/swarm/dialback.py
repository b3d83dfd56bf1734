"""Dial-back: a public peer tells a starting node whether its port is reachable (as Petals probes).

Protocol `ftis.dialback.v1`, one question per stream:

    request   2 bytes, big-endian: the TCP port the asker listens on
    response  1 byte: 1 a TCP connection to that port opened, 0 it did not, 2 cannot say
              (the asker came through a relay, or this peer is busy)

The answering peer dials only the address the asker's stream came from (its observed IP),
never one the asker names, so nobody can point it at a third party; it answers at most
`MAX_PROBES` questions at once and gives each `DIAL_TIMEOUT` seconds.
"""

from __future__ import annotations

import asyncio
import logging

from hivemind.p2p import P2P, PeerID
from hivemind.p2p.p2p_daemon_bindings.datastructures import StreamInfo

logger = logging.getLogger(__name__)

DIALBACK_PROTOCOL = "ftis.dialback.v1"
DIAL_TIMEOUT = 2.0
MAX_PROBES = 8
_REACHED, _NOT_REACHED, _UNKNOWN = b"\x01", b"\x00", b"\x02"


def _observed_ip(info: StreamInfo) -> str:
    """The IP the stream came from, or "" for a relayed stream or an address without one."""
    text = str(info.addr)
    if "/p2p-circuit" in text:
        return ""
    for proto in ("ip4", "ip6"):
        try:
            return info.addr[proto]
        except Exception:  # multiaddr raises its own lookup errors for a missing protocol
            continue
    return ""


async def serve_dialback(p2p: P2P) -> None:
    """Answers dial-back questions on `p2p` (a public node's duty)."""
    slots = asyncio.Semaphore(MAX_PROBES)

    async def handle(info: StreamInfo, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            port = int.from_bytes(await asyncio.wait_for(reader.readexactly(2), DIAL_TIMEOUT), "big")
            ip = _observed_ip(info)
            if not ip or not port or slots.locked():
                writer.write(_UNKNOWN)
            else:
                async with slots:
                    writer.write(_REACHED if await _can_connect(ip, port) else _NOT_REACHED)
            await asyncio.wait_for(writer.drain(), DIAL_TIMEOUT)
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, ConnectionError) as exc:
            logger.debug("dial-back question from %s ended early: %r", info.peer_id, exc)
        finally:
            writer.close()

    await p2p.add_binary_stream_handler(DIALBACK_PROTOCOL, handle)


async def _can_connect(ip: str, port: int) -> bool:
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(ip, port), DIAL_TIMEOUT)
    except (asyncio.TimeoutError, OSError):
        return False
    writer.close()
    return True


async def ask_dialback(p2p: P2P, peer_id: str, port: int) -> bool | None:
    """Whether `peer_id` could open a TCP connection to `port` at this node's address; None: no answer."""
    try:
        _, reader, writer = await asyncio.wait_for(
            p2p.call_binary_stream_handler(PeerID.from_base58(peer_id), DIALBACK_PROTOCOL), DIAL_TIMEOUT)
    except Exception as exc:  # p2pd reports a peer without the protocol or a failed dial in several types
        logger.debug("no dial-back from %s: %r", peer_id, exc)
        return None
    try:
        writer.write(port.to_bytes(2, "big"))
        await asyncio.wait_for(writer.drain(), DIAL_TIMEOUT)
        answer = await asyncio.wait_for(reader.readexactly(1), 3 * DIAL_TIMEOUT)
    except (asyncio.TimeoutError, asyncio.IncompleteReadError, ConnectionError):
        return None
    finally:
        writer.close()
    return {_REACHED: True, _NOT_REACHED: False}.get(answer)
