"""Forged generation log-probs, caught per peer by a one-sided Hoeffding bound.

A peer that claims lower log-probs than its sampler had makes every weight `pi_theta /
pi_gen` look larger, and the truncation hands its tokens the cap C. For an honest sampler,
at every position and whatever the two models,

    E_{a ~ pi_gen}[ pi_theta(a) / pi_gen(a) ] = sum_a pi_theta(a) <= 1,

so `v = min(exp(x), C)` (x = logp_old - logp_gen) has a mean of at most 1 over a peer's
tokens. The values lie in [0, C] and each token's conditional mean is at most 1, so by
Azuma-Hoeffding the mean of n of them exceeds `1 + C * sqrt(ln(1/delta) / (2n))` with
probability at most delta.

The window: a peer's most recent blocks (one per update it contributed to), the oldest
dropped while the rest still hold `window` tokens; state is (sum, count) per block, small
enough for the checkpoint. A check tests every suffix of the window (the newest block, the
newest two, ..., all of them) against the bound at its own n, each at `delta / B` for B
blocks, so an update's check falsely flags an honest peer with probability at most delta
(1e-6: over 10^4 updates, at most 1e-2). The short suffixes catch a peer that turns to
forging after a long honest stretch, which the whole window's mean would dilute. A flagged
peer's samples are kept out of the update. A forger whose every token sits at the cap C is
caught once its forged tokens outnumber about `ln(B/delta) / 2 * (C / (C - 1))^2` (28 in
one block at delta = 1e-6, C = 2).

Standing (docs/method.md, "Peers without standing"): the same evidence, read the other
way. A peer has standing once the window's upper bound on its mean, `mean + C *
sqrt(ln(B/delta) / (2n))`, is below `1 + margin`: for an honest peer whose mean is 1 that
takes about `ln(B/delta) / 2 * (C / margin)^2` tokens (442 at delta = 1e-6, C = 2, margin
0.25, one block; 91 for a peer whose mean is 0.7). The values are `min(exp(x), C)` from the
log-probs themselves, before the learner caps an unproven peer's weights at 1, so the cap
does not hide what a forger claims. Until then the learner caps its samples' weights at 1,
so no number of short forgeries spread over fresh identities, each under the flag's
28 tokens, buys a weight above 1. Standing is read again at every update: a peer that
forges after earning it loses it once its window's bound rises past `1 + margin`.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from dataclasses import dataclass

import torch

from ftis_swarm.learner.batch import Batch

log = logging.getLogger(__name__)


def hoeffding_bound(n: int, *, C: float, delta: float) -> float:
    """The largest mean of n honest values `min(exp(x), C)` that is not flagged."""
    return math.inf if n <= 0 else 1.0 + C * math.sqrt(math.log(1.0 / delta) / (2.0 * n))


@dataclass(frozen=True)
class PeerStat:
    """A peer's window: the mean of its values, how many tokens, and the bound at that count."""

    mean: float
    tokens: int
    bound: float

    @property
    def flagged(self) -> bool:
        return self.mean > self.bound


class ForgeryDetector:
    """Per peer, the running mean of `min(exp(x), C)` over its last `window` tokens, and the flag."""

    def __init__(self, *, C: float, delta: float, window: int, margin: float = 0.25) -> None:
        if not (C > 1 and 0 < delta < 1 and window >= 1 and margin > 0):
            raise ValueError(f"need C > 1, 0 < delta < 1, window >= 1, margin > 0; got C={C}, delta={delta}, "
                             f"window={window}, margin={margin}")
        self.C, self.delta, self.window, self.margin = C, delta, window, margin
        self._blocks: dict[str, deque[tuple[float, int]]] = {}

    def observe(self, peer: str, total: float, tokens: int) -> PeerStat:
        """Adds one block (`total` = the sum of the peer's values over `tokens` tokens); returns its stat."""
        if tokens < 1 or not math.isfinite(total):
            return self.stat(peer)
        blocks = self._blocks.setdefault(peer, deque())
        blocks.append((float(total), int(tokens)))
        held = sum(n for _, n in blocks)
        while len(blocks) > 1 and held - blocks[0][1] >= self.window:
            held -= blocks.popleft()[1]
        return self.stat(peer)

    def stat(self, peer: str) -> PeerStat:
        """The first suffix of the window (newest blocks first) over its bound, else the whole window."""
        blocks = self._blocks.get(peer, ())
        per_check = self.delta / max(1, len(blocks))
        total, n = 0.0, 0
        stat = PeerStat(mean=0.0, tokens=0, bound=math.inf)
        for block_total, count in reversed(blocks):
            total, n = total + block_total, n + count
            stat = PeerStat(mean=total / n, tokens=n, bound=hoeffding_bound(n, C=self.C, delta=per_check))
            if stat.flagged:
                break
        return stat

    def upper_bound(self, peer: str) -> float:
        """The upper confidence bound on the peer's mean over its whole window (inf with no tokens)."""
        blocks = self._blocks.get(peer, ())
        n = sum(count for _, count in blocks)
        if n < 1:
            return math.inf
        mean = sum(total for total, _ in blocks) / n
        return mean + hoeffding_bound(n, C=self.C, delta=self.delta / len(blocks)) - 1.0

    def has_standing(self, peer: str) -> bool:
        """True when the peer's upper bound is below `1 + margin` (module docstring)."""
        return self.upper_bound(peer) < 1.0 + self.margin

    def tokens(self, peer: str) -> int:
        """Tokens of the peer's window."""
        return sum(count for _, count in self._blocks.get(peer, ()))

    def state(self) -> dict[str, list[list[float]]]:
        """JSON-able state for a checkpoint."""
        return {peer: [[s, n] for s, n in blocks] for peer, blocks in self._blocks.items()}

    def load_state(self, state: dict[str, list[list[float]]]) -> None:
        self._blocks = {peer: deque((float(s), int(n)) for s, n in blocks) for peer, blocks in state.items()}


def screen_batch(detector: ForgeryDetector, batch: Batch, logp_old: torch.Tensor, *, C: float,
                 skip: set[int]) -> tuple[set[str], dict[str, float]]:
    """Feeds each peer's finite tokens in `batch` (rows in `skip` aside) to `detector`, one block a peer.

    Returns the flagged peers and, per peer's source, `forgery_mean@<source>`.
    """
    with torch.no_grad():
        m = batch.mask.bool()  # (N, T)
        finite = (torch.isfinite(logp_old) & torch.isfinite(batch.logp_gen)) | ~m  # (N, T)
        x = (logp_old - torch.where(m, batch.logp_gen, 0.0)).clamp(-20.0, 20.0)  # (N, T)
        v = torch.where(m, torch.exp(x).clamp(max=C), 0.0)  # (N, T)
        rows = batch.filterable & finite.all(dim=-1)  # (N,)
        totals: dict[str, list[float]] = {}
        source: dict[str, int] = {}
        for r in torch.nonzero(rows).flatten().tolist():
            if r in skip:
                continue
            peer = batch.groups[int(batch.group_of[r])].sender
            acc = totals.setdefault(peer, [0.0, 0.0])
            acc[0] += float(v[r].sum())
            acc[1] += float(m[r].sum())
            source[peer] = int(batch.source[r])
    flagged, stats = set(), {}
    for peer, (total, tokens) in totals.items():
        stat = detector.observe(peer, total, int(tokens))
        stats[f"forgery_mean@{source[peer]}"] = stat.mean
        if stat.flagged:
            flagged.add(peer)
            log.warning("peer %s flagged as forging log-probs: mean weight %.3f over %d tokens > %.3f",
                        peer, stat.mean, stat.tokens, stat.bound)
    return flagged, stats
