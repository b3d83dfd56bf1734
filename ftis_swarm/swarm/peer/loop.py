"""`LoopThread`: the asyncio event loop a peer's daemon and DHT node live on, in a daemon thread.

Why not `hivemind.DHT`: its process wrapper sends values through a pipe that breaks on
values over about 16 KiB. Here a `DHTNode` and its `P2P` daemon live in this process, on
an event loop in a daemon thread; the node's main thread (torch training) calls in through
`LoopThread.run`, which waits on a future with a timeout.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from typing import Awaitable, Optional, TypeVar

logger = logging.getLogger(__name__)
T = TypeVar("T")


class LoopThread:
    """An asyncio event loop running in a daemon thread until `stop`."""

    def __init__(self, *, name: str):
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def submit(self, coro: Awaitable[T]) -> "concurrent.futures.Future[T]":
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Awaitable[T], *, timeout: Optional[float]) -> T:
        """Runs `coro` on the loop and waits for it; on timeout it is cancelled and TimeoutError raised."""
        future = self.submit(coro)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"swarm operation did not finish in {timeout:.1f} s") from None

    def stop(self) -> None:
        """Cancels what is left on the loop, stops it and joins the thread (idempotent)."""
        if not self._thread.is_alive():
            return

        async def _cancel_rest() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        try:
            self.run(_cancel_rest(), timeout=5.0)
        except TimeoutError:
            logger.warning("some swarm tasks did not stop within 5 s")
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5.0)
        if not self._thread.is_alive():
            self.loop.close()
