"""Group bodies travel over libp2p streams from their publisher, never through the DHT.

Protocol `ftis.body.v1`, one body per stream:

    request   32 ASCII bytes: the group id
    response  1 byte status (0 found, 1 missing), then for 0: 8-byte big-endian length + body

The fetcher knows the size from the signed pointer, so it refuses a length that differs
before reading a byte of the body, and checks the sha256 after (`records.check_body`).
Streams move 140+ MiB/s on loopback and are not bound by p2pd's 4 MiB message cap.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Callable

from hivemind.p2p import P2P, PeerID
from hivemind.p2p.p2p_daemon_bindings.datastructures import StreamInfo

logger = logging.getLogger(__name__)

BODY_PROTOCOL = "ftis.body.v1"
_ID_LEN = 32
_FOUND, _MISSING = b"\x00", b"\x01"
_LEN_BYTES = 8


class BodyUnavailable(Exception):
    """The publisher could not be reached, or did not have the body: worth another try later."""


class BodyRefused(Exception):
    """The publisher answered with a body that cannot match its pointer: no retry."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason = reason


class BodyStore:
    """This node's own encoded groups, served until their records expire (thread-safe)."""

    def __init__(self) -> None:
        self._bodies: dict[str, tuple[bytes, float]] = {}
        self._lock = threading.Lock()

    def put(self, group_id: str, body: bytes, *, until: float) -> None:
        with self._lock:
            self._evict(time.time())
            self._bodies[group_id] = (body, until)

    def get(self, group_id: str) -> bytes | None:
        with self._lock:
            self._evict(time.time())
            entry = self._bodies.get(group_id)
        return entry[0] if entry else None

    def __len__(self) -> int:
        with self._lock:
            return len(self._bodies)

    def _evict(self, now: float) -> None:
        for gid in [g for g, (_, until) in self._bodies.items() if until < now]:
            del self._bodies[gid]


async def serve_bodies(p2p: P2P, store: BodyStore, *, request_timeout: float,
                       on_served: Callable[[int], None] = lambda n: None) -> None:
    """Registers the stream handler that answers peers' body requests from `store`.

    `on_served(n)` is called with the size of each body sent (the node counts its upload).
    """

    async def handle(info: StreamInfo, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            raw = await asyncio.wait_for(reader.readexactly(_ID_LEN), request_timeout)
            body = store.get(raw.decode("ascii", errors="replace"))
            if body is None:
                writer.write(_MISSING)
            else:
                writer.write(_FOUND + len(body).to_bytes(_LEN_BYTES, "big"))
                writer.write(body)
            await writer.drain()
            if body is not None:
                on_served(len(body))
        except (asyncio.IncompleteReadError, asyncio.TimeoutError, ConnectionError) as exc:
            logger.debug("body request from %s ended early: %r", info.peer_id, exc)
        finally:
            writer.close()

    await p2p.add_binary_stream_handler(BODY_PROTOCOL, handle)


async def fetch_body(p2p: P2P, publisher: str, group_id: str, *, size: int, timeout: float) -> bytes:
    """The body of `group_id` from `publisher`, of exactly `size` bytes.

    Raises BodyUnavailable (retry later) or BodyRefused (the answer cannot be right).
    """
    try:
        return await asyncio.wait_for(_fetch(p2p, publisher, group_id, size), timeout)
    except asyncio.TimeoutError:
        raise BodyUnavailable(f"no body from {publisher} within {timeout:.1f} s") from None


async def _fetch(p2p: P2P, publisher: str, group_id: str, size: int) -> bytes:
    try:
        _, reader, writer = await p2p.call_binary_stream_handler(PeerID.from_base58(publisher), BODY_PROTOCOL)
    except Exception as exc:  # p2pd reports dial failures as ControlFailure, P2PDaemonError or OSError
        raise BodyUnavailable(f"cannot open a stream to {publisher}: {exc}") from exc
    try:
        writer.write(group_id.encode("ascii"))
        await writer.drain()
        status = await reader.readexactly(1)
        if status == _MISSING:
            raise BodyUnavailable(f"{publisher} does not have group {group_id}")
        if status != _FOUND:
            raise BodyRefused("malformed", f"{publisher} answered with status byte {status!r}")
        length = int.from_bytes(await reader.readexactly(_LEN_BYTES), "big")
        if length != size:
            raise BodyRefused("size_mismatch", f"{publisher} offers {length} bytes, the pointer says {size}")
        return await reader.readexactly(size)
    except (asyncio.IncompleteReadError, ConnectionError) as exc:
        raise BodyUnavailable(f"stream from {publisher} broke: {exc!r}") from exc
    finally:
        writer.close()
