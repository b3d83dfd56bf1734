"""`ftis-node bench hint`: what the signed hint buys a node whose budget binds, against the blind choice.

The same offers, the same budget, the same seed, through the node's real fetch selection
(`swarm.fetch.selection.Selection`) twice: once with the round pointers' hints
(`records.make_round_pointer(correct=...)`, read back through `RoundPointer.views`), once with
them stripped (a pointer of an older publisher). Each round, `publishers` strangers each offer
`groups` real wire groups (`lab.hostile.floods.make_group`: G = 4 completions of `tokens` tokens);
each group's correct count is drawn as a publisher's verifier would find it, from a per-item
success probability p ~ Beta(`alpha`, `beta`) (a U-shaped spread by default: most items are
easy or hard for the model, so many groups are all right or all wrong, as in the testnet run of
issue 41, where whole peer groups had zero advantage). The budget admits `budget_groups` of the
offered groups. A chosen group's samples reach the gradient as F-TIS lets them: the positive
samples of a mixed group (no KL filter here: peers' samples are taken as on-policy enough);
under NoIS every sample of a mixed group. So:

- `useful_peer_frac`: samples through the gradient / samples fetched (docs/node.md);
- `zero_signal_bytes`: the wire bytes of the fetched groups whose rewards were all equal.

No model and no network: the figures isolate the choice (the hint's wire and its check run on
real daemons in tests/node/test_node_hints_daemons.py).
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

import base58
import numpy as np

from ftis_swarm.lab.hostile.floods import make_group
from ftis_swarm.peers.intake import Budget
from ftis_swarm.swarm.fetch.selection import Selection
from ftis_swarm.swarm.records import GroupPointer, make_round_pointer
from ftis_swarm.wire import encode_group

_RUN, _TOK, _VOCAB, _PUZZLE = "bench-hint", "bench", 1000, "0" * 16


@dataclasses.dataclass
class Arm:
    """One arm's totals over the rounds."""

    groups: int = 0
    samples: int = 0
    useful_ftis: int = 0
    useful_nois: int = 0
    zero_signal_groups: int = 0
    zero_signal_bytes: int = 0
    fetched_bytes: int = 0

    @property
    def useful_peer_frac(self) -> float:
        return self.useful_ftis / self.samples if self.samples else 0.0

    @property
    def useful_peer_frac_nois(self) -> float:
        return self.useful_nois / self.samples if self.samples else 0.0


@dataclasses.dataclass
class HintBench:
    settings: dict[str, Any]
    offered_groups: int
    offered_mixed: int
    hinted: Arm
    blind: Arm

    @property
    def ratio(self) -> float:
        return self.hinted.useful_peer_frac / self.blind.useful_peer_frac if self.blind.useful_peer_frac else float("inf")

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"settings": self.settings, "offered_groups": self.offered_groups,
                               "offered_mixed": self.offered_mixed, "ratio": self.ratio}
        for name, arm in (("hinted", self.hinted), ("blind", self.blind)):
            out[name] = {**dataclasses.asdict(arm), "useful_peer_frac": arm.useful_peer_frac,
                         "useful_peer_frac_nois": arm.useful_peer_frac_nois}
        return out


def _peer_id(name: str) -> str:
    return base58.b58encode(hashlib.sha256(name.encode()).digest()).decode()


def _offers(rng: np.random.Generator, r: int, *, publishers: int, groups: int, tokens: int, alpha: float,
            beta: float) -> list[GroupPointer]:
    """Round `r`'s signed pointers of every publisher, hinted with the correct counts drawn for them."""
    out = []
    for i in range(publishers):
        sender = _peer_id(f"publisher-{i}")
        made = [make_group(sender=sender, run_id=_RUN, item=f"r{r}/{i}/{j}", tokens=tokens, tokenizer_fp=_TOK,
                           vocab_size=_VOCAB, created_at=1000.0 + r + j * 1e-3) for j in range(groups)]
        correct = [int(rng.binomial(g.G, rng.beta(alpha, beta))) for g in made]
        pointer = make_round_pointer([(g, encode_group(g)) for g in made], publisher=sender, run_id=_RUN,
                                     tokenizer_fp=_TOK, window=0, round=r, puzzle=_PUZZLE, correct=correct)
        out.extend(pointer.views())
    return out


def _choose(pointers: list[GroupPointer], budget: Budget, r: int) -> list[GroupPointer]:
    selection = Selection(budget, seed="bench-hint-node", score=lambda peer: 0.0)  # every publisher a stranger
    for p in pointers:
        selection.offer(p)
    selection.open(round=r)
    return selection.choose().chosen


def _tally(arm: Arm, chosen: list[GroupPointer], truth: dict[str, tuple[int, int]]) -> None:
    for p in chosen:
        correct, samples = truth[p.group_id]
        mixed = 0 < correct < samples
        arm.groups += 1
        arm.samples += samples
        arm.fetched_bytes += p.size
        arm.useful_ftis += correct if mixed else 0
        arm.useful_nois += samples if mixed else 0
        if not mixed:
            arm.zero_signal_groups += 1
            arm.zero_signal_bytes += p.size


def run_hint_bench(*, rounds: int = 20, publishers: int = 6, groups: int = 8, tokens: int = 64,
                   budget_groups: int = 12, alpha: float = 0.3, beta: float = 0.3, seed: int = 0) -> HintBench:
    """Both arms over `rounds` rounds of the same offers (module docstring)."""
    rng = np.random.default_rng(seed)
    budget = Budget(max_groups=budget_groups, max_groups_per_peer=groups, max_tokens=budget_groups * 4 * tokens,
                    max_tokens_per_peer=groups * 4 * tokens, context=4096, strangers_share=1.0)
    hinted, blind = Arm(), Arm()
    offered = mixed = 0
    for r in range(1, rounds + 1):
        pointers = _offers(rng, r, publishers=publishers, groups=groups, tokens=tokens, alpha=alpha, beta=beta)
        truth = {p.group_id: (p.correct, p.samples) for p in pointers}
        offered += len(pointers)
        mixed += sum(1 for p in pointers if p.carries_signal)
        _tally(hinted, _choose(pointers, budget, r), truth)
        unhinted = [p.model_copy(update={"correct": None, "samples": None}) for p in pointers]
        _tally(blind, _choose(unhinted, budget, r), truth)
    settings = dict(rounds=rounds, publishers=publishers, groups=groups, tokens=tokens, budget_groups=budget_groups,
                    alpha=alpha, beta=beta, seed=seed, group_size=4)
    return HintBench(settings, offered, mixed, hinted, blind)


def format_hint(bench: HintBench) -> str:
    s = bench.settings
    lines = [f"bench hint: {s['rounds']} rounds, {s['publishers']} publishers x {s['groups']} groups of G=4 offered a "
             f"round, a budget of {s['budget_groups']} groups; p ~ Beta({s['alpha']}, {s['beta']}), seed {s['seed']}",
             f"offered {bench.offered_groups} groups, {bench.offered_mixed} mixed "
             f"({bench.offered_mixed / max(1, bench.offered_groups):.0%}); the budget admits "
             f"{s['rounds'] * s['budget_groups']}",
             f"{'arm':<8}{'groups':>8}{'samples':>9}{'useful':>8}{'useful_peer_frac':>18}{'nois frac':>11}"
             f"{'zero-signal groups':>20}{'zero-signal kB':>16}{'fetched kB':>12}"]
    for name, arm in (("hinted", bench.hinted), ("blind", bench.blind)):
        lines.append(f"{name:<8}{arm.groups:>8}{arm.samples:>9}{arm.useful_ftis:>8}{arm.useful_peer_frac:>18.3f}"
                     f"{arm.useful_peer_frac_nois:>11.3f}{arm.zero_signal_groups:>20}"
                     f"{arm.zero_signal_bytes / 1e3:>16.1f}{arm.fetched_bytes / 1e3:>12.1f}")
    lines.append(f"useful_peer_frac, hinted / blind: {bench.ratio:.2f}x (goal: at least 2x)")
    return "\n".join(lines)
