"""Publishers that publish only the groups their own reward found mixed: a counted check, never a ban.

A publisher that samples groups and publishes only those whose answers are part right and
part wrong gives a biased sample of its policy: its groups' pass rate is pulled toward one
half, and, where it re-samples an item until the group is mixed, each item's gradient is
scaled by `1 / P(mixed | item)`, so the items its policy finds very hard or very easy weigh
far more than they would in an honest sample (docs/method.md, "Known tricks").

An honest publisher's groups are independent draws: with pass rate `p`, a group of `G` is mixed
with probability `q(p, G) = 1 - p^G - (1-p)^G`, and over items of differing difficulty the share
is lower still (`x^G` is convex: Jensen). So, over a publisher's last `window` groups, with `p`
the pass rate measured over them, the number of mixed groups `m` is compared with its expectation
`e = sum_g q(p, G_g)` and variance `v = sum_g q (1 - q)`: the publisher is **flagged** while
`m > e + z * sqrt(v)` over at least `MIN_GROUPS` groups. A flag is to be counted and to withhold
the credit of the publisher's groups while it lasts, never to ban: a share is evidence about a
sample, not a signed fault.

The groups observed must be every group the publisher announced, not those a receiver chose:
a receiver that fetches mixed groups first (the selection by the signed hint, node/hints.py)
drops only groups with no gradient, which changes no update, yet it makes what arrives mostly
mixed. The node therefore feeds it the hint of every group a screened pointer named (the
swarm's `drain_announced`, once a round), which the reader checks against its own verifier
where it fetched the body (`hint_contradicted`), and withholds the credit of a flagged
publisher's groups in that round's update (`PeerLedger.withhold_credit`; the round's
`publishers_cherry_flagged`). Publishers are keys a peer names: at most `max_publishers` are
remembered, the least recently heard forgotten first. The windows are part of a checkpoint.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Any, Iterable

MIN_GROUPS = 16
"""Fewer groups than this in a publisher's window flag nothing."""


@dataclass(frozen=True)
class MixedShare:
    """One publisher's window: groups, mixed groups, their expectation and standard deviation under its pass rate."""

    groups: int
    mixed: int
    expected: float
    sd: float

    def excess(self) -> float:
        """Standard deviations by which `mixed` exceeds `expected` (0 when it does not)."""
        if self.mixed <= self.expected:
            return 0.0
        return math.inf if self.sd == 0 else (self.mixed - self.expected) / self.sd


def mixed_probability(p: float, G: int) -> float:
    """`q(p, G)`: the chance that G independent answers with pass rate p are neither all right nor all wrong."""
    return max(0.0, 1.0 - p**G - (1.0 - p) ** G)


class MixedShareCheck:
    """Per publisher, its last `window` groups as (samples, correct); `flagged` when too many are mixed."""

    def __init__(self, *, window: int = 128, z: float = 4.0, max_publishers: int = 4096) -> None:
        self.window = window
        self.z = z
        self.max_publishers = max_publishers
        self._groups: OrderedDict[str, deque[tuple[int, int]]] = OrderedDict()

    def observe(self, publisher: str, samples: int, correct: int) -> None:
        """One group the publisher announced: its `samples` answers, `correct` of them right."""
        if self.window <= 0 or samples < 2 or not 0 <= correct <= samples:
            return
        groups = self._groups.get(publisher)
        if groups is None:
            groups = self._groups[publisher] = deque(maxlen=self.window)
            while len(self._groups) > self.max_publishers:
                self._groups.popitem(last=False)
        self._groups.move_to_end(publisher)
        groups.append((int(samples), int(correct)))

    def note(self, announced: Iterable[tuple[str, int, int]]) -> list[str]:
        """Observes `(publisher, samples, correct)` of each announced group; returns the flagged publishers
        among them."""
        heard = set()
        for publisher, samples, correct in announced:
            self.observe(publisher, samples, correct)
            heard.add(publisher)
        return sorted(p for p in heard if self.flagged(p))

    def state(self) -> dict[str, Any]:
        """For a checkpoint: each publisher's window, least recently heard first."""
        return {p: [list(g) for g in groups] for p, groups in self._groups.items()}

    def load_state(self, state: dict[str, Any]) -> None:
        self._groups = OrderedDict()
        for publisher, groups in state.items():
            for samples, correct in groups:
                self.observe(str(publisher), int(samples), int(correct))

    def share(self, publisher: str) -> MixedShare:
        """The publisher's window, measured."""
        groups = list(self._groups.get(publisher, ()))
        total = sum(G for G, _ in groups)
        p = sum(k for _, k in groups) / total if total else 0.0
        qs = [mixed_probability(p, G) for G, _ in groups]
        return MixedShare(groups=len(groups), mixed=sum(0 < k < G for G, k in groups), expected=sum(qs),
                          sd=math.sqrt(sum(q * (1.0 - q) for q in qs)))

    def flagged(self, publisher: str) -> bool:
        """Whether the publisher's window holds more mixed groups than its pass rate explains (module docstring)."""
        s = self.share(publisher)
        return s.groups >= MIN_GROUPS and s.excess() > self.z

    def flagged_publishers(self) -> list[str]:
        return sorted(p for p in self._groups if self.flagged(p))
