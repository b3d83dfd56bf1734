"""Forged log-probs, caught per peer by a one-sided Hoeffding bound; standing, read from the same evidence.

Owns `ForgeryDetector`: per identity a window of blocks, one an update (the sum of its values
`v = min(exp(x), C)`, x = logp_old - logp_gen, taken before any cap; its tokens; its tokens whose
`exp(x)` lies in [1/C, C]), the oldest dropped while the rest hold `window` tokens; the same blocks
pooled per network origin; the update count (`begin_update`) and when each standing began
(`standing_age`). `screen_batch` feeds it one update's batch, once (each peer's block: `peer_blocks`).
Imports: `core.chunks`, `learner.batch`, torch (the learner's layer: never rollout, swarm or node).

- The flag: some suffix of a window (the newest block, the newest two, ..., all B) has a mean
  above `hoeffding_bound` at its own n and `delta / B`; the learner withholds a flagged peer's samples.
- Standing (`has_standing`): the window's upper bound below `1 + margin`, its overlap fraction at
  least `overlap` and its newest block's at least `overlap_block`; read again at every update, so a
  window or a block that fails ends it at once.
- Pooled per origin: each block also joins its origin's pool (`origin_of`; one pooled block an
  update). An identity has standing only while that pool passes the same tests and is not flagged;
  a pooled flag withholds and charges nothing. Origins in `UNPOOLED` and a peer's own id are no
  pool; a peer of no origin known now keeps the pool its last block went to.
- `state` / `load_state` carry all of it through a checkpoint; an older checkpoint's (sum, tokens)
  blocks load with their overlap unknown: evidence for the bound, not of overlap.

Why, the derivation and the figures: docs/node.md, "Standing"; docs/method.md, "Peers without
standing" and "Untrusted groups".
"""

from __future__ import annotations

import logging
import math
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional

import torch

from ftis_swarm.core.chunks import chunked_token_log_ratios
from ftis_swarm.learner.batch import Batch

log = logging.getLogger(__name__)

Block = tuple[float, int, Optional[int]]
"""One update's evidence of a peer: the sum of its values v, its tokens, and its tokens with `exp(x)` in
[1/C, C] (None: unknown, a block from a checkpoint written before overlap was counted)."""

UNPOOLED = frozenset({"relayed"})
"""Origins whose identities are judged alone: every peer reached through a relay shares the one origin
`relayed` (`swarm.origins.RELAYED`; its relay's address, not its own), which many honest peers share."""


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
    """Per peer, the running mean of `min(exp(x), C)` and the overlap fraction over its last `window` tokens;
    the flag, and standing (module docstring). `overlap` is q over the window, `overlap_block` over the newest
    block; both 0 (the default) leave the overlap test out.

    `origin_of` (the transport's; None: no pooling) names each peer's network origin: the same blocks are
    pooled per origin as well (one block an update, all of the origin's identities' tokens in it), and an
    identity has standing only while its origin's pooled window passes the same tests and is not flagged
    (module docstring, "Pooled per origin"). Origins in `UNPOOLED`, None, and a peer's own id are no pool."""

    def __init__(self, *, C: float, delta: float, window: int, margin: float = 0.25, overlap: float = 0.0,
                 overlap_block: float = 0.0, origin_of: Optional[Callable[[str], Optional[str]]] = None) -> None:
        if not (C > 1 and 0 < delta < 1 and window >= 1 and margin > 0 and 0 <= overlap <= 1
                and 0 <= overlap_block <= 1):
            raise ValueError(f"need C > 1, 0 < delta < 1, window >= 1, margin > 0, overlap and overlap_block in "
                             f"[0, 1]; got C={C}, delta={delta}, window={window}, margin={margin}, overlap={overlap}, "
                             f"overlap_block={overlap_block}")
        self.C, self.delta, self.window, self.margin = C, delta, window, margin
        self.overlap, self.overlap_block = overlap, overlap_block
        self.origin_of = origin_of
        """Peer id -> its network origin (the node sets the transport's); None: every peer judged alone."""
        self._blocks: dict[str, deque[Block]] = {}
        self._since: dict[str, int] = {}
        self._pools: dict[str, deque[Block]] = {}
        """Per pooled origin, its identities' blocks: one an update (`_pooled_at`), trimmed as a peer's are."""
        self._pooled_at: dict[str, int] = {}
        """Per pooled origin, the update its newest block belongs to (later blocks of that update join it)."""
        self._origin: dict[str, str] = {}
        """Per peer, the pooled origin its newest block went to (kept when the transport forgets the peer)."""
        self.updates = 0
        """Updates screened so far (`begin_update`): the clock of `standing_age`."""

    def begin_update(self) -> None:
        """Marks the start of one update's screening (`screen_batch` calls it once, before it observes)."""
        self.updates += 1

    def pool_of(self, peer: str) -> str | None:
        """The pooled origin whose window the peer's standing also needs: its origin now (`origin_of`), else
        the one its newest block went to; None when it is judged alone (no origin, a relayed one, its own id)."""
        origin = self.origin_of(peer) if self.origin_of is not None else None
        if origin is None or origin in UNPOOLED or origin == peer:
            return self._origin.get(peer) if origin is None else None
        return origin

    def observe(self, peer: str, total: float, tokens: int, overlap: int | None = None) -> PeerStat:
        """Adds one block (`total` = the sum of the peer's values over `tokens` tokens, `overlap` of them with
        `exp(x)` in [1/C, C]) to the peer's window and to its origin's pool; returns the peer's stat. Standing
        is read again, for every identity of the origin: it may begin or end here."""
        if tokens < 1 or not math.isfinite(total) or (overlap is not None and not 0 <= overlap <= tokens):
            return self.stat(peer)
        block = (float(total), int(tokens), None if overlap is None else int(overlap))
        self._append(self._blocks.setdefault(peer, deque()), block)
        origin = self.pool_of(peer)
        if origin is None:
            self._origin.pop(peer, None)
            self._track(peer)
            return self.stat(peer)
        self._origin[peer] = origin
        pool = self._pools.setdefault(origin, deque())
        if pool and self._pooled_at.get(origin) == self.updates:  # this update's block of the origin grows
            s, n, k = pool.pop()
            block = (s + block[0], n + block[1], None if k is None or block[2] is None else k + block[2])
        self._pooled_at[origin] = self.updates
        self._append(pool, block)
        for member in self.members(origin):
            self._track(member)
        return self.stat(peer)

    def _append(self, blocks: deque[Block], block: Block) -> None:
        blocks.append(block)
        held = sum(b[1] for b in blocks)
        while len(blocks) > 1 and held - blocks[0][1] >= self.window:
            held -= blocks.popleft()[1]

    def members(self, origin: str) -> list[str]:
        """The identities whose newest block went to `origin`'s pool."""
        return [peer for peer, o in self._origin.items() if o == origin]

    def stat(self, peer: str) -> PeerStat:
        """The first suffix of the peer's window (newest blocks first) over its bound, else the whole window."""
        return self._stat(self._blocks.get(peer, ()))

    def pool_stat(self, origin: str) -> PeerStat:
        """`stat` of an origin's pooled window."""
        return self._stat(self._pools.get(origin, ()))

    def pool_flagged(self, peer: str) -> bool:
        """Whether the peer's origin's pooled window is flagged (False when it is judged alone)."""
        origin = self.pool_of(peer)
        return origin is not None and self.pool_stat(origin).flagged

    def _stat(self, blocks: Any) -> PeerStat:
        per_check = self.delta / max(1, len(blocks))
        total, n = 0.0, 0
        stat = PeerStat(mean=0.0, tokens=0, bound=math.inf)
        for block_total, count, _ in reversed(blocks):
            total, n = total + block_total, n + count
            stat = PeerStat(mean=total / n, tokens=n, bound=hoeffding_bound(n, C=self.C, delta=per_check))
            if stat.flagged:
                break
        return stat

    def upper_bound(self, peer: str) -> float:
        """The upper confidence bound on the peer's mean over its whole window (inf with no tokens)."""
        return self._upper_bound(self._blocks.get(peer, ()))

    def _upper_bound(self, blocks: Any) -> float:
        n = sum(b[1] for b in blocks)
        if n < 1:
            return math.inf
        mean = sum(b[0] for b in blocks) / n
        return mean + hoeffding_bound(n, C=self.C, delta=self.delta / len(blocks)) - 1.0

    def overlap_fraction(self, peer: str, *, newest: bool = False) -> float | None:
        """The fraction of the peer's tokens with `exp(x)` in [1/C, C], over the window's blocks whose overlap is
        known (`newest`: over the newest block alone); None when none is known."""
        return self._overlap_fraction(self._blocks.get(peer, ()), newest=newest)

    @staticmethod
    def _overlap_fraction(blocks: Any, *, newest: bool) -> float | None:
        blocks = list(blocks)[-1:] if newest else blocks
        known = [(n, k) for _, n, k in blocks if k is not None]
        return sum(k for _, k in known) / sum(n for n, _ in known) if known else None

    def has_standing(self, peer: str) -> bool:
        """True when the peer's window passes the tests (its upper bound below `1 + margin`, its overlap fraction
        at least `overlap`, its newest block's at least `overlap_block`; module docstring) and so does its
        origin's pooled window, which is not flagged either."""
        if not self._passes(self._blocks.get(peer, ())):
            return False
        origin = self.pool_of(peer)
        if origin is None:
            return True
        pool = self._pools.get(origin, ())
        return self._passes(pool) and not self._stat(pool).flagged

    def _passes(self, blocks: Any) -> bool:
        if not self._upper_bound(blocks) < 1.0 + self.margin:
            return False
        if self.overlap <= 0 and self.overlap_block <= 0:
            return True
        window, newest = self._overlap_fraction(blocks, newest=False), self._overlap_fraction(blocks, newest=True)
        return (window is not None and newest is not None and window >= self.overlap
                and newest >= self.overlap_block)

    def standing_age(self, peer: str) -> int | None:
        """Updates since the peer's present standing began (1 in the update after the one that earned it);
        None without standing."""
        since = self._since.get(peer)
        return None if since is None else self.updates - since

    def tokens(self, peer: str) -> int:
        """Tokens of the peer's window."""
        return sum(b[1] for b in self._blocks.get(peer, ()))

    def _track(self, peer: str) -> None:
        if self.has_standing(peer):
            self._since.setdefault(peer, self.updates)
        else:
            self._since.pop(peer, None)

    def state(self) -> dict[str, Any]:
        """JSON-able state for a checkpoint: the blocks (sum, tokens, overlap), when each standing began, the clock,
        and the pools: each origin's blocks, the update of its newest, and each peer's origin."""
        return {"version": 3, "updates": self.updates, "standing_since": dict(self._since),
                "blocks": {peer: [list(b) for b in blocks] for peer, blocks in self._blocks.items()},
                "pools": {origin: [list(b) for b in blocks] for origin, blocks in self._pools.items()},
                "pooled_at": dict(self._pooled_at), "origins": dict(self._origin)}

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Restores `state()`; also a checkpoint written before overlap was counted (`{peer: [[sum, tokens],
        ...]}`: overlap unknown, and every standing read as beginning now), and one written before pooling
        (no pools: they fill again from the next update)."""
        legacy = not isinstance(state.get("blocks"), Mapping)
        blocks = state if legacy else state["blocks"]
        self._blocks = {peer: _blocks(rows) for peer, rows in blocks.items()}
        self._pools = {} if legacy else {origin: _blocks(rows) for origin, rows in state.get("pools", {}).items()}
        self._pooled_at = {} if legacy else {o: int(u) for o, u in state.get("pooled_at", {}).items()}
        self._origin = {} if legacy else {str(p): str(o) for p, o in state.get("origins", {}).items()}
        self.updates = 0 if legacy else int(state.get("updates", 0))
        since = {} if legacy else state.get("standing_since", {})
        self._since = {peer: int(u) for peer, u in since.items()}
        for peer in set(self._blocks) | set(self._since):  # read again under this detector's tests
            self._track(peer)


def _blocks(rows: Any) -> deque[Block]:
    """Checkpoint rows as blocks: [sum, tokens] or [sum, tokens, overlap or None]."""
    return deque((float(b[0]), int(b[1]), None if len(b) < 3 or b[2] is None else int(b[2])) for b in rows)


def screen_batch(detector: ForgeryDetector, batch: Batch, logp_old: torch.Tensor, *, C: float,
                 skip: set[int]) -> tuple[set[str], dict[str, float]]:
    """One update's screening: feeds each peer's finite tokens in `batch` (rows in `skip` aside) to `detector`,
    one block a peer, with how many of them have `exp(x)` in [1/C, C].

    Returns the flagged peers and, per peer's source, `forgery_mean@<source>` and `overlap@<source>` (the
    block's overlap fraction), and `origins_flagged`: the batch's pooled origins whose window is flagged (their
    identities keep no standing; a pooled flag withholds no sample and charges no identity).
    """
    detector.begin_update()
    totals, source = peer_blocks(batch, logp_old, C=C, skip=skip)
    flagged, stats = set(), {}
    for peer, (total, tokens, overlap) in totals.items():
        stat = detector.observe(peer, total, tokens, overlap=overlap)
        stats[f"forgery_mean@{source[peer]}"] = stat.mean
        stats[f"overlap@{source[peer]}"] = overlap / tokens if tokens else 0.0
        if stat.flagged:
            flagged.add(peer)
            log.warning("peer %s flagged as forging log-probs: mean weight %.3f over %d tokens > %.3f",
                        peer, stat.mean, stat.tokens, stat.bound)
    origins = {o for o in map(detector.pool_of, totals) if o is not None}
    pooled = sorted(o for o in origins if detector.pool_stat(o).flagged)
    for origin in pooled:
        stat = detector.pool_stat(origin)
        log.warning("origin %s flagged as forging log-probs over its %d identities: mean weight %.3f over %d "
                    "tokens > %.3f; none of them has standing", origin, len(detector.members(origin)), stat.mean,
                    stat.tokens, stat.bound)
    stats["origins_flagged"] = float(len(pooled))
    return flagged, stats


def peer_blocks(batch: Batch, logp_old: torch.Tensor, *, C: float,
                skip: set[int]) -> tuple[dict[str, tuple[float, int, int]], dict[str, int]]:
    """Each peer's block of `batch` (its finite rows, those in `skip` aside): (the sum of `min(exp(x), C)`, its
    tokens, its tokens with `exp(x)` in [1/C, C]), and each peer's source; what `screen_batch` observes."""
    log_c = math.log(C)
    with torch.no_grad():
        m = batch.mask.bool()  # (N, T)
        finite = (torch.isfinite(logp_old) & torch.isfinite(batch.logp_gen)) | ~m  # (N, T)
        x = (logp_old - torch.where(m, batch.logp_gen, 0.0)).clamp(-20.0, 20.0)  # (N, T)
        chunks = batch.chunks
        if chunks is not None:  # a peer with another tokenizer: each token reads its chunk's ratio
            safe = torch.where(finite, logp_old, 0.0), torch.where(finite & m, batch.logp_gen, 0.0)
            xk, tok = chunked_token_log_ratios(*safe, m, chunks)  # (N, T), (N, T)
            x = torch.where(tok, xk, x)  # (N, T)
        v = torch.where(m, torch.exp(x).clamp(max=C), 0.0)  # (N, T)
        overlaps = m & (x >= -log_c) & (x <= log_c)  # (N, T): exp(x) in [1/C, C]
        rows = batch.filterable & finite.all(dim=-1)  # (N,)
        totals: dict[str, list[float]] = {}
        source: dict[str, int] = {}
        for r in torch.nonzero(rows).flatten().tolist():
            if r in skip:
                continue
            peer = batch.groups[int(batch.group_of[r])].sender
            acc = totals.setdefault(peer, [0.0, 0.0, 0.0])
            acc[0] += float(v[r].sum())
            acc[1] += float(m[r].sum())
            acc[2] += float(overlaps[r].sum())
            source[peer] = int(batch.source[r])
    return {peer: (total, int(tokens), int(overlap)) for peer, (total, tokens, overlap) in totals.items()}, source
