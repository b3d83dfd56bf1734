"""`ftis-node bench overlap`: how much of an honest peer's tokens the two policies share, and a deflator's.

Standing needs evidence of overlap (docs/method.md, "Peers without standing"): at least a
fraction q of an identity's tokens with an uncapped ratio `pi_theta / pi_gen` in [1/C, C],
over the detector's window and over its newest block. This measures what q may be.

**Honest pairs.** For each model a testnet preset runs (default: SmolLM2-135M, its fresh LoRA
r16, `smollm2-slim` and the far-apart `smollm2-bias2`, at the testnet's T = 0.7, G = 8, 16
new tokens; tiny: the tiny preset's two random models and the LoRA of the larger, at T = 1,
G = 4, 6 new tokens), arith groups are sampled from the sampler, and each other model's
learner scores them (`Learner.old_logprobs`, fp32). Each group then goes to the learner's
detector as one update's block through `screen_batch`, the product's one feed: the figures
are the overlap fraction per block (one group) and over the window (every group), the mean
truncated weight, the share of the weight above 1, the blocks under each q of a sweep (an
honest block under q ends standing for that update: the false alarms), and the tokens to
standing with the overlap test and without it. A fresh LoRA computes its base's function
(B = 0), so its rows are its base's, after a check that its log-probs are its base's.

**Pooled per origin** (docs/method.md, "Evidence pooled per origin"): for each learner, its
honest samplers as identities of one origin, one group of each an update, fed to a detector
that pools them and to one that judges each alone: the identity-updates in which an identity
had standing alone but not pooled (what pooling costs honest peers behind one address), of
those in which it had standing alone.

**Attackers**, against every learner: the deflator of issue 40, groups of 1-2-token arith
answers (two right, two wrong) claiming `logp_gen = 0`; and the strike, the same answers
with the right ones' `logp_gen` lowered until `x >= 0.8` at every learner (weight C) and the
wrong ones claiming 0. Figures: their overlap fractions, the deflator's tokens to standing
without the overlap test and with it, and whether a strike after standing honestly earned
ends it in the update it starts.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import torch

from ftis_swarm.config import LearnerConfig, LoRAConfig, SamplingConfig
from ftis_swarm.lab.hostile.groups import prompts_for, rebuilt
from ftis_swarm.learner.batch import Batch, ScoredGroup, build_batch
from ftis_swarm.learner.forgery import ForgeryDetector, peer_blocks, screen_batch
from ftis_swarm.learner.learner import Learner, apply_lora
from ftis_swarm.models import load_model
from ftis_swarm.rollout import GroupHeader, TransformersBackend
from ftis_swarm.tasks import get_task
from ftis_swarm.wire import Group

SAMPLING = {"default": SamplingConfig(temperature=0.7, max_new_tokens=16, group_size=8, seed=0),
            "tiny": SamplingConfig(temperature=1.0, max_new_tokens=6, group_size=4, seed=0)}
"""The testnet's sampling per preset (ops/testnet.py: DEFAULT_FLAGS, TINY_FLAGS)."""
Q_SWEEP = (0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4)
STRIKE_X = 0.8
ATTACK_GROUPS = 24
TURNCOAT_PASSES = 20
RUN_ID = "bench"


@dataclass
class PairRow:
    learner: str
    sampler: str
    tokens: int
    window: float
    """Overlap fraction over every group's tokens."""
    blocks: list[float]
    """Overlap fraction per group (one update's block)."""
    block_tokens: list[int]
    mean_v: float
    """Mean of min(exp(x), C) over the tokens."""
    excess_share: float
    """Over the groups' samples, each weighing its mean token weight min(exp(x), C): the part above 1."""
    tokens_to_standing: int | None
    """Tokens fed until standing, with the overlap test (None: not within the groups)."""
    tokens_to_standing_bound_only: int | None
    """The same under the upper bound alone."""
    lost_after_standing: int = 0
    """Blocks after standing was earned in which it ended (the false alarms at the config's q)."""
    checks_after_standing: int = 0
    same_as: str = ""
    """The row whose numbers these are ("" when measured: a fresh LoRA is its base)."""

    def under(self, q: float) -> int:
        return sum(b < q for b in self.blocks)


@dataclass
class AttackRow:
    learner: str
    deflator_window: float
    deflator_max_block: float
    deflator_mean_v: float
    deflator_tokens: int
    deflator_standing_bound_only: int | None
    """Tokens until the upper bound alone gave the deflator standing (issue 40: about 20)."""
    deflator_standing: int | None
    """The same with the overlap test (None: never within its groups)."""
    strike_window: float
    strike_max_block: float
    deflator_blocks: list[float]
    """The deflator's overlap fraction per group (one update's block)."""
    strike_blocks: list[float]
    """The strike's overlap fraction per group."""
    strike_ends_standing: bool
    """A peer that earned standing with honest groups, then one strike group: standing ended in that update."""


@dataclass
class OverlapFigures:
    preset: str
    groups: int
    q: float
    """The config's default `learner.standing_overlap` (over the window)."""
    q_block: float
    """The config's default `learner.standing_overlap_block` (over the newest block)."""
    pairs: list[PairRow]
    attacks: list[AttackRow]
    lora_max_abs_diff: float
    """Largest |log-prob difference| between the fresh LoRA and its base on one group."""
    seconds: float
    sampling: dict[str, float] = field(default_factory=dict)
    pooled: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Per learner, its honest samplers on one origin: (identity-updates with standing alone but not pooled,
    identity-updates with standing alone)."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_overlap_bench(*, preset: str = "default", groups: int = 8, threads: int = 2, workdir: Path,
                      progress: Callable[[str], None] = lambda s: None) -> OverlapFigures:
    """The honest pairs' overlap over `groups` groups per sampler, and the attackers' (module docstring)."""
    if preset not in SAMPLING or groups < 1 or threads < 1:
        raise ValueError("preset must be 'default' or 'tiny', groups and threads at least 1")
    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    sampling, cfg = SAMPLING[preset], LearnerConfig()
    names, base, lora = _models(preset, workdir)
    loaded = {name: load_model(path) for name, path in names.items()}
    tok = next(iter(loaded.values()))[1]
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    learners = {name: Learner(model, cfg=cfg, pad_id=int(pad)) for name, (model, _) in loaded.items()}
    items = get_task("arith").sample(groups, seed=7)
    samples = {}
    for name, (model, _) in loaded.items():
        progress(f"sampling {groups} groups from {name}")
        backend = TransformersBackend(model=model, tokenizer=tok, header=GroupHeader(RUN_ID, name, RUN_ID))
        samples[name] = backend.generate(prompts_for(items, tok), sampling.group_size, sampling)
    progress(f"{lora} against {base}")
    diff = _lora_diff(names[base], samples[base][:1], int(pad), cfg)
    rows, scored, pooled = [], {}, {}
    for learner_name, learner in learners.items():
        honest = {}
        for sampler, groups_of in samples.items():
            if sampler != learner_name:
                progress(f"{learner_name} scoring {sampler}'s groups")
                batch = _batch(groups_of, int(pad))
                logp_old = learner.old_logprobs(batch)  # (N, T)
                scored.setdefault(learner_name, (batch, logp_old))  # the nearest model's: the turncoat's groups
                rows.append(_pair(learner, learner_name, sampler, batch, logp_old))
                honest[sampler] = (batch, logp_old)
        pooled[learner_name] = _pooled(cfg, honest)
    rows = _with_lora(rows, base, lora)
    progress("attackers")
    attacks = _attacks(learners, tok, scored, sampling, int(pad))
    return OverlapFigures(preset, groups, cfg.standing_overlap, cfg.standing_overlap_block, rows, attacks, diff,
                          time.perf_counter() - t0,
                          {"temperature": sampling.temperature, "group_size": sampling.group_size,
                           "max_new_tokens": sampling.max_new_tokens}, pooled)


def _models(preset: str, workdir: Path) -> tuple[dict[str, str], str, str]:
    """Name -> model to load (the LoRA aside), the LoRA's base, and the LoRA's name."""
    if preset == "default":
        return {"full": "smollm2-135m", "slim": "smollm2-slim", "bias2": "smollm2-bias2"}, "full", "lora"
    from ftis_swarm.models.tiny import build_tiny_qwen2

    a = build_tiny_qwen2(workdir / "tiny-a", hidden_size=32, num_layers=1, seed=1)
    b = build_tiny_qwen2(workdir / "tiny-b", hidden_size=64, num_layers=2, seed=2)
    return {"tiny-a": str(a), "tiny-b": str(b)}, "tiny-b", "tiny-b-lora"


def _lora_diff(path: str, groups: list[Group], pad: int, cfg: LearnerConfig) -> float:
    """The largest |log-prob difference| between a fresh LoRA r16 of the model at `path` and the model itself."""
    batch = _batch(groups, pad)
    model = load_model(path)[0]
    plain = Learner(model, cfg=cfg, pad_id=pad).old_logprobs(batch)  # (N, T)
    wrapped = apply_lora(model, LearnerConfig(lora=LoRAConfig(rank=16)))
    adapted = Learner(wrapped, cfg=cfg, pad_id=pad).old_logprobs(batch)  # (N, T)
    return float((plain - adapted).abs().max())


def _batch(groups: list[Group], pad: int) -> Batch:
    items = [ScoredGroup.vertical(g, [0.0] * g.G, offpolicy=True, filterable=True, source=1) for g in groups]
    return build_batch(items, pad_id=pad, micro_batch=8)


def _pair(learner: Learner, learner_name: str, sampler: str, batch: Batch, logp_old: torch.Tensor) -> PairRow:
    C, m = learner.cfg.ftis.C, batch.mask.bool()  # (N, T)
    window, blocks, mean_v = _fractions(batch, logp_old, batch.logp_gen, C)
    w = torch.exp(_log_ratio(batch, logp_old, batch.logp_gen)).clamp(max=C)  # (N, T)
    seq_w = (w * m).sum(dim=-1) / m.sum(dim=-1)  # (N,)
    seq_excess = ((w - 1.0).clamp(min=0.0) * m).sum(dim=-1) / m.sum(dim=-1)  # (N,)
    sizes = [int(m[batch.group_of == g].sum()) for g in range(len(batch.groups))]
    fed = _feed(learner.cfg, batch, logp_old, sender=f"{sampler}@{learner_name}")
    return PairRow(learner_name, sampler, int(m.sum()), window, blocks, sizes, mean_v,
                   float(seq_excess.sum() / seq_w.sum()), *fed)


def _feed(cfg: LearnerConfig, batch: Batch, logp_old: torch.Tensor, *,
          sender: str) -> tuple[int | None, int | None, int, int]:
    """Each group of `batch` as one update's block to a fresh detector of `cfg` and to one without the overlap
    test, through `screen_batch`: tokens until each gave standing, and blocks after standing was earned (with
    the overlap test) that ended it, of those blocks."""
    with_q, bound_only = _detector(cfg), _detector(cfg, bound_only=True)
    at: list[int | None] = [None, None]
    lost = checks = 0
    for sub, lp in _blocks(batch, logp_old, sender):
        had = with_q.has_standing(sender)
        for i, det in enumerate((with_q, bound_only)):
            screen_batch(det, sub, lp, C=cfg.ftis.C, skip=set())
            if at[i] is None and det.has_standing(sender):
                at[i] = det.tokens(sender)
        checks += had
        lost += had and not with_q.has_standing(sender)
    return at[0], at[1], lost, checks


def _detector(cfg: LearnerConfig, *, bound_only: bool = False,
              origin_of: Callable[[str], str | None] | None = None) -> ForgeryDetector:
    """The learner's detector of `cfg`; `bound_only`: without the overlap tests (the rule before issue 40);
    `origin_of`: pooled by it."""
    return ForgeryDetector(C=cfg.ftis.C, delta=cfg.forgery_delta, window=cfg.forgery_window,
                           margin=cfg.standing_margin, overlap=0.0 if bound_only else cfg.standing_overlap,
                           overlap_block=0.0 if bound_only else cfg.standing_overlap_block, origin_of=origin_of)


def _pooled(cfg: LearnerConfig, honest: dict[str, tuple[Batch, torch.Tensor]]) -> tuple[int, int]:
    """The samplers of `honest` (name -> its groups and the learner's `logp_old`) as identities of one origin, one
    group of each an update (the module docstring's figure): (identity-updates with standing alone and not pooled,
    identity-updates with standing alone)."""
    C = cfg.ftis.C
    pooled, alone = _detector(cfg, origin_of=lambda peer: "one-origin"), _detector(cfg)
    blocks = {name: [peer_blocks(sub, lp, C=C, skip=set())[0].get(name) for sub, lp in _blocks(batch, logp, name)]
              for name, (batch, logp) in honest.items()}  # name -> per group: the detector's block, as screened
    lost = held = 0
    for u in range(min((len(b) for b in blocks.values()), default=0)):
        for det in (pooled, alone):
            det.begin_update()
            for name, values in blocks.items():
                if values[u] is not None:
                    total, tokens, overlap = values[u]
                    det.observe(name, total, tokens, overlap)
        for name in blocks:
            if alone.has_standing(name):
                held += 1
                lost += not pooled.has_standing(name)
    return lost, held



def _blocks(batch: Batch, logp_old: torch.Tensor, sender: str) -> list[tuple[Batch, torch.Tensor]]:
    """One (batch, logp_old) per group, every group's sender set to `sender` (the detector's key)."""
    out = []
    for g in range(len(batch.groups)):
        rows = torch.nonzero(batch.group_of == g).flatten().tolist()
        sub = batch.select(rows)
        out.append((replace(sub, groups=[rebuilt(x, sender=sender) for x in sub.groups]), logp_old[torch.tensor(rows)]))
    return out


def _with_lora(rows: list[PairRow], base: str, lora: str) -> list[PairRow]:
    """The rows with the fresh LoRA as learner and as sampler: its base's numbers (module docstring)."""
    out = list(rows)
    for r in rows:
        if r.learner == base:
            out.append(PairRow(**{**asdict(r), "learner": lora, "same_as": f"{base}<-{r.sampler}"}))
        if r.sampler == base:
            out.append(PairRow(**{**asdict(r), "sampler": lora, "same_as": f"{r.learner}<-{base}"}))
    return out


def _answers(item: Any, tok: Any) -> tuple[list[list[int]], list[bool]]:
    """Issue 40's completions: the answer twice and two wrong answers, each one or two tokens."""
    wrong = "1" if item.answer != "1" else "2"
    texts = (item.answer, item.answer, wrong, wrong + "0")
    return [tok.encode(t, add_special_tokens=False) for t in texts], [True, True, False, False]


def _attacks(learners: dict[str, Learner], tok: Any, scored: dict[str, tuple[Batch, torch.Tensor]],
             sampling: SamplingConfig, pad: int) -> list[AttackRow]:
    """The deflator and the strike against each learner; `scored`: per learner, a batch of another model's
    honest groups and its `logp_old`, with which the turncoat earns standing before it strikes."""
    items = get_task("arith").sample(ATTACK_GROUPS, seed=3000)
    deflated = [_answer_group(it, tok, sampling) for it in items]
    batch = _batch(deflated, pad)
    logp = {name: learner.old_logprobs(batch) for name, learner in learners.items()}  # name -> (N, T)
    right = torch.tensor([r for it in items for r in _answers(it, tok)[1]])  # (N,)
    lowest = torch.stack(list(logp.values())).min(dim=0).values  # (N, T)
    strike_gen = torch.where(right[:, None], lowest - STRIKE_X, 0.0)  # (N, T): x >= 0.8 at every learner
    out = []
    for name, learner in learners.items():
        cfg, lp = learner.cfg, logp[name]
        d = _fractions(batch, lp, batch.logp_gen, cfg.ftis.C)
        s = _fractions(batch, lp, strike_gen, cfg.ftis.C)
        at_q, at_bound, _, _ = _feed(cfg, batch, lp, sender="deflator")
        ended = _strike_after_standing(learner, *scored[name], batch, lp, strike_gen)
        out.append(AttackRow(learner=name, deflator_window=d[0], deflator_max_block=max(d[1]), deflator_mean_v=d[2],
                             deflator_tokens=int(batch.mask.sum()), deflator_standing_bound_only=at_bound,
                             deflator_standing=at_q, strike_window=s[0], strike_max_block=max(s[1]),
                             deflator_blocks=d[1], strike_blocks=s[1], strike_ends_standing=ended))
    return out


def _strike_after_standing(learner: Learner, honest: Batch, honest_old: torch.Tensor, attack: Batch,
                           logp_old: torch.Tensor, strike_gen: torch.Tensor) -> bool:
    """A peer that earned standing with `honest`'s groups (sent again, at most `TURNCOAT_PASSES` times, until it
    does), then `attack`'s first group with `strike_gen`: True when it had standing before that block and not
    after."""
    det, C = _detector(learner.cfg), learner.cfg.ftis.C
    blocks = _blocks(honest, honest_old, "turncoat")
    for sub, lp in blocks * TURNCOAT_PASSES:  # the same honest groups again until they earn standing
        if det.has_standing("turncoat"):
            break
        screen_batch(det, sub, lp, C=C, skip=set())
    (strike, lp), = _blocks(attack, logp_old, "turncoat")[:1]
    rows = torch.nonzero(attack.group_of == 0).flatten()  # (G,)
    had = det.has_standing("turncoat")
    screen_batch(det, replace(strike, logp_gen=strike_gen[rows].clone()), lp, C=C, skip=set())
    return had and not det.has_standing("turncoat")


def _log_ratio(batch: Batch, logp_old: torch.Tensor, logp_gen: torch.Tensor) -> torch.Tensor:
    """x = clamp(logp_old - logp_gen, -20, 20) on the masked tokens, 0 elsewhere: `[N, T]`."""
    m = batch.mask.bool()  # (N, T)
    return torch.where(m, logp_old - logp_gen, 0.0).clamp(-20.0, 20.0)  # (N, T)


def _fractions(batch: Batch, logp_old: torch.Tensor, logp_gen: torch.Tensor,
               C: float) -> tuple[float, list[float], float]:
    """Overlap over all tokens, per group, and the mean of min(exp(x), C)."""
    m = batch.mask.bool()  # (N, T)
    x = _log_ratio(batch, logp_old, logp_gen)  # (N, T)
    inside = m & (x.abs() <= math.log(C))  # (N, T)
    per = [float(inside[batch.group_of == g].sum() / m[batch.group_of == g].sum()) for g in range(len(batch.groups))]
    return float(inside.sum() / m.sum()), per, float(torch.exp(x).clamp(max=C)[m].mean())


def _answer_group(item: Any, tok: Any, sampling: SamplingConfig) -> Group:
    prompt = prompts_for([item], tok)[0].prompt_ids
    completions, _ = _answers(item, tok)
    return Group.build(run_id=RUN_ID, sender="deflator", model_id=RUN_ID, policy_version=0, created_at=time.time(),
                       tokenizer_fp="0" * 32, task_id=item.task_id, item_id=item.item_id, prompt_ids=prompt,
                       temperature=sampling.temperature, completion_ids=completions,
                       logp_gen=[[0.0] * len(c) for c in completions])


def format_overlap(f: OverlapFigures) -> str:
    s = f.sampling
    lines = [f"overlap: tokens with pi_theta / pi_gen in [1/C, C] ({f.preset} preset, {f.groups} groups a sampler, "
             f"T {s['temperature']}, G {s['group_size']}, {s['max_new_tokens']} new tokens; q = {f.q} over the "
             f"window, {f.q_block} over the newest block)",
             f"{'learner':<12}{'sampler':<12}{'tokens':>7}{'window':>8}{'block min':>10}{'block mean':>11}"
             f"{'mean v':>8}{'excess':>8}{'standing at':>13}{'bound only':>11}{'lost':>8}"]
    for r in f.pairs:
        lost = f"{r.lost_after_standing}/{r.checks_after_standing}"
        lines.append(f"{r.learner:<12}{r.sampler:<12}{r.tokens:>7}{r.window:>8.3f}{min(r.blocks):>10.3f}"
                     f"{sum(r.blocks) / len(r.blocks):>11.3f}{r.mean_v:>8.3f}{r.excess_share:>8.3f}"
                     f"{_n(r.tokens_to_standing):>13}{_n(r.tokens_to_standing_bound_only):>11}{lost:>8}"
                     + (f"  (= {r.same_as})" if r.same_as else ""))
    measured = [r for r in f.pairs if not r.same_as]
    n_blocks = sum(len(r.blocks) for r in measured)
    pairs = [sum(f * n for f, n in zip(r.blocks[i:i + 2], r.block_tokens[i:i + 2])) / sum(r.block_tokens[i:i + 2])
             for r in measured for i in range(0, len(r.blocks) - 1, 2)]  # the testnet's update: 2 groups a peer
    deflator = [b for a in f.attacks for b in a.deflator_blocks]
    strike = [b for a in f.attacks for b in a.strike_blocks]
    lines.append("blocks under q (an honest one is a false alarm; a strike's ends standing), q: "
                 + " ".join(f"{q:>6}" for q in Q_SWEEP))
    for label, blocks in (("honest, one group", [b for r in measured for b in r.blocks]),
                          ("honest, two groups", pairs), ("deflator, one group", deflator),
                          ("strike, one group", strike)):
        lines.append(f"  {label:<24}" + " ".join(f"{sum(b < q for b in blocks):>3}/{len(blocks):<2}" for q in Q_SWEEP))
    lines.append(f"a fresh LoRA r16 against its base: max |logp difference| {f.lora_max_abs_diff:.2e}")
    lines.append("pooled per origin (each learner's honest samplers on one origin, one group each an update): "
                 "standing lost to the pool / held alone: "
                 + ", ".join(f"{name} {lost}/{held}" for name, (lost, held) in f.pooled.items()))
    lines.append(f"{'attacked':<12}{'deflator window':>16}{'max block':>10}{'mean v':>8}{'tokens':>7}"
                 f"{'standing, bound only':>21}{'with q':>8}{'strike window':>14}{'max block':>10}"
                 f"{'strike ends it':>15}")
    for a in f.attacks:
        lines.append(f"{a.learner:<12}{a.deflator_window:>16.3f}{a.deflator_max_block:>10.3f}{a.deflator_mean_v:>8.3f}"
                     f"{a.deflator_tokens:>7}{_n(a.deflator_standing_bound_only):>21}{_n(a.deflator_standing):>8}"
                     f"{a.strike_window:>14.3f}{a.strike_max_block:>10.3f}{str(a.strike_ends_standing):>15}")
    lines.append(f"wall time {f.seconds:.0f} s")
    return "\n".join(lines)


def _n(x: int | None) -> str:
    return "never" if x is None else str(x)
