"""Group bodies travel over libp2p streams from their publisher or a holder, never through the DHT.

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

Holders: a node keeps the bodies it accepted from others (`BodyStore.hold`, at most
`hold_bytes`, each until its pointer can no longer be alive) and serves them through the
same protocol: a body is named by its hash in a signed pointer, so whoever sends it, the
fetcher checks it alike. Serving is bounded by `UploadCap`: with `upload_bytes_per_window`
set, this node serves at most about that many bytes per `upload_window` s, its own bodies
first (one is sent while the window's bytes are below the cap) and held ones at lowest
priority (only within half the cap, and at most `max_holder_serves` at once); past that it
answers busy, which costs the requester a poll's wait and nobody points.
"""

from __future__ import annotations

import asyncio
import logging
import math
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
    """This node's own encoded groups, and others' it holds (at most `hold_bytes` of them), each served
    until its record expires (thread-safe)."""

    def __init__(self, *, hold_bytes: int = 0) -> None:
        self._bodies: dict[str, tuple[bytes, float]] = {}
        self._held: dict[str, tuple[bytes, float]] = {}  # in the order they were accepted
        self._hold_bytes, self._held_bytes = hold_bytes, 0
        self._lock = threading.Lock()

    def put(self, group_id: str, body: bytes, *, until: float) -> None:
        with self._lock:
            self._evict(time.time())
            self._bodies[group_id] = (body, until)

    def hold(self, group_id: str, body: bytes, *, until: float) -> bool:
        """Keeps another peer's accepted body to serve; the oldest held ones go when `hold_bytes` is full.
        False when it does not fit at all (or holding is off)."""
        if len(body) > self._hold_bytes:
            return False
        with self._lock:
            self._evict(time.time())
            if group_id in self._bodies or group_id in self._held:
                return group_id in self._held
            while self._held and self._held_bytes + len(body) > self._hold_bytes:
                self._drop_held(next(iter(self._held)))
            self._held[group_id] = (body, until)
            self._held_bytes += len(body)
            return True

    def get(self, group_id: str) -> bytes | None:
        found = self.lookup(group_id)
        return found[0] if found else None

    def lookup(self, group_id: str) -> tuple[bytes, bool] | None:
        """(body, whether it is held for another peer) or None."""
        with self._lock:
            self._evict(time.time())
            entry = self._bodies.get(group_id)
            if entry is not None:
                return entry[0], False
            entry = self._held.get(group_id)
        return (entry[0], True) if entry else None

    def held(self, limit: int) -> list[str]:
        """The ids of the `limit` most recently held bodies, newest first."""
        with self._lock:
            self._evict(time.time())
            return list(reversed(self._held))[:limit]

    def __len__(self) -> int:
        with self._lock:
            return len(self._bodies)

    def _evict(self, now: float) -> None:
        for gid in [g for g, (_, until) in self._bodies.items() if until < now]:
            del self._bodies[gid]
        for gid in [g for g, (_, until) in self._held.items() if until < now]:
            self._drop_held(gid)

    def _drop_held(self, group_id: str) -> None:
        body, _ = self._held.pop(group_id)
        self._held_bytes -= len(body)


class UploadCap:
    """What this node may still upload in the current window (see the module docstring); loop thread only."""

    HELD_SHARE = 0.5
    """The part of the cap held bodies may fill: own bodies always have the rest."""

    def __init__(self, *, bytes_per_window: int, window: float, max_held_serves: int):
        self._cap, self._window, self._max_held = bytes_per_window, window, max_held_serves
        self._started, self._used, self._held_serving = -math.inf, 0, 0
        self.peak = 0
        """The most bytes admitted in one window so far: at most the cap plus one own body."""

    def admit(self, size: int, *, held: bool, now: float) -> bool:
        """Whether a body of `size` bytes may be sent now; when True, `release(held)` must follow."""
        if now - self._started >= self._window:
            self._started, self._used = now, 0
        if held and (self._held_serving >= self._max_held
                     or (self._cap and self._used + size > self._cap * self.HELD_SHARE)):
            return False
        if self._cap and self._used >= self._cap:
            return False
        self._used += size
        self._held_serving += held
        self.peak = max(self.peak, self._used)
        return True

    def release(self, held: bool) -> None:
        self._held_serving -= held


async def serve_bodies(p2p: P2P, store: BodyStore, *, first_byte_timeout: float, min_rate: int,
                       max_streams_per_peer: int, policy: PeerPolicy, counters: SwarmCounters,
                       upload: UploadCap | None = None,
                       on_served: Callable[[int, bool], None] = lambda n, held: None) -> None:
    """Registers the stream handler that answers peers' body requests from `store`.

    Every way a requester can misbehave ends its stream and counts as its fault:
    `too_many_streams`, `bad_request`, `slow_request` (no id within `first_byte_timeout`),
    `slow_reader` (the body not taken at `min_rate`), `serve_error` (anything unexpected,
    logged with its traceback). `upload` (None: no cap) bounds what is sent (a refused body is
    answered busy, no one's fault). `on_served(n, held)` is called with the size of each body
    sent and whether it was held for another peer.
    """
    active: Counter[str] = Counter()
    upload = upload or UploadCap(bytes_per_window=0, window=1.0, max_held_serves=MAX_SERVING_STREAMS)
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
                                      min_rate=min_rate, upload=upload, on_served=on_served)
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
                  first_byte_timeout: float, min_rate: int, upload: UploadCap,
                  on_served: Callable[[int, bool], None]) -> str:
    """Reads one request and writes its answer; the fault of the requester, if any."""
    try:
        raw = await asyncio.wait_for(reader.readexactly(_ID_LEN), first_byte_timeout)
    except asyncio.TimeoutError:
        return faults.SLOW_REQUEST
    try:
        group_id = raw.decode("ascii")
    except UnicodeDecodeError:
        return faults.BAD_REQUEST
    found = store.lookup(group_id)
    if found is None or not upload.admit(len(found[0]), held=found[1], now=time.monotonic()):
        writer.write(_MISSING if found is None else _BUSY)
        await asyncio.wait_for(writer.drain(), first_byte_timeout)
        return ""
    body, held = found
    try:
        writer.write(_FOUND + len(body).to_bytes(_LEN_BYTES, "big"))
        writer.write(body)
        try:
            await asyncio.wait_for(writer.drain(), first_byte_timeout + len(body) / min_rate)
        except asyncio.TimeoutError:
            return faults.SLOW_READER
    finally:
        upload.release(held)
    on_served(len(body), held)
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

