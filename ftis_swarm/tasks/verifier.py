"""The verifier pool: checks run in worker processes with a hard wall-clock limit per answer.

Why processes, and why not `concurrent.futures`:

- math-verify times itself out with `signal.alarm`, which works only in a main thread; the
  learner scores from its own thread. In a worker process the check runs in that
  process's main thread, so math-verify's own alarm stays armed as a first line.
- The alarm interrupts Python code only between bytecodes; a check stuck in C code that
  never returns to the interpreter, or one that outlives several alarms (math-verify arms
  one per parse and per comparison), still has to end. A hung answer must cost at most
  its timeout, so the pool kills that worker and starts a replacement;
  `ProcessPoolExecutor` can neither time out nor kill one task, and a dead worker breaks
  the whole executor.

Each call checks its workers out of the shared idle set, so several threads may score at
once. Workers are fresh interpreters (never a fork of the node, which has torch and network
threads), started lazily on first use; they import and warm math-verify before they report
ready (so start-up never counts against an answer's timeout), and stop at interpreter exit
or when the parent's end of their socket closes.
"""

from __future__ import annotations

import atexit
import importlib
import logging
import multiprocessing
import os
import pickle
import queue
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any, Callable, Literal, Sequence

logger = logging.getLogger(__name__)

_START_TIMEOUT_S = 120.0
"""A worker that has not imported its modules after this long is broken (not merely slow)."""


@dataclass(frozen=True)
class Outcome:
    """What became of one call: its return value, an exception's text, a timeout or a dead worker."""

    status: Literal["ok", "error", "timeout", "died"]
    value: Any = None


class VerifierUnavailable(RuntimeError):
    """A worker process could not start at all (e.g. math-verify fails to import)."""


def default_workers() -> int:
    """Half the cores, 1 to 4: checks take milliseconds and the cores belong to the model."""
    return max(1, min(4, (os.cpu_count() or 2) // 2))


def serve(fd: int) -> None:
    """Entry point of a worker process: serve jobs on the inherited socket `fd`."""
    _worker_main(Connection(fd))


def _worker_main(conn: Connection) -> None:
    """Worker loop: take `(sys.path, preload)`, run the preload, say ready, then run
    `(fn, args)` jobs until told to stop or the parent goes away.

    Each preload entry is a module to import or `module:function` to call without arguments.
    """
    logging.getLogger().addHandler(logging.NullHandler())  # the parent logs outcomes
    path, preload = conn.recv()
    sys.path[:] = path
    for entry in preload:
        module, _, function = entry.partition(":")
        loaded = importlib.import_module(module)
        if function:
            getattr(loaded, function)()
    conn.send(("ready", None))
    while True:
        try:
            raw = conn.recv_bytes()
        except EOFError:
            return
        try:
            job = pickle.loads(raw)
            if job is None:
                return
            fn, args = job
            reply: tuple[str, Any] = ("ok", fn(*args))
        except Exception as exc:  # reported to the caller as this answer's outcome
            reply = ("error", f"{type(exc).__name__}: {exc}")
        conn.send(reply)


class _Worker:
    """One worker: a fresh `python` running `serve(fd)`, talking over a socket pair.

    A plain subprocess rather than `multiprocessing.Process`: spawn re-runs the parent's
    main script in the child, which breaks any script without an `if __name__` guard.
    """

    def __init__(self, preload: tuple[str, ...]) -> None:
        self.conn, child = multiprocessing.Pipe(duplex=True)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", f"import sys; from {__name__} import serve; serve(int(sys.argv[1]))", str(child.fileno())],
            pass_fds=(child.fileno(),),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )
        child.close()
        self.conn.send((list(sys.path), preload))
        self.ready = False
        self.started = time.monotonic()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, *, kill: bool) -> None:
        if not kill:
            try:
                self.conn.send_bytes(pickle.dumps(None))
                self.proc.wait(timeout=2.0)
            except (OSError, subprocess.TimeoutExpired):
                pass
        if self.alive():
            self.proc.kill()
            self.proc.wait(timeout=5.0)
        self.conn.close()


class VerifierPool:
    """A fixed number of worker processes, started on demand, replaced when one hangs or dies."""

    def __init__(self, *, workers: int | None = None, preload: Sequence[str] = ()) -> None:
        self.size = workers if workers is not None else default_workers()
        if self.size < 1:
            raise ValueError(f"a verifier pool needs at least one worker, got {self.size}")
        self._preload = tuple(preload)
        self._idle: queue.Queue[_Worker] = queue.Queue()
        self._lock = threading.Lock()
        self._created = 0
        self._closed = False
        self._failed_starts = 0
        self.pid = os.getpid()
        """The process that owns the workers: a forked child must not talk to them."""
        self.replaced = 0
        """Workers killed for a timeout or found dead, and replaced (for metrics and tests)."""

    def run(self, fn: Callable[..., Any], args_list: Sequence[tuple], *, timeout: float) -> list[Outcome]:
        """Call `fn(*args)` in the workers for each args tuple; each call gets `timeout` seconds.

        `fn` must be importable by name (it is pickled by reference). Results come back in
        order. A call over its time gets `Outcome("timeout")` and its worker is replaced.
        """
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        if not args_list:
            return []
        results: list[Outcome | None] = [None] * len(args_list)
        pending = deque(range(len(args_list)))
        mine = [self._checkout(block=True)]
        while len(mine) < len(args_list) and (extra := self._checkout(block=False)) is not None:
            mine.append(extra)
        running: dict[int, tuple[int, float]] = {}  # slot in `mine` -> (job index, deadline)
        try:
            while pending or running:
                for slot, worker in enumerate(mine):
                    if worker.ready and slot not in running and pending:
                        job = pending.popleft()
                        try:
                            worker.conn.send_bytes(pickle.dumps((fn, args_list[job])))
                        except OSError:  # the worker died while idle: the job waits for its successor
                            logger.warning("verifier worker found dead (exit code %s)", worker.proc.poll())
                            pending.appendleft(job)
                            mine[slot] = self._replace(worker)
                            continue
                        running[slot] = (job, time.monotonic() + timeout)
                self._collect(mine, running, results, timeout=self._next_wait(mine, running))
                now = time.monotonic()
                for slot, (job, deadline) in list(running.items()):
                    if now >= deadline:
                        logger.warning("verifier call %d exceeded %.1fs; replacing its worker", job, timeout)
                        results[job] = Outcome("timeout")
                        del running[slot]
                        mine[slot] = self._replace(mine[slot])
        except BaseException:
            for slot in running:
                mine[slot] = self._replace(mine[slot])
            raise
        finally:
            for worker in mine:
                self._checkin(worker)
        return [r if r is not None else Outcome("died") for r in results]

    def _next_wait(self, mine: list[_Worker], running: dict[int, tuple[int, float]]) -> float:
        now = time.monotonic()
        deadlines = [deadline for _, deadline in running.values()]
        deadlines += [w.started + _START_TIMEOUT_S for w in mine if not w.ready]
        return max(0.0, min(deadlines) - now) if deadlines else 0.0

    def _collect(self, mine: list[_Worker], running: dict, results: list, *, timeout: float) -> None:
        """Read every reply that arrives within `timeout`; replace workers found dead."""
        by_conn = {w.conn: slot for slot, w in enumerate(mine) if slot in running or not w.ready}
        for conn in wait(list(by_conn), timeout=timeout):
            slot = by_conn[conn]
            worker = mine[slot]
            try:
                status, value = worker.conn.recv()
            except (EOFError, OSError):
                if not worker.ready:
                    self._start_failed(worker)
                    mine[slot] = self._replace(worker)
                    continue
                job, _ = running.pop(slot)
                results[job] = Outcome("died")
                mine[slot] = self._replace(worker)
                logger.warning("verifier worker died (exit code %s) on call %d", worker.proc.returncode, job)
                continue
            if status == "ready":
                worker.ready = True
                self._failed_starts = 0
            else:
                job, _ = running.pop(slot)
                results[job] = Outcome(status, value)
        for worker in mine:
            if not worker.ready and time.monotonic() - worker.started > _START_TIMEOUT_S:
                raise VerifierUnavailable(f"a verifier worker did not start within {_START_TIMEOUT_S:.0f}s")

    def _start_failed(self, worker: _Worker) -> None:
        """A worker ended before it was ready: killed from outside (replace it) or broken (raise)."""
        code = worker.proc.wait(timeout=5.0)
        with self._lock:
            self._failed_starts += 1
            failed = self._failed_starts
        if code >= 0 or failed > 2 * self.size:
            raise VerifierUnavailable(f"verifier workers end before they are ready (last exit code {code})")
        logger.warning("verifier worker killed (signal %d) before it was ready", -code)

    def _checkout(self, *, block: bool) -> _Worker | None:
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            pass
        with self._lock:
            if self._closed:
                raise RuntimeError("the verifier pool is closed")
            if self._created < self.size:
                self._created += 1
                return _Worker(self._preload)
        return self._idle.get() if block else None

    def _checkin(self, worker: _Worker) -> None:
        with self._lock:
            keep = not self._closed and worker.alive()
            if not keep:
                self._created -= 1
        if keep:
            self._idle.put(worker)
        else:
            worker.stop(kill=True)

    def _replace(self, worker: _Worker) -> _Worker:
        worker.stop(kill=True)
        with self._lock:
            self.replaced += 1
        return _Worker(self._preload)

    def close(self) -> None:
        """Stop idle workers now; workers busy in a call stop when that call returns them."""
        if os.getpid() != self.pid:
            return
        with self._lock:
            self._closed = True
        while True:
            try:
                self._idle.get_nowait().stop(kill=False)
            except queue.Empty:
                return


_shared: VerifierPool | None = None
_shared_lock = threading.Lock()


def shared_pool() -> VerifierPool:
    """The process-wide pool every task scores through, started on first use, closed at exit.

    A forked child gets a pool of its own: the parent's workers answer only the parent.
    """
    global _shared
    with _shared_lock:
        if _shared is None or _shared.pid != os.getpid():
            _shared = VerifierPool(preload=("ftis_swarm.tasks.mathcheck:warm_up",))
            atexit.register(_shared.close)
        return _shared
