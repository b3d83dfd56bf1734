"""Group bodies travel over libp2p streams from their publisher, never through the DHT.

Protocol `ftis.body.v1`, one body per stream:

    request   32 ASCII bytes: the group id
    response  1 byte status (0 found, 1 missing, 2 busy), then for 0: 8-byte big-endian length + body

The fetcher knows the size from the signed pointer, so it refuses a length that differs
before reading a byte of the body, and checks the sha256 after (`records.check_body`).
Every step has a clock: the header must come within `first_byte_timeout`, each later read
too, and the whole body within `first_byte_timeout + size / min_body_rate` (and
`fetch_timeout`), so a publisher that stalls, dribbles or streams without end costs one
slot for seconds, not forever. The server answers at most `max_streams_per_peer` streams of
one requester at once (the rest: busy), and gives up on a requester that does not read
its body at `min_body_rate`. Streams move 140+ MiB/s on loopback and are not bound by
p2pd's 4 MiB message cap.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter
from typing import Callable

from hivemind.p2p import P2P, PeerID
from hivemind.p2p.p2p_daemon_bindings.datastructures import StreamInfo

from ftis_swarm.swarm.counters import SwarmCounters, ThrottledLog
from ftis_swarm.peers.policy import PeerPolicy
from ftis_swarm.peers import faults

logger = logging.getLogger(__name__)

BODY_PROTOCOL = "ftis.body.v1"
_ID_LEN = 32
_FOUND, _MISSING, _BUSY = b"\x00", b"\x01", b"\x02"
_LEN_BYTES = 8
_CHUNK = 1 << 16
MAX_SERVING_STREAMS = 64
"""Body streams served at once, all requesters together."""


class BodyUnavailable(Exception):
    """The publisher could not be reached, did not have the body, or broke off: worth another try later."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason = reason
        """`body_unreachable`, `body_missing`, `body_broken`, `body_busy` (not counted: the publisher is serving
        others) or `body_stalled` (`peers/faults.py`)."""


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


async def serve_bodies(p2p: P2P, store: BodyStore, *, first_byte_timeout: float, min_rate: int,
                       max_streams_per_peer: int, policy: PeerPolicy, counters: SwarmCounters,
                       on_served: Callable[[int], None] = lambda n: None) -> None:
    """Registers the stream handler that answers peers' body requests from `store`.

    Every way a requester can misbehave ends its stream and counts as its fault:
    `too_many_streams`, `bad_request`, `slow_request` (no id within `first_byte_timeout`),
    `slow_reader` (the body not taken at `min_rate`), `serve_error` (anything unexpected,
    logged with its traceback). `on_served(n)` is called with the size of each body sent.
    """
    active: Counter[str] = Counter()
    log = ThrottledLog(logger, "refused body requests")

    async def handle(info: StreamInfo, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = info.peer_id.to_base58()
        fault = ""
        try:
            if not policy.allows(peer):
                return
            if active[peer] >= max_streams_per_peer or sum(active.values()) >= MAX_SERVING_STREAMS:
                fault = faults.TOO_MANY_STREAMS
                writer.write(_BUSY)
                await asyncio.wait_for(writer.drain(), first_byte_timeout)
                return
            active[peer] += 1
            try:
                fault = await _answer(reader, writer, store, first_byte_timeout=first_byte_timeout,
                                      min_rate=min_rate, on_served=on_served)
            finally:
                active[peer] -= 1
                if active[peer] <= 0:
                    del active[peer]
        except (asyncio.TimeoutError, ConnectionError, asyncio.IncompleteReadError) as exc:
            fault = fault or faults.BROKEN_REQUEST
            logger.debug("body request from %s ended early: %r", peer, exc)
        except Exception:  # nothing a requester sends may take the handler down
            fault = faults.SERVE_ERROR
            logger.exception("serving a body to %s failed", peer)
        finally:
            writer.close()
            if fault:
                counters.fault(peer, Counter({fault: 1}))
                log.note(peer, Counter({fault: 1}))

    await p2p.add_binary_stream_handler(BODY_PROTOCOL, handle)


async def _answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, store: BodyStore, *,
                  first_byte_timeout: float, min_rate: int, on_served: Callable[[int], None]) -> str:
    """Reads one request and writes its answer; the fault of the requester, if any."""
    try:
        raw = await asyncio.wait_for(reader.readexactly(_ID_LEN), first_byte_timeout)
    except asyncio.TimeoutError:
        return faults.SLOW_REQUEST
    try:
        group_id = raw.decode("ascii")
    except UnicodeDecodeError:
        return faults.BAD_REQUEST
    body = store.get(group_id)
    if body is None:
        writer.write(_MISSING)
        await asyncio.wait_for(writer.drain(), first_byte_timeout)
        return ""
    writer.write(_FOUND + len(body).to_bytes(_LEN_BYTES, "big"))
    writer.write(body)
    try:
        await asyncio.wait_for(writer.drain(), first_byte_timeout + len(body) / min_rate)
    except asyncio.TimeoutError:
        return faults.SLOW_READER
    on_served(len(body))
    return ""


async def fetch_body(p2p: P2P, publisher: str, group_id: str, *, size: int, timeout: float,
                     first_byte_timeout: float, min_rate: int) -> bytes:
    """The body of `group_id` from `publisher`, of exactly `size` bytes.

    Raises BodyUnavailable (retry later) or BodyRefused (the answer cannot be right).
    """
    budget = min(timeout, 2 * first_byte_timeout + size / min_rate)
    try:
        return await asyncio.wait_for(_fetch(p2p, publisher, group_id, size, first_byte_timeout), budget)
    except asyncio.TimeoutError:
        raise BodyUnavailable(faults.BODY_STALLED, f"{size} bytes from {publisher} took over {budget:.1f} s") from None


async def _fetch(p2p: P2P, publisher: str, group_id: str, size: int, step: float) -> bytes:
    try:
        _, reader, writer = await asyncio.wait_for(
            p2p.call_binary_stream_handler(PeerID.from_base58(publisher), BODY_PROTOCOL), step)
    except asyncio.TimeoutError:
        raise BodyUnavailable(faults.BODY_UNREACHABLE, f"no stream to {publisher} within {step:.1f} s") from None
    except Exception as exc:  # p2pd reports dial failures as ControlFailure, P2PDaemonError or OSError
        raise BodyUnavailable(faults.BODY_UNREACHABLE, f"cannot open a stream to {publisher}: {exc}") from exc
    try:
        writer.write(group_id.encode("ascii"))
        await asyncio.wait_for(writer.drain(), step)
        status = await asyncio.wait_for(reader.readexactly(1), step)
        if status == _MISSING:
            raise BodyUnavailable(faults.BODY_MISSING, f"{publisher} does not have group {group_id}")
        if status == _BUSY:
            raise BodyUnavailable(faults.BODY_BUSY, f"{publisher} is serving as many streams as it allows")
        if status != _FOUND:
            raise BodyRefused(faults.BODY_BAD_STATUS, f"{publisher} answered with status byte {status!r}")
        length = int.from_bytes(await asyncio.wait_for(reader.readexactly(_LEN_BYTES), step), "big")
        if length != size:
            raise BodyRefused(faults.SIZE_MISMATCH, f"{publisher} offers {length} bytes, the pointer says {size}")
        chunks, got = [], 0
        while got < size:
            chunk = await asyncio.wait_for(reader.read(min(_CHUNK, size - got)), step)
            if not chunk:
                raise BodyUnavailable(faults.BODY_BROKEN, f"the stream from {publisher} ended after {got} of {size} bytes")
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)
    except asyncio.TimeoutError:
        raise BodyUnavailable(faults.BODY_STALLED, f"{publisher} sent nothing for {step:.1f} s") from None
    except (asyncio.IncompleteReadError, ConnectionError) as exc:
        raise BodyUnavailable(faults.BODY_BROKEN, f"stream from {publisher} broke: {exc!r}") from exc
    finally:
        writer.close()

