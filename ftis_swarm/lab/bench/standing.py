"""`ftis-node bench attacks`, the standing part: a crowd of fresh identities against earned peers.

One receiving node, a real `Node` in process on the loopback transport (`peers.loopback`),
runs its own rounds: every group below is posted to its hub as bytes between its publish
half and its learn half, so it takes the node's one path (the transport's checks, the intake
with the learner's standing and the ledger's score, the scorer, the update, the ledger).
First a warm-up: two honest peers and a would-be turncoat send honest groups until each has
standing (docs/node.md, "Standing"). Then every round offers, in this order:

- 20 fresh identities, one honest group each (8 new tokens): the crowd;
- short forgeries of arith answers (one-token and two-token answers, two right and two
  wrong, so the group carries signal): `logp_gen` 3 below the forger's own log-probs, 0.5
  below, and a group claiming `T_MIN` whose `logp_gen` are the log-probs at T = 1; each
  kind from one identity and split over 10 identities, one group each;
- a newcomer: one honest group (24 new tokens);
- the two earned peers: two honest groups each; the turncoat: two groups forged at -0.5;
- a copier: the first earned peer's groups, re-signed.

The crowd, the forgers and the copier (54 identities) share one network origin, the
newcomer has its own, and the earned peers and the turncoat theirs (`LoopbackHub.set_origin`):
the node's strangers' draw goes origin first (`peers/draw.py`), with its transport's `origin_of`.

Figures: the crowd's and all strangers' share of the peers' tokens in each update (the cap
is `strangers_share`); per forgery kind, samples trained at a weight above 1 while the
identity had no standing (the goal is 0) and after it had standing (the turncoat); the
newcomer's first used group and its tokens to standing; copies refused; the strangers'
tokens in each update by origin.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from ftis_swarm.config import T_MIN, LearnerConfig, NodeConfig, SamplingConfig, SwarmConfig
from ftis_swarm.core.logprobs import token_logprobs
from ftis_swarm.lab.hostile.groups import prompts_for, rebuilt
from ftis_swarm.models import load_model
from ftis_swarm.node.daemon import Node
from ftis_swarm.peers import faults
from ftis_swarm.peers.intake import within_vocab
from ftis_swarm.peers.loopback import LoopbackHub
from ftis_swarm.rollout import GroupHeader, TransformersBackend
from ftis_swarm.tasks import get_task
from ftis_swarm.wire import Group, encode_group, tokenizer_fingerprint

SAMPLING = SamplingConfig(temperature=0.7, max_new_tokens=24, group_size=4, seed=0)
CROWD_SAMPLING = SamplingConfig(temperature=0.7, max_new_tokens=8, group_size=4, seed=1)
CROWD, SPLIT = 20, 10
FORGERIES = {"minus_3": -3.0, "minus_0.5": -0.5, "t_min": 0.0}
"""Forgery kind -> shift of `logp_gen` (`t_min` claims T_MIN and the log-probs at T = 1 instead)."""
EARNED = ("earned-1", "earned-2")
CROWD_ORIGIN, NEWCOMER_ORIGIN = "10.0.0.0/24", "10.0.1.0/24"
RUN_ID, ME = "bench", "self"


@dataclass(kw_only=True)
class Shares:
    """The update's shares of the peers' token budget, per round (the standing benches' common figures)."""

    strangers_share: list[float] = field(default_factory=list)
    """Per round: the peers' tokens in the update from identities without standing / the peers' token budget."""
    crowd_share: list[float] = field(default_factory=list)
    """Per round: the same for the crowd of fresh identities alone."""
    strangers_of_used: list[float] = field(default_factory=list)
    """Per round: the strangers' tokens / all peers' tokens in the update."""
    share_by_origin: list[dict[str, float]] = field(default_factory=list)
    """Per round: origin -> the tokens of its identities without standing in the update / the peers' token budget."""
    newcomer_first_used: int | None = None
    """The round (of the main rounds) in which the newcomer's first group went into an update."""
    newcomer_standing_round: int | None = None
    newcomer_standing_tokens: int | None = None

    def add_shares(self, kept: list[Group], had: dict[str, bool], *, budget: int, crowd: set[str],
                   origin_of: Callable[[str], str | None]) -> None:
        """One round's: `kept` the peers' groups the intake took, `had` whether each sender was in the budget's first
        part as the intake read it (standing, or tenure: docs/method.md "Tenure"); the others are strangers."""
        used = sum(g.num_completion_tokens for g in kept) or 1
        strangers = [g for g in kept if not had[g.sender]]
        tokens = sum(g.num_completion_tokens for g in strangers)
        self.strangers_share.append(tokens / budget)
        self.strangers_of_used.append(tokens / used)
        by_origin: Counter[str] = Counter()
        for g in strangers:
            by_origin[origin_of(g.sender) or g.sender] += g.num_completion_tokens
        self.share_by_origin.append({o: n / budget for o, n in by_origin.items()})
        self.crowd_share.append(sum(g.num_completion_tokens for g in kept if g.sender in crowd) / budget)

    def origin_lines(self, named: dict[str, str]) -> list[str]:
        """The strangers' tokens by origin (`named` first, by their names), and the newcomer's turn and standing."""
        origins = sorted({o for row in self.share_by_origin for o in row}, key=lambda o: (o not in named, o))
        lines = [f"strangers' tokens by origin / budget, {named.get(origin, origin)}: "
                 + " ".join(f"{row.get(origin, 0.0):.2f}" for row in self.share_by_origin) for origin in origins]
        first = "never" if self.newcomer_first_used is None else f"round {self.newcomer_first_used}"
        standing = ("not within the run" if self.newcomer_standing_round is None else
                    f"round {self.newcomer_standing_round}, after {self.newcomer_standing_tokens} tokens")
        return lines + [f"newcomer: first group used {first}; standing {standing}"]


class HonestPeers:
    """Honest arith groups of one model for any senders: what the earned peers, the newcomer and the crowd send."""

    def __init__(self, model: Any, tokenizer: Any, token_bound: int) -> None:
        self.tokenizer, self.bound = tokenizer, token_bound
        self.backend = TransformersBackend(model=model, tokenizer=tokenizer, header=GroupHeader(RUN_ID, "honest", RUN_ID))

    def groups(self, senders: list[str], r: int, salt: int, sampling: SamplingConfig = SAMPLING) -> list[Group]:
        """One group per sender (of round `r`'s items for `salt`), less any past the receiver's vocabulary."""
        items = get_task("arith").sample(len(senders), seed=1000 * salt + r)
        groups = self.backend.generate(prompts_for(items, self.tokenizer), sampling.group_size, sampling)
        return [rebuilt(g, sender=s) for g, s in zip(groups, senders) if within_vocab(g, self.bound)]


@dataclass
class StandingFigures(Shares):
    warmup_rounds: int
    """Rounds until both earned peers and the turncoat had standing."""
    rounds: int
    over_1_before: dict[str, int] = field(default_factory=dict)
    """Forger -> its samples trained at a weight above 1 while it had no standing."""
    over_1_after: dict[str, int] = field(default_factory=dict)
    """Forger -> its samples trained at a weight above 1 once it had standing."""
    forged_trained: dict[str, int] = field(default_factory=dict)
    """Forger -> its samples trained at all (weight at most 1 without standing)."""
    forgers_flagged: dict[str, int] = field(default_factory=dict)
    """Forger kind -> its groups withheld as forged (the ledger's `forgery` charges)."""
    copies_sent: int = 0
    copies_refused: int = 0
    """Refused as `copied_group`."""
    copier_refused: int = 0
    """Refused because the copier was banned (its copies' cost)."""
    copies_used: int = 0


def forgers() -> list[tuple[str, str]]:
    """(identity, kind): one identity per kind, and the kind split over `SPLIT` identities."""
    out = [(f"forge-{k}", k) for k in FORGERIES]
    return out + [(f"forge-{k}-{i}", k) for k in FORGERIES for i in range(SPLIT)]


def run_standing_bench(receiver: str, honest: str, *, rounds: int, workdir: Path, max_warmup: int = 12,
                       seed: int = 0, progress: Callable[[str], None] = lambda s: None) -> StandingFigures:
    """The standing figures over `rounds` main rounds after a warm-up of at most `max_warmup` rounds.

    The receiver is a real `Node` of model `receiver` on a loopback hub (`peers.loopback`), as
    in the attack table: every offered group is posted to its hub as bytes between its publish
    half and its learn half, so it takes the node's one path (the transport's checks, the
    intake with the learner's standing and the ledger's score, the scorer, `learn_round`, the
    ledger). What the intake kept is what the node logged as consumed.
    """
    cfg = NodeConfig(model=receiver, task="arith", rounds=rounds + max_warmup, prompts_per_round=2,
                     sampling=SAMPLING, learner=LearnerConfig(lr=2e-6), max_failed_updates=rounds + max_warmup + 1,
                     swarm=SwarmConfig(run_id=RUN_ID), run_dir=workdir / "standing", seed=seed, eval_every=0)
    hub = LoopbackHub()
    node = Node(cfg, swarm=hub.member(ME))
    try:
        return _standing_rounds(node, hub, load_model(honest)[0], rounds=rounds, max_warmup=max_warmup,
                                progress=progress)
    finally:
        node.close()


def _standing_rounds(node: Node, hub: LoopbackHub, honest_model: Any, *, rounds: int, max_warmup: int,
                     progress: Callable[[str], None]) -> StandingFigures:
    p = node.parts
    tok, bound, ledger, det = p.tokenizer, p.token_bound, p.peer_ledger, p.learner.detector
    fp = tokenizer_fingerprint(tok)
    honest_groups = HonestPeers(honest_model, tok, bound).groups
    arith = get_task("arith")

    posted: dict[str, Group] = {}  # every group offered so far: the intake may take a deferred one rounds later

    def round_of(r: int, offered: list[Group]) -> tuple[list[Group], dict[str, float]]:
        """The node's round `r` with `offered` posted to its hub: the peers' groups it took, and the update's metrics."""
        mine = node.publish_round(r)
        for g in offered:
            posted[g.group_id] = g
            hub.inject(g.sender, encode_group(g))
        before = set(node.state.consumed)
        node.learn_published(mine)
        learned = node.last_learning
        assert learned is not None
        kept = [posted[gid] for gid in node.state.consumed if gid not in before]
        return kept, learned.metrics

    r, warmup = 0, 0
    veterans = [*EARNED, "turncoat"]
    while warmup < max_warmup and not all(det.has_standing(v) for v in veterans):
        r, warmup = r + 1, warmup + 1
        progress(f"warm-up round {warmup}")
        round_of(r, honest_groups([v for v in veterans for _ in range(2)], r, salt=1))
    fig = StandingFigures(warmup_rounds=warmup, rounds=rounds)
    crowd = [f"fresh-{i:02d}" for i in range(CROWD)]
    forged_ids = forgers()
    for peer in [*crowd, *(f for f, _ in forged_ids), "copier"]:
        hub.set_origin(peer, CROWD_ORIGIN)
    hub.set_origin("newcomer", NEWCOMER_ORIGIN)
    everyone = [*crowd, *(f for f, _ in forged_ids), "copier", "newcomer", *EARNED, "turncoat"]
    budget = node.intake.budget.max_tokens
    for main in range(1, rounds + 1):
        r += 1
        progress(f"round {main} of {rounds} (20 fresh identities, {len(forged_ids)} forgers)")
        offered = honest_groups(crowd, r, salt=2, sampling=CROWD_SAMPLING)
        items = arith.sample(len(forged_ids), seed=3000 + r)
        offered += [_forged(honest_model, tok, it, sender=f, kind=k, fp=fp) for (f, k), it in zip(forged_ids, items)]
        offered += honest_groups(["newcomer"], r, salt=4)
        earned = honest_groups([e for e in EARNED for _ in range(2)], r, salt=5)
        turncoat = [rebuilt(g, logp_gen=[lp - 0.5 for lp in g.logp_gen])
                    for g in honest_groups(["turncoat", "turncoat"], r, salt=6)]
        copies = [rebuilt(g, sender="copier", created_at=g.created_at + 1.0) for g in earned if g.sender == EARNED[0]]
        offered += earned + turncoat + copies
        # what the intake reads; every identity, as a group deferred from an earlier round may be taken now
        had = {s: det.has_standing(s) for s in {*everyone, *(g.sender for g in offered)}}
        first = {s: h or ledger.settled(s) for s, h in had.items()}  # the first part: standing or tenure
        kept, metrics = round_of(r, offered)
        fig.add_shares(kept, first, budget=budget, crowd=set(crowd), origin_of=hub.origin_of)
        fig.copies_sent += len(copies)
        fig.copies_used += sum(g.sender == "copier" for g in kept)
        for f, k in [*forged_ids, ("turncoat", "turncoat")]:
            src = node.learning.sources.get(f)
            book = fig.over_1_after if had.get(f) else fig.over_1_before
            fig.over_1_after.setdefault(k, 0)
            fig.over_1_before.setdefault(k, 0)
            book[k] += int(metrics.get(f"used_over_1@{src}", 0))
            fig.forged_trained[k] = fig.forged_trained.get(k, 0) + int(metrics.get(f"used@{src}", 0))
        if fig.newcomer_first_used is None and any(g.sender == "newcomer" for g in kept):
            fig.newcomer_first_used = main
        if fig.newcomer_standing_round is None and det.has_standing("newcomer"):
            fig.newcomer_standing_round, fig.newcomer_standing_tokens = main, det.tokens("newcomer")
    accounts = ledger.snapshot()
    copier = accounts.get("copier", {}).get("counts", {})
    fig.copies_refused = int(copier.get(faults.COPIED_GROUP, 0))
    # a banned copier's bodies: the transport no longer reads them, or the intake refuses them
    fig.copier_refused = (int(copier.get(faults.PEER_REFUSED, 0))
                          + int(p.swarm.counters().get("refused_by_peer", {}).get("copier", 0)))
    for peer, rec in accounts.items():
        kind = "turncoat" if peer == "turncoat" else next((k for f, k in forged_ids if f == peer), None)
        if kind is not None:
            fig.forgers_flagged[kind] = fig.forgers_flagged.get(kind, 0) + rec["counts"].get("forgery", 0)
    return fig


def _forged(model: Any, tok: Any, item: Any, *, sender: str, kind: str, fp: str) -> Group:
    """A group of short arith answers (two right, two wrong) with a forged `logp_gen` of `kind`."""
    prompt = prompts_for([item], tok)[0].prompt_ids
    wrong = "1" if item.answer != "1" else "2"
    completions = [tok.encode(text, add_special_tokens=False) for text in (item.answer, item.answer, wrong, wrong + "0")]
    claimed_t = T_MIN if kind == "t_min" else SAMPLING.temperature
    logp_t = 1.0 if kind == "t_min" else SAMPLING.temperature
    logp_gen = []
    with torch.no_grad():
        for ids in completions:
            full = torch.tensor([list(prompt) + list(ids)])  # (1, L)
            lp = token_logprobs(model, full, temperature=logp_t)[0, len(prompt) - 1:]  # (len(ids),)
            logp_gen.append((lp + FORGERIES[kind]).numpy())
    return Group.build(run_id=RUN_ID, sender=sender, model_id=RUN_ID, policy_version=0, created_at=time.time(),
                       tokenizer_fp=fp, task_id=item.task_id, item_id=item.item_id, prompt_ids=prompt,
                       temperature=claimed_t, completion_ids=completions, logp_gen=logp_gen)


def format_standing(f: StandingFigures, *, share: float) -> str:
    lines = [f"standing: 20 fresh identities, {len(forgers())} forgers, a newcomer, a copier against 2 earned "
             f"peers and a turncoat (warm-up {f.warmup_rounds} rounds, then {f.rounds})",
             f"strangers' share of the peers' token budget per update (cap {share:.2f}): "
             + " ".join(f"{x:.2f}" for x in f.strangers_share)
             + "; the 20 fresh identities': " + " ".join(f"{x:.2f}" for x in f.crowd_share),
             "strangers' share of the peers' tokens used: " + " ".join(f"{x:.2f}" for x in f.strangers_of_used),
             f"{'forger':<12}{'trained':>9}{'w > 1 before':>14}{'w > 1 after':>13}{'flagged':>9}"]
    for kind in [*FORGERIES, "turncoat"]:
        lines.append(f"{kind:<12}{f.forged_trained.get(kind, 0):>9}{f.over_1_before.get(kind, 0):>14}"
                     f"{f.over_1_after.get(kind, 0):>13}{f.forgers_flagged.get(kind, 0):>9}")
    named = {CROWD_ORIGIN: f"the crowd's ({CROWD_ORIGIN})", NEWCOMER_ORIGIN: f"the newcomer's ({NEWCOMER_ORIGIN})"}
    lines += f.origin_lines(named)
    lines.append(f"copies: {f.copies_sent} sent, {f.copies_used} used, {f.copies_refused} refused as copied_group, "
                 f"{f.copier_refused} after the copier's ban")
    return "\n".join(lines)
