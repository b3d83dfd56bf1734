"""`ftis-node bench attacks`: what of each attack reaches an update, and how fast forgers are caught.

**The attack table.** One receiving node (SmolLM2-135M; the honest peer runs the same
model, so some of its groups carry signal), a real `Node` in process on the loopback
transport (`peers.loopback`), runs its own rounds: the honest and hostile peers post
their groups' bytes to its hub between its publish half and its learn half, so they take
the node's one path (the transport's checks after decode, the intake, the scorer, the
update, the ledger). Each round it trains on its own groups,
an honest peer's and one group of each attack (`attacks.py`), each attack from its own
sender so that what reaches the update (samples with a non-zero effective advantage, and
their largest weight) is told apart per attack. Bans carry over between rounds.

**The detector.** For ordered pairs of models (the learner's, the generator's): honest
groups of the generator (arith, G = 4, 24 tokens, T = 0.7, the testnet's settings) go
through the learner's real update one group at a time (with equal rewards, so nothing is
learned): false alarms are updates that flag the honest peer. Then the same groups with
`logp_gen - 3`: the delay is the number of forged groups before the flag, from a fresh
peer and from one that was honest until then. Pairs: the testnet's three models (SmolLM2
full, the same with a fresh LoRA r16, which computes the same function until it trains,
and the 24-layer sibling), and a divergent pair, SmolLM2 against itself with layers 26-27
dropped.

**Standing** (`standing.py`): 20 fresh identities, short forgeries, a turncoat, a copier
and an honest newcomer against two earned peers, over `standing_rounds` rounds; the 54
strangers of the crowd share one network origin and the newcomer has its own, so the
strangers' draw (`peers/draw.py`, origin first) is measured by origin.

**The crowd with daemons** (`crowd.py`, `crowd_daemons` > 0): the same crowd, earned peers
and newcomer as real swarm nodes, each with its own p2pd and key, against a `Node` on the
real swarm.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from ftis_swarm.config import LearnerConfig, LoRAConfig, NodeConfig, SamplingConfig, SwarmConfig
from ftis_swarm.lab.bench.crowd import CrowdFigures, format_crowd, run_crowd_bench
from ftis_swarm.lab.bench.standing import StandingFigures, format_standing, run_standing_bench
from ftis_swarm.lab.hostile.groups import ATTACKS, FORGERY_SHIFT, attack_groups, prompts_for, rebuilt
from ftis_swarm.learner.batch import ScoredGroup
from ftis_swarm.learner.learner import Learner, apply_lora
from ftis_swarm.models import load_model
from ftis_swarm.node.daemon import Node
from ftis_swarm.peers.intake import within_vocab
from ftis_swarm.peers.ledger import SWARM_PREFIX
from ftis_swarm.peers.loopback import LoopbackHub
from ftis_swarm.rollout import GroupHeader, TransformersBackend
from ftis_swarm.tasks import get_task
from ftis_swarm.wire import encode_group

SAMPLING = SamplingConfig(temperature=0.7, max_new_tokens=24, group_size=4, seed=0)
RUN_ID = "bench"
DIVERGENT_DROP = (26, 27)


@dataclass
class AttackRow:
    attack: str
    sent: int = 0
    reached: int = 0
    """Samples in an update with a non-zero effective advantage."""
    max_weight: float = 0.0
    """Their largest per-token weight."""
    stopped_by: dict[str, int] = field(default_factory=dict)


@dataclass
class DetectorRow:
    learner: str
    generator: str
    honest_mean: float
    """Mean of min(pi_theta / pi_gen, C) over the honest groups' tokens (at most 1 in expectation)."""
    honest_tokens: int
    false_alarms: int
    checks: int
    forged_mean: float
    delay_fresh: int | None
    """Forged groups until flagged, from a peer the learner has not seen (None: never within the groups)."""
    delay_turncoat: int | None
    """The same for a peer that sent the honest groups first."""


@dataclass
class AttackFigures:
    preset: str
    rounds: int
    attacks: list[AttackRow]
    detector: list[DetectorRow]
    weights_finite: bool
    banned: list[str]
    """Senders banned at least once."""
    seconds: float
    standing: StandingFigures | None = None
    strangers_share: float = 0.25
    crowd: CrowdFigures | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Models:
    receiver: str
    honest: str
    hostile: str
    pairs: dict[str, Callable[[], Any]]
    """Name -> loader of (model, tokenizer) for the detector, the learner side."""
    same_as: dict[str, str]
    """Detector models whose samples are another's (a fresh LoRA samples as its base)."""
    divergent: tuple[str, str]


def run_attack_bench(*, preset: str, workdir: Path, rounds: int = 2, honest_groups: int = 24,
                     forged_groups: int = 8, threads: int = 1, standing_rounds: int = 6, crowd_daemons: int = 0,
                     crowd_rounds: int = 6, progress: Callable[[str], None] = lambda s: None) -> AttackFigures:
    """The attack table over `rounds` rounds, the detector on `honest_groups` and `forged_groups` per pair,
    then the standing part over `standing_rounds` rounds (0: none), then the crowd of `crowd_daemons`
    identities with daemons over `crowd_rounds` rounds (0 identities: none)."""
    if (rounds < 1 or honest_groups < 1 or forged_groups < 1 or threads < 1 or standing_rounds < 0
            or crowd_daemons < 0 or crowd_rounds < 1):
        raise ValueError("rounds, honest_groups, forged_groups, threads and crowd_rounds must be at least 1, "
                         "standing_rounds and crowd_daemons 0 or more")
    import torch

    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    models = _models(preset, workdir)
    progress("attack table")
    rows, finite, banned = _attack_table(models, rounds=rounds, workdir=workdir, progress=progress)
    progress("detector")
    det = _detector(models, honest_groups=honest_groups, forged_groups=forged_groups, progress=progress)
    standing = None
    if standing_rounds:
        progress("standing")
        standing = run_standing_bench(models.receiver, models.honest, rounds=standing_rounds, workdir=workdir,
                                      progress=progress)
    crowd = None
    if crowd_daemons:
        progress("crowd with daemons")
        crowd = run_crowd_bench(models.receiver, models.honest, crowd=crowd_daemons, rounds=crowd_rounds,
                                workdir=workdir, signal=_signal_model(preset, workdir), progress=progress)
    return AttackFigures(preset, rounds, rows, det, finite, banned, time.perf_counter() - t0, standing, crowd=crowd)


def _models(preset: str, workdir: Path) -> Models:
    if preset == "default":
        sibling = str(_divergent_sibling())
        loaders = {"full": lambda: load_model("smollm2-135m"), "lora": lambda: _lora(*load_model("smollm2-135m")),
                   "mini": lambda: load_model("smollm2-mini"), "drop26-27": lambda: load_model(sibling)}
        return Models("smollm2-135m", "smollm2-135m", "smollm2-135m", loaders, {"lora": "full"}, ("full", "drop26-27"))
    if preset == "tiny":
        from ftis_swarm.models.tiny import build_tiny_qwen2

        a = str(build_tiny_qwen2(workdir / "tiny-a", hidden_size=32, num_layers=1, seed=1))
        b = str(build_tiny_qwen2(workdir / "tiny-b", hidden_size=64, num_layers=2, seed=2))
        loaders = {"tiny-a": lambda: load_model(a), "tiny-b": lambda: load_model(b),
                   "tiny-b-lora": lambda: _lora(*load_model(b))}
        return Models(a, b, a, loaders, {"tiny-b-lora": "tiny-b"}, ("tiny-a", "tiny-b"))
    raise ValueError(f"unknown preset {preset!r}; expected 'default' or 'tiny'")


def _signal_model(preset: str, workdir: Path) -> str | None:
    """The model of the crowd part's earned peers' credit: the tiny honest model never writes a number (no
    signal, so no credit); a tiny model taught arith's answer form does. SmolLM2's own groups carry signal."""
    if preset != "tiny":
        return None
    from ftis_swarm.ops.taught import build_tiny_arith_model

    return str(build_tiny_arith_model(workdir / "tiny-arith"))


def _lora(model: Any, tokenizer: Any) -> tuple[Any, Any]:
    return apply_lora(model, LearnerConfig(lora=LoRAConfig(rank=16))), tokenizer


def _divergent_sibling() -> Path:
    from ftis_swarm.models.cache import cached_checkpoint
    from ftis_swarm.models.smollm2 import converted_smollm2, drop_layers

    keep = tuple(i for i in range(30) if i not in DIVERGENT_DROP)
    src = converted_smollm2()
    return cached_checkpoint("smollm2-drop26-27-v1", lambda out: drop_layers(src, out, keep))


def _backend(model: Any, tokenizer: Any, sender: str) -> TransformersBackend:
    return TransformersBackend(model=model, tokenizer=tokenizer, header=GroupHeader(RUN_ID, sender, "bench"))


def _attack_table(m: Models, *, rounds: int, workdir: Path,
                  progress: Callable[[str], None]) -> tuple[list[AttackRow], bool, list[str]]:
    """The receiver is a real `Node` on a loopback hub; the honest and hostile peers post their bytes to the hub.

    So every group takes the node's own path: the transport's checks after decode (the
    wire decoder with the node's token bound, sender and run), the intake (`Budget.of` this
    config: 4x and 2x the node's own completion tokens), the scorer, the update and the
    ledger, whose counts per sender are the table's `stopped_by` (a transport reason as
    `wire`; `peer_refused` when the transport no longer reads a banned sender).
    """
    cfg = NodeConfig(model=m.receiver, task="arith", rounds=rounds, prompts_per_round=2, sampling=SAMPLING,
                     # every attack comes from an identity without standing: the whole budget is theirs here, so
                     # that each attack meets its own check (the strangers' share is the standing part's to measure)
                     learner=LearnerConfig(lr=2e-6, strangers_share=1.0), max_failed_updates=rounds + 1,
                     swarm=SwarmConfig(run_id=RUN_ID), run_dir=workdir / "receiver", eval_every=0)
    hub = LoopbackHub()
    node = Node(cfg, swarm=hub.member("self"))
    try:
        return _attack_rounds(node, hub, m, rounds=rounds, progress=progress)
    finally:
        node.close()


def _attack_rounds(node: Node, hub: LoopbackHub, m: Models, *, rounds: int,
                   progress: Callable[[str], None]) -> tuple[list[AttackRow], bool, list[str]]:
    p = node.parts
    tok, bound, ledger = p.tokenizer, p.token_bound, p.peer_ledger
    honest, hostile = (_backend(load_model(name)[0], tok, sender) for name, sender in ((m.honest, "honest"),
                                                                                     (m.hostile, "hostile")))
    rows = {name: AttackRow(name) for name in ("honest", *ATTACKS)}
    arith = get_task("arith")
    for r in range(1, rounds + 1):
        progress(f"round {r} of {rounds}")
        mine = node.publish_round(r)
        peers = [g for g in honest.generate(prompts_for(arith.sample(2, seed=200 + r - 1), tok), 4, SAMPLING)
                 if within_vocab(g, bound)]  # what an honest node publishes
        attacks = attack_groups(hostile, tok, seed=r - 1, token_bound=bound, max_new_tokens=8)
        peers += [rebuilt(g, sender=f"hostile-{name}") for name, g in attacks.items()]
        for g in peers:
            rows[_row(g.sender)].sent += 1
            hub.inject(g.sender, encode_group(g))
        node.learn_published(mine)
        learned = node.last_learning
        assert learned is not None
        for sender, src in node.learning.sources.items():
            if f"used@{src}" in learned.metrics:
                row = rows[_row(sender)]
                row.reached += int(learned.metrics[f"used@{src}"])
                row.max_weight = max(row.max_weight, learned.metrics[f"max_weight_used@{src}"])
    accounts = ledger.snapshot()
    refused = p.swarm.counters().get("refused_by_peer", {})
    for sender in set(accounts) | set(refused):
        row = rows[_row(sender)]
        for reason, n in accounts.get(sender, {}).get("counts", {}).items():
            _stop(row, "wire" if reason.startswith(SWARM_PREFIX) else reason, n)
        _stop(row, "peer_refused", refused.get(sender, 0))
    finite = all(bool(x.isfinite().all()) for x in p.learner.model.parameters())
    return list(rows.values()), finite, sorted(peer for peer, rec in accounts.items() if rec["bans"])


def _row(sender: str) -> str:
    return sender.removeprefix("hostile-")


def _stop(row: AttackRow, reason: str, n: int) -> None:
    if n:
        row.stopped_by[reason] = row.stopped_by.get(reason, 0) + n


def _detector(m: Models, *, honest_groups: int, forged_groups: int,
              progress: Callable[[str], None]) -> list[DetectorRow]:
    loaded = {name: load() for name, load in m.pairs.items()}
    tok = next(iter(loaded.values()))[1]
    items = get_task("arith").sample(honest_groups, seed=7)
    samples: dict[str, list] = {}
    for name, (model, _) in loaded.items():
        if name in m.same_as:
            continue
        progress(f"sampling {honest_groups} groups from {name}")
        samples[name] = _backend(model, tok, name).generate(prompts_for(items, tok), SAMPLING.group_size, SAMPLING)
    testnet = [n for n in loaded if n not in m.divergent or n == m.divergent[0]]
    pairs = [(a, b) for a in testnet for b in testnet if a != b] + [m.divergent, m.divergent[::-1]]
    out = []
    for learner_name, gen in pairs:
        progress(f"detector: {learner_name} learning from {gen}")
        groups = samples[m.same_as.get(gen, gen)]
        forged = [rebuilt(g, logp_gen=[lp + FORGERY_SHIFT for lp in g.logp_gen]) for g in groups[:forged_groups]]
        out.append(_pair(loaded[learner_name][0], tok, learner_name, gen, groups, forged))
    return out


def _pair(model: Any, tok: Any, learner_name: str, gen: str, groups: list, forged: list) -> DetectorRow:
    learner = Learner(model, cfg=LearnerConfig(), pad_id=tok.pad_token_id or 0)

    def feed(g, sender: str) -> tuple[bool, float]:
        item = ScoredGroup.vertical(rebuilt(g, sender=sender), [0.0] * g.G, offpolicy=True, filterable=True, source=1)
        metrics = learner.update([item])
        return metrics.get("withheld_forgery", 0) > 0, learner.detector.stat(sender).mean

    alarms = sum(feed(g, "honest")[0] for g in groups)
    stat = learner.detector.stat("honest")
    honest_mean, honest_tokens = stat.mean, stat.tokens
    fresh = [feed(g, "forger") for g in forged]
    turncoat = [feed(g, "honest")[0] for g in forged]
    return DetectorRow(learner_name, gen, honest_mean, honest_tokens, alarms, len(groups), fresh[-1][1],
                       _first(f for f, _ in fresh), _first(turncoat))


def _first(flags: Any) -> int | None:
    for i, flagged in enumerate(flags, start=1):
        if flagged:
            return i
    return None


def format_attacks(f: AttackFigures) -> str:
    lines = [f"attacks on one receiving node ({f.preset} preset, {f.rounds} rounds, one group of each a round)",
             f"{'attack':<18}{'sent':>6}{'reached':>9}{'max w':>8}  stopped by"]
    for r in f.attacks:
        stops = ", ".join(f"{k} {v}" for k, v in sorted(r.stopped_by.items())) or "-"
        lines.append(f"{r.attack:<18}{r.sent:>6}{r.reached:>9}{r.max_weight:>8.3f}  {stops}")
    lines.append(f"receiver's weights finite: {f.weights_finite}; banned: {', '.join(f.banned) or 'none'}")
    lines.append("")
    lines.append("forgery detector (delta 1e-6, C 2): honest groups one per update, then forged (logp_gen - 3)")
    lines.append(f"{'learner':<12}{'generator':<12}{'honest mean':>12}{'tokens':>8}{'false alarms':>14}"
                 f"{'forged mean':>12}{'delay':>7}{'turncoat':>10}")
    for d in f.detector:
        lines.append(f"{d.learner:<12}{d.generator:<12}{d.honest_mean:>12.3f}{d.honest_tokens:>8}"
                     f"{f'{d.false_alarms}/{d.checks}':>14}{d.forged_mean:>12.3f}{_n(d.delay_fresh):>7}"
                     f"{_n(d.delay_turncoat):>10}")
    if f.standing is not None:
        lines += ["", format_standing(f.standing, share=f.strangers_share)]
    if f.crowd is not None:
        lines += ["", format_crowd(f.crowd)]
    lines.append(f"wall time {f.seconds:.0f} s")
    return "\n".join(lines)


def _n(x: int | None) -> str:
    return "never" if x is None else str(x)

