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
mixed. The check is therefore to be fed the hint counts of every group a publisher's pointer
named (`observe`), which the reader checks against its own verifier where it fetched the body;
the node does not feed it yet (the pointers' hints live in the swarm's reader).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

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

    def __init__(self, *, window: int = 128, z: float = 4.0) -> None:
        self.window = window
        self.z = z
        self._groups: dict[str, deque[tuple[int, int]]] = {}

    def observe(self, publisher: str, samples: int, correct: int) -> None:
        """One group the publisher announced: its `samples` answers, `correct` of them right."""
        if self.window <= 0 or samples < 2:
            return
        self._groups.setdefault(publisher, deque(maxlen=self.window)).append((int(samples), int(correct)))

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
