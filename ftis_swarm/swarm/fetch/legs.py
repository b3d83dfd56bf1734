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
body), `check` (accepted - received) its check and acceptance. The times are each pointer's
record in `pointers.PointerTable`, which hands out the `Legs` when it accepts the body.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Legs:
    """Unix times of one accepted group's way in at this node (see the module docstring)."""

    seen: float
    chosen: float
    started: float
    began: float
    received: float
    accepted: float
