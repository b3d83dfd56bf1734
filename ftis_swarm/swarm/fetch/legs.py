"""Where a chosen group's publish-to-visible goes at the node that chose it: `Legs`, and the clock that keeps them.

Six unix times per accepted group, each at or after the one before, so that the legs between
them add up to publish-to-visible (publish start, at the publisher, to `accepted`):

    seen      its pointer considered here (pushed by gossip, read from the DHT, or revived by a have)
    chosen    chosen to be fetched (`selection`; without a budget: when seen)
    started   the stream of its last attempt took a slot (`scheduler._start`)
    began     that stream began on its body: the request sent after the dial for the first body
              of a stream, the bodies before it in and settled for a later one
    received  its bytes in (length and count checked by `streams`)
    accepted  checked against its pointer and decoded (`records.check_body`), and accepted

So `stream` (began - started) is the wait behind earlier bodies of the same stream, `body`
(received - began) the body's own transfer (with the dial and request for a stream's first
body), `check` (accepted - received) its check and acceptance. Loop thread only.
"""

from __future__ import annotations

import dataclasses
import time


@dataclasses.dataclass(frozen=True)
class Legs:
    """Unix times of one accepted group's way in at this node (see the module docstring)."""

    seen: float
    chosen: float
    started: float
    began: float
    received: float
    accepted: float


class LegClock:
    """The times of the groups on their way in, until each is accepted (`legs`) or given up on (`forget`)."""

    def __init__(self) -> None:
        self._seen: dict[str, float] = {}
        self._chosen: dict[str, float] = {}
        self._fetched: dict[str, tuple[float, float, float]] = {}  # (started, began, received) of the last attempt

    def seen(self, group_id: str, *, chosen: bool) -> None:
        """Its pointer was considered (the first time since it was last given up on); `chosen` without a budget."""
        now = self._seen.setdefault(group_id, time.time())
        if chosen:
            self._chosen[group_id] = now

    def chosen(self, group_id: str) -> None:
        self._chosen[group_id] = time.time()

    def fetched(self, group_id: str, *, started: float, began: float, received: float) -> None:
        """Its body came in on a stream that took a slot at `started`, began on it at `began`, had it at `received`."""
        self._fetched[group_id] = (started, began, received)

    def legs(self, group_id: str) -> Legs:
        """Its `Legs`, accepted now; a time not noted (a body that came some other way) is the one before it."""
        now = time.time()
        seen = self._seen.pop(group_id, now)
        chosen = self._chosen.pop(group_id, seen)
        started, began, received = self._fetched.pop(group_id, (chosen, chosen, now))
        return Legs(seen=seen, chosen=chosen, started=started, began=began, received=received, accepted=now)

    def forget(self, group_id: str) -> None:
        """Rejected or passed over: its times go (a revived pointer is seen afresh)."""
        for times in (self._seen, self._chosen, self._fetched):
            times.pop(group_id, None)
