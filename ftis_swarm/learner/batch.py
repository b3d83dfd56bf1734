"""From scored groups to padded tensors, and micro-batches the model can take.

A learner batch is a list of `ScoredGroup`s: a wire group, the rewards this node's own
verifier gave its completions, and per sample whether it is off-policy (weighted), whether
it is a peer's (filterable) and which source it came from. Each sequence is the prompt ids from the wire followed by one completion, right
padded. A completion that did not end with EOS (`ScoredGroup.ended`: it hit the token cap) gets
no positive advantage, or none at all (`truncated`; docs/method.md, "Known tricks"), after its
group's mean and std are taken. The completion positions are read back from the model's `[B, L-1]` next-token
log-probs with a gather, so the loss sees `[N, T]` completion-aligned tensors.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from ftis_swarm.core.groups import group_advantages
from ftis_swarm.learner.aligned import Aligned
from ftis_swarm.wire import Group


class MixedGroupError(ValueError):
    """A group whose completions come from more than one generator (horizontal)."""


@dataclass(frozen=True)
class ScoredGroup:
    """One group ready for the loss.

    `generators` names the policy (peer and version) behind each completion; a vertical group
    has one. Horizontal groups exist only in the experiment, which passes `allow_mixed`.
    `filterable` marks the peers' samples (docs/method.md, Filter: only they are filtered); None: the
    off-policy ones, which is right wherever no own sample is stale.
    """

    group: Group
    rewards: np.ndarray  # (G,) float
    offpolicy: np.ndarray  # (G,) bool
    source: np.ndarray  # (G,) int
    generators: tuple[str, ...]
    filterable: np.ndarray | None = None  # (G,) bool
    ended: np.ndarray | None = None  # (G,) bool: the completion ends with EOS; None: every one does
    aligned: Aligned | None = None
    """A peer group of another tokenizer on this learner's tokens (`learner/aligned.py`): its prompt, ids,
    mapped log-probs and chunks replace the group's own; None: the group's tokenizer is this learner's."""

    @classmethod
    def vertical(cls, group: Group, rewards: Sequence[float], *, offpolicy: bool, source: int,
                 filterable: bool | None = None, ended: Sequence[bool] | None = None,
                 aligned: Aligned | None = None) -> "ScoredGroup":
        gen = f"{group.sender}@{group.policy_version}"
        return cls(
            group=group,
            rewards=np.asarray(rewards, dtype=np.float32),
            offpolicy=np.full(group.G, offpolicy, dtype=bool),
            source=np.full(group.G, source, dtype=np.int64),
            generators=(gen,) * group.G,
            filterable=None if filterable is None else np.full(group.G, filterable, dtype=bool),
            ended=None if ended is None else np.asarray(ended, dtype=bool),
            aligned=aligned,
        )

    @property
    def peer_rows(self) -> np.ndarray:
        """`filterable`, or `offpolicy` when it is not given: `[G]` bool."""
        return self.offpolicy if self.filterable is None else self.filterable


@dataclass
class MicroBatch:
    """Sequences of one temperature, padded; `idx` are their rows in the whole batch."""

    idx: torch.Tensor  # (n,)
    input_ids: torch.Tensor  # (n, L)
    attention_mask: torch.Tensor  # (n, L)
    target_mask: torch.Tensor  # (n, L-1)
    comp_pos: torch.Tensor  # (n, T) positions in the L-1 axis of each completion token
    temperature: float


@dataclass
class Batch:
    """Completion-aligned tensors for the whole batch, plus its micro-batches."""

    logp_gen: torch.Tensor  # (N, T)
    mask: torch.Tensor  # (N, T)
    advantages: torch.Tensor  # (N,)
    offpolicy: torch.Tensor  # (N,)
    filterable: torch.Tensor  # (N,)
    source: torch.Tensor  # (N,)
    rewards: torch.Tensor  # (N,)
    group_of: torch.Tensor  # (N,) index of each row's group in `groups`
    groups: list[Group]
    micro: list[MicroBatch]
    seqs: list[tuple[np.ndarray, np.ndarray]]
    temps: list[float]
    pad_id: int
    micro_batch: int
    chunks: torch.Tensor | None = None  # (N, T) long: each token's chunk in a group of another tokenizer, else -1

    @property
    def num_sequences(self) -> int:
        return int(self.mask.shape[0])

    def select(self, rows: list[int]) -> "Batch":
        """The batch of `rows` only (whole groups, so the advantages stay those of the whole group)."""
        idx = torch.tensor(rows, dtype=torch.long)  # (n,)
        kept = sorted({int(self.group_of[r]) for r in rows})
        renumber = {old: new for new, old in enumerate(kept)}
        seqs, temps = [self.seqs[r] for r in rows], [self.temps[r] for r in rows]
        T = self.mask.shape[1]
        return Batch(
            logp_gen=self.logp_gen[idx], mask=self.mask[idx], advantages=self.advantages[idx],
            offpolicy=self.offpolicy[idx], filterable=self.filterable[idx], source=self.source[idx],
            rewards=self.rewards[idx],
            group_of=torch.tensor([renumber[int(self.group_of[r])] for r in rows], dtype=torch.long),
            groups=[self.groups[g] for g in kept],
            micro=_micro_batches(seqs, temps, T, pad_id=self.pad_id, size=self.micro_batch),
            seqs=seqs, temps=temps, pad_id=self.pad_id, micro_batch=self.micro_batch,
            chunks=None if self.chunks is None else self.chunks[idx],
        )

    def micro_for(self, rows: list[int]) -> list[MicroBatch]:
        """Micro-batches over a subset of the batch's rows (their `idx` still index the whole batch)."""
        T = self.mask.shape[1]
        return _micro_batches(self.seqs, self.temps, T, pad_id=self.pad_id, size=self.micro_batch, rows=rows)


def truncated_advantages(adv: torch.Tensor, ended: np.ndarray | None, rule: str) -> torch.Tensor:
    """`adv` `[G]` with the rule `rule` (`LearnerConfig.truncated_completions`) applied to the completions
    that did not end (`ended` false): `no_positive` zeroes their positive advantages, `mask` all of theirs."""
    if ended is None or rule == "keep" or bool(ended.all()):
        return adv
    cut = ~torch.from_numpy(np.asarray(ended, dtype=bool))  # (G,)
    if rule == "no_positive":
        cut &= adv > 0  # (G,)
    return torch.where(cut, torch.zeros_like(adv), adv)  # (G,)


def build_batch(items: Sequence[ScoredGroup], *, pad_id: int, micro_batch: int,
                allow_mixed: bool = False, truncated: str = "keep") -> Batch:
    """Advantages per group (over the whole group, then `truncated_advantages`), padding, micro-batching."""
    if not items:
        raise ValueError("an update needs at least one group")
    seqs, logp_gen, adv, off, peer, src, rew, temps, group_of = [], [], [], [], [], [], [], [], []
    chunk_rows: list[np.ndarray | None] = []
    for k, it in enumerate(items):
        if not allow_mixed and len(set(it.generators)) > 1:
            raise MixedGroupError(f"group {it.group.group_id} mixes generators {sorted(set(it.generators))}")
        a = truncated_advantages(group_advantages(torch.as_tensor(it.rewards, dtype=torch.float32)), it.ended,
                                 truncated)  # (G,)
        body = it.aligned or it.group  # another tokenizer's group: its re-encoding on this learner's tokens
        for i, (comp, lp) in enumerate(zip(body.completion_ids, body.logp_gen)):
            seqs.append((body.prompt_ids, comp))
            chunk_rows.append(None if it.aligned is None else it.aligned.chunks[i])
            logp_gen.append(torch.from_numpy(lp.astype(np.float32)))
            temps.append(it.group.temperature)
            group_of.append(k)
        adv.append(a)
        off.append(torch.from_numpy(it.offpolicy))
        peer.append(torch.from_numpy(it.peer_rows))
        src.append(torch.from_numpy(it.source))
        rew.append(torch.as_tensor(it.rewards, dtype=torch.float32))
    T = max(x.shape[0] for x in logp_gen)
    lp = torch.zeros(len(seqs), T)  # (N, T)
    mask = torch.zeros(len(seqs), T)  # (N, T)
    for i, x in enumerate(logp_gen):
        lp[i, : x.shape[0]] = x
        mask[i, : x.shape[0]] = 1.0
    chunks = None  # (N, T) long, only when a group of another tokenizer is in the batch
    if any(c is not None for c in chunk_rows):
        chunks = torch.full((len(seqs), T), -1, dtype=torch.long)  # (N, T)
        for i, c in enumerate(chunk_rows):
            if c is not None:
                chunks[i, : c.shape[0]] = torch.from_numpy(c.astype(np.int64))
    return Batch(
        logp_gen=lp,
        mask=mask,
        advantages=torch.cat(adv),  # (N,)
        offpolicy=torch.cat(off).bool(),  # (N,)
        filterable=torch.cat(peer).bool(),  # (N,)
        source=torch.cat(src),  # (N,)
        rewards=torch.cat(rew),  # (N,)
        group_of=torch.tensor(group_of, dtype=torch.long),  # (N,)
        groups=[it.group for it in items],
        micro=_micro_batches(seqs, temps, T, pad_id=pad_id, size=micro_batch),
        seqs=seqs,
        temps=temps,
        pad_id=pad_id,
        micro_batch=micro_batch,
        chunks=chunks,
    )


def _micro_batches(seqs: list, temps: list[float], T: int, *, pad_id: int, size: int,
                   rows: list[int] | None = None) -> list[MicroBatch]:
    rows = list(range(len(seqs))) if rows is None else rows
    order = sorted(rows, key=lambda i: (temps[i], len(seqs[i][0]) + len(seqs[i][1])))
    out, start = [], 0
    while start < len(order):
        temp = temps[order[start]]
        rows = [order[start]]
        while len(rows) < size and start + len(rows) < len(order) and temps[order[start + len(rows)]] == temp:
            rows.append(order[start + len(rows)])
        out.append(_pad(rows, seqs, T, pad_id, temp))
        start += len(rows)
    return out


def _pad(rows: list[int], seqs: list, T: int, pad_id: int, temperature: float) -> MicroBatch:
    L = max(len(seqs[r][0]) + len(seqs[r][1]) for r in rows)
    ids = torch.full((len(rows), L), pad_id, dtype=torch.long)  # (n, L)
    att = torch.zeros(len(rows), L, dtype=torch.long)  # (n, L)
    tgt = torch.zeros(len(rows), L - 1, dtype=torch.bool)  # (n, L-1)
    pos = torch.zeros(len(rows), T, dtype=torch.long)  # (n, T)
    for j, r in enumerate(rows):
        prompt, comp = seqs[r]
        P, C = len(prompt), len(comp)
        ids[j, :P] = torch.from_numpy(prompt.astype(np.int64))
        ids[j, P : P + C] = torch.from_numpy(comp.astype(np.int64))
        att[j, : P + C] = 1
        tgt[j, P - 1 : P - 1 + C] = True  # position t predicts token t+1
        pos[j, :C] = torch.arange(P - 1, P - 1 + C)
    return MicroBatch(torch.tensor(rows), ids, att, tgt, pos, temperature)
