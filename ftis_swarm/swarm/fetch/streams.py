"""Group bodies travel over libp2p streams from their publisher or a holder, never through the DHT.

Protocol `ftis.body.v2`, 1 to `MAX_BODIES_PER_STREAM` bodies per stream:

    request   1 byte n (1..MAX_BODIES_PER_STREAM), then n x 32 ASCII bytes: the group ids
    response  for each id in its order: 1 byte status (0 found, 1 missing, 2 busy), then for 0:
              8-byte big-endian length + body

Why several per stream: opening a p2pd stream costs ~20 ms on loopback while a 48-KiB body
moves in well under 1 ms (140+ MiB/s), and a node chooses several groups of one source at
once (a round's groups arrive in one pointer), so with one body per stream (v1) a chosen
group waited for a stream, not for bytes (`docs/scale.md`). v2 replaces v1 instead of standing
beside it: a one-id request of v2 is v1's exchange plus the count byte, so a v1 handler kept
beside it would serve only peers of an older release, whose records this release refuses
anyway (`records.RECORD_VERSION`); such a peer's fetch fails as `body_unreachable` (back-off,
free). The server's bound is this protocol's, not its `max_bodies_per_stream` setting (what
this node asks for at once): peers of one run with other settings never charge each other.

The fetcher knows each size from the signed pointer, so it refuses a length that differs
before reading a byte of that body, and checks the sha256 after (`records.check_body`). Each
body has its own clock, started when the one before it is in (the first: when the stream is
asked for): its header within `first_byte_timeout`, each later read too, and the whole body
within `2 x first_byte_timeout + size / min_rate` (and `timeout`), so a source that stalls,
dribbles or streams without end costs one slot for seconds, not forever. Each answer is handed
on as soon as it is in; a missing or busy one goes on to the next id, any other failure ends
the stream after its own answer (`ends_stream`), and the ids after it are not answered. A
stream that ends where a status should come is broken, unless the answer before was busy:
then every id left is busy (the server answers a stream past its cap with one busy and closes).

The server reads the whole request within `first_byte_timeout`, answers at most
`max_streams_per_peer` streams of one requester at once (the rest: busy), admits each body
through `UploadCap` on its own (a body refused is answered busy, the next id is answered),
and gives up on a requester that does not read a body at `min_rate`. Streams are not bound
by p2pd's 4 MiB message cap.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from typing import AsyncIterator, Awaitable, Callable, Sequence, TypeVar, Union

from hivemind.p2p import P2P, PeerID
from hivemind.p2p.p2p_daemon_bindings.datastructures import StreamInfo

from ftis_swarm.peers import faults
from ftis_swarm.peers.policy import PeerPolicy
from ftis_swarm.swarm.counters import SwarmCounters, ThrottledLog
from ftis_swarm.swarm.fetch.bodies import BodyStore, UploadCap

logger = logging.getLogger(__name__)

BODY_PROTOCOL = "ftis.body.v2"
MAX_BODIES_PER_STREAM = 32
"""Ids one request may name (what one round pointer names at most); more, or none, is `bad_request`."""
ID_LEN = 32
FOUND, MISSING, BUSY = b"\x00", b"\x01", b"\x02"
_LEN_BYTES = 8
_CHUNK = 1 << 16
MAX_SERVING_STREAMS = 64
"""Body streams served at once, all requesters together."""
T = TypeVar("T")


TASKLESS_TIMEOUTS = hasattr(asyncio, "timeout")
"""Python 3.11+: each read's clock is a deadline on the running task (`asyncio.timeout`), not the task of its
own that `asyncio.wait_for` starts for every read before 3.12 (two more turns of the loop per read, each
a chance for another thread to take the GIL); 3.10 keeps `wait_for`."""


async def _within(awaitable: Awaitable[T], seconds: float) -> T:
    """`awaitable`'s result, or `asyncio.TimeoutError` once `seconds` passed (see `TASKLESS_TIMEOUTS`)."""
    if not TASKLESS_TIMEOUTS:
        return await asyncio.wait_for(awaitable, seconds)
    async with asyncio.timeout(seconds):
        return await awaitable


class BodyUnavailable(Exception):
    """The source could not be reached, did not have the body, or broke off: worth another try later."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason = reason
        """`body_unreachable`, `body_missing`, `body_broken`, `body_busy` (not counted: the source is serving
        others) or `body_stalled` (`peers/faults.py`)."""


class BodyRefused(Exception):
    """The source answered with a body that cannot match its pointer: no retry."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason = reason


Answer = Union[bytes, BodyUnavailable, BodyRefused]


def ends_stream(answer: Union[bytes, BaseException]) -> bool:
    """Whether an answer (or an unexpected error) ends its stream: all but a body, missing and busy; the
    ids after it are not answered."""
    return not isinstance(answer, bytes) and not (
        isinstance(answer, BodyUnavailable) and answer.reason in (faults.BODY_MISSING, faults.BODY_BUSY))


def encode_request(group_ids: Sequence[str]) -> bytes:
    return bytes([len(group_ids)]) + b"".join(g.encode("ascii") for g in group_ids)


async def serve_bodies(p2p: P2P, store: BodyStore, *, first_byte_timeout: float, min_rate: int,
                       max_streams_per_peer: int, policy: PeerPolicy, counters: SwarmCounters,
                       upload: UploadCap | None = None,
                       on_served: Callable[[int, bool], None] = lambda n, held: None) -> None:
    """Registers the stream handler that answers peers' body requests from `store`.

    Every way a requester can misbehave ends its stream and counts as its fault:
    `too_many_streams`, `bad_request` (a count of 0 or over `MAX_BODIES_PER_STREAM`, an id not
    ASCII), `slow_request` (the request not in within `first_byte_timeout`), `slow_reader` (a
    body not taken at `min_rate`), `serve_error` (anything unexpected, logged with its
    traceback). `upload` (None: no cap) bounds what is sent (a refused body is answered busy, no
    one's fault). `on_served(n, held)` is called with the size of each body sent and whether it
    was held for another peer.
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
                writer.write(BUSY)
                await _within(writer.drain(), first_byte_timeout)
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


async def _read_request(reader: asyncio.StreamReader, step: float) -> Union[list[str], str]:
    """The ids of one request, or the requester's fault."""
    try:
        count = (await _within(reader.readexactly(1), step))[0]
        if not 1 <= count <= MAX_BODIES_PER_STREAM:
            return faults.BAD_REQUEST
        raw = await _within(reader.readexactly(count * ID_LEN), step)
    except asyncio.TimeoutError:
        return faults.SLOW_REQUEST
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        return faults.BAD_REQUEST
    return [text[i:i + ID_LEN] for i in range(0, len(text), ID_LEN)]


async def _answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, store: BodyStore, *,
                  first_byte_timeout: float, min_rate: int, upload: UploadCap,
                  on_served: Callable[[int, bool], None]) -> str:
    """Reads one request and answers each of its ids in order; the fault of the requester, if any."""
    group_ids = await _read_request(reader, first_byte_timeout)
    if isinstance(group_ids, str):
        return group_ids
    for group_id in group_ids:
        found = store.lookup(group_id)
        if found is None or not upload.admit(len(found[0]), held=found[1], now=time.monotonic()):
            writer.write(MISSING if found is None else BUSY)
            await _within(writer.drain(), first_byte_timeout)
            continue
        body, held = found
        try:
            writer.write(FOUND + len(body).to_bytes(_LEN_BYTES, "big"))
            writer.write(body)
            try:
                await _within(writer.drain(), first_byte_timeout + len(body) / min_rate)
            except asyncio.TimeoutError:
                return faults.SLOW_READER
        finally:
            upload.release(held)
        on_served(len(body), held)
    return ""


async def fetch_bodies(p2p: P2P, source: str, wanted: Sequence[tuple[str, int]], *, timeout: float,
                       first_byte_timeout: float, min_rate: int) -> AsyncIterator[tuple[int, Answer]]:
    """(index, answer) for each wanted (group id, size) from `source`, in order, each as soon as it is in:
    its body of exactly `size` bytes, or the BodyUnavailable (retry later) / BodyRefused (it cannot be
    right) that stands for it. After an answer that `ends_stream`, nothing more (see the module docstring).
    Use it inside `contextlib.aclosing` so that the stream closes with the consumer."""
    if not 1 <= len(wanted) <= MAX_BODIES_PER_STREAM:
        raise ValueError(f"a request names 1 to {MAX_BODIES_PER_STREAM} bodies, not {len(wanted)}")
    step, stream, busy = first_byte_timeout, [], False
    try:
        for index, (group_id, size) in enumerate(wanted):
            budget = min(timeout, 2 * step + size / min_rate)
            try:
                answer: Answer = await _within(
                    _next_body(p2p, source, wanted, index, stream, step), budget)
            except asyncio.TimeoutError:
                answer = BodyUnavailable(faults.BODY_STALLED, f"{size} bytes from {source} took over {budget:.1f} s")
            except _Closed:  # after a busy: the server's answer past its stream cap (busy, then closed)
                answer = BodyUnavailable(faults.BODY_BUSY if busy else faults.BODY_BROKEN,
                                         f"{source} closed the stream before answering {group_id}")
            except (BodyUnavailable, BodyRefused) as exc:
                answer = exc
            busy = isinstance(answer, BodyUnavailable) and answer.reason == faults.BODY_BUSY
            yield index, answer
            if ends_stream(answer):
                return
    finally:
        if stream:
            stream[1].close()


async def fetch_body(p2p: P2P, source: str, group_id: str, *, size: int, timeout: float,
                     first_byte_timeout: float, min_rate: int) -> bytes:
    """The body of `group_id` from `source` alone on a stream; raises its BodyUnavailable or BodyRefused."""
    async with contextlib.aclosing(fetch_bodies(p2p, source, [(group_id, size)], timeout=timeout,
                                                first_byte_timeout=first_byte_timeout, min_rate=min_rate)) as answers:
        async for _, answer in answers:
            if isinstance(answer, Exception):
                raise answer
            return answer
    raise AssertionError("fetch_bodies answers every id it is not stopped before")


class _Closed(Exception):
    """The stream ended where a status byte should come."""


async def _next_body(p2p: P2P, source: str, wanted: Sequence[tuple[str, int]], index: int, stream: list,
                     step: float) -> bytes:
    """The body of `wanted[index]`; opens the stream and sends the request first when `stream` is empty."""
    if not stream:
        try:
            _, reader, writer = await _within(
                p2p.call_binary_stream_handler(PeerID.from_base58(source), BODY_PROTOCOL), step)
        except asyncio.TimeoutError:
            raise BodyUnavailable(faults.BODY_UNREACHABLE, f"no stream to {source} within {step:.1f} s") from None
        except Exception as exc:  # p2pd reports dial failures as ControlFailure, P2PDaemonError or OSError
            raise BodyUnavailable(faults.BODY_UNREACHABLE, f"cannot open a stream to {source}: {exc}") from exc
        stream += [reader, writer]
    reader, writer = stream
    group_id, size = wanted[index]
    try:
        if index == 0:
            writer.write(encode_request([g for g, _ in wanted]))
            await _within(writer.drain(), step)
        status = await _within(reader.read(1), step)
        if not status:
            raise _Closed()
        if status == MISSING:
            raise BodyUnavailable(faults.BODY_MISSING, f"{source} does not have group {group_id}")
        if status == BUSY:
            raise BodyUnavailable(faults.BODY_BUSY, f"{source} is serving as many streams or bytes as it allows")
        if status != FOUND:
            raise BodyRefused(faults.BODY_BAD_STATUS, f"{source} answered with status byte {status!r}")
        length = int.from_bytes(await _within(reader.readexactly(_LEN_BYTES), step), "big")
        if length != size:
            raise BodyRefused(faults.SIZE_MISMATCH, f"{source} offers {length} bytes, the pointer says {size}")
        chunks, got = [], 0
        while got < size:
            chunk = await _within(reader.read(min(_CHUNK, size - got)), step)
            if not chunk:
                raise BodyUnavailable(faults.BODY_BROKEN, f"the stream from {source} ended after {got} of {size} bytes")
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)
    except asyncio.TimeoutError:
        raise BodyUnavailable(faults.BODY_STALLED, f"{source} sent nothing for {step:.1f} s") from None
    except (asyncio.IncompleteReadError, ConnectionError) as exc:
        raise BodyUnavailable(faults.BODY_BROKEN, f"stream from {source} broke: {exc!r}") from exc
