"""One run of the experiment: one arm, one seed, two learners in this process, each a node's.

Each learner is the learning half of a node built from a `NodeConfig` (`learner_config`):
the node's own learner (`node.components.build_learner`, seeded by the node's seed), its
prompt schedule and sampling seeds (`node.rollouts`), its round (`node.learning.learn_round`:
admission, scoring, labels, update, ledger, health, and the version guard that serves the
new weights only when a step was taken). Only the swarm is replaced: the groups cross
through the wire codec here (encoded once by the sender, decoded and fingerprint-checked
by the receiver, bytes counted). Learner `i` of seed `s` is the node with seed
`learner_seed(s, i)`, so the `solo` arm of learner A with seed `s` trains exactly as a lone
`ftis-node join --seed s` with the same config (a test holds this). A round is synchronous:
both learners generate with the policy they serve (or, in the vertical arms with
`max_staleness` k, the one k rounds back: `own_groups`), then each learns on its own groups plus
what it received. The horizontal arm, which a node refuses, mixes each group's halves and
runs the node's `score` and `update_and_serve` with `allow_mixed`. The functions here run
in pool processes, so they take the config as JSON and return plain dicts.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch

from ftis_swarm.lab.experiment.arms import ExperimentConfig, arm_spec
from ftis_swarm.lab.experiment.heldout import heldout_accuracy, heldout_items
from ftis_swarm.lab.experiment.heldout import sample_groups, sampled_rewards
from ftis_swarm.config import FTISConfig, LearnerConfig, LoRAConfig, NodeConfig, SamplingConfig, SwarmConfig, WireConfig
from ftis_swarm.learner.batch import ScoredGroup
from ftis_swarm.learner.learner import Learner
from ftis_swarm.node.scoring import TaskCache
from ftis_swarm.models import load_model
from ftis_swarm.node.components import build_learner
from ftis_swarm.node.health import UpdateHealth
from ftis_swarm.node.learning import Learning, RoundLearning, learn_round, node_admission, score, update_and_serve
from ftis_swarm.peers.ledger import PeerLedger
from ftis_swarm.node.rollouts import generate_groups, generate_own, group_header, node_sampling, render_prompts, round_items
from ftis_swarm.node.serving import Serving
from ftis_swarm.rollout import GroupHeader, TransformersBackend
from ftis_swarm.tasks import Task, get_task
from ftis_swarm.wire import Group, decode_group, encode_group, tokenizer_fingerprint

log = logging.getLogger(__name__)
RUN_ID = "experiment"
LEARNER_SEED_STRIDE = 1_000_000
"""Learner i of seed s is the node with seed `s + LEARNER_SEED_STRIDE * i` (A: the seed itself)."""


def learner_seed(seed: int, index: int) -> int:
    return seed + LEARNER_SEED_STRIDE * index


def learner_config(cfg: ExperimentConfig, index: int, seed: int, mode: str, *, prompts_factor: int = 1) -> NodeConfig:
    """The node config learner `index` trains as under loss `mode` with run seed `seed`
    (`prompts_factor` times the config's prompts a round: the `solo-2x` arm)."""
    spec = cfg.learners[index]
    lora = LoRAConfig(rank=spec.lora_rank, alpha=2.0 * spec.lora_rank) if spec.lora_rank else None
    return NodeConfig(
        model=spec.model, task=cfg.task, rounds=cfg.rounds, prompts_per_round=cfg.prompts_per_round * prompts_factor,
        seed=learner_seed(seed, index), backend="transformers",
        sampling=SamplingConfig(temperature=cfg.temperature, max_new_tokens=cfg.max_new_tokens,
                                group_size=cfg.group_size),
        learner=LearnerConfig(lr=spec.lr, dtype=cfg.dtype, micro_batch=cfg.micro_batch,
                              activation_checkpointing=cfg.activation_checkpointing, lora=lora,
                              ftis=FTISConfig(mode=mode)),
        swarm=SwarmConfig(run_id=RUN_ID, wire=WireConfig(max_group_size=max(64, cfg.group_size))),
    )


@dataclass
class Peer:
    """One learner: a node's learning half, its rollout backend (sharing its model object) and its config."""

    name: str
    cfg: NodeConfig
    backend: TransformersBackend
    learning: Learning
    staleness: int = 0
    """The arm's `max_staleness` k (vertical rounds)."""
    ahead: dict[int, tuple[list[Group], Counter]] = field(default_factory=dict)
    """With `max_staleness` k: own groups (and their counts) generated before their round, by round."""

    @property
    def tokenizer(self) -> Any:
        return self.learning.tokenizer

    @property
    def learner(self) -> Learner:
        return self.learning.learner

    @property
    def generator(self) -> str:
        return f"{self.name}@{self.backend.policy_version}"

    def receive(self, data: bytes) -> Group:
        """A peer's encoded group, decoded and checked as a node would (vocabulary, tokenizer)."""
        group = decode_group(data, vocab_size=self.backend.vocab_size, limits=self.cfg.swarm.wire)
        if group.tokenizer_fp != self.backend.tokenizer_fp:
            raise ValueError(f"{self.name} got a group with another tokenizer fingerprint ({group.tokenizer_fp})")
        return group


def learner_device(index: int) -> str:
    """Learner `index`'s device: GPU `index` modulo the GPUs present (one GPU: both share it), else the CPU."""
    n = torch.cuda.device_count()
    return f"cuda:{index % n}" if n else "cpu"


def node_learner(name: str, cfg: NodeConfig, *, device: str) -> Peer:
    """The node's learning half for `cfg`, without a swarm: `name` stands for its peer id."""
    model, tokenizer, learner = build_learner(cfg, device=device)
    backend = TransformersBackend(model=learner.model, tokenizer=tokenizer, header=group_header(cfg, name))
    learning = Learning(me=name, learner=learner, tokenizer=tokenizer, tasks=TaskCache(),
                        admission=node_admission(cfg, tokenizer_fingerprint(tokenizer)),
                        serving=Serving(learner, backend, shares_model=True),
                        peer_ledger=PeerLedger(cfg.ledger), health=UpdateHealth(cfg.max_failed_updates))
    return Peer(name, cfg, backend, learning)


def eval_items(cfg: ExperimentConfig, task: Task) -> list:
    """The fixed held-out set: `eval_items` test items, or every distinct one of the test split."""
    n = cfg.eval_items or task.size("test")
    if not n:
        raise ValueError(f"task {task.name} has no fixed test split; set eval_items")
    return heldout_items(task, n, cfg.eval_seed)


def evaluate(model: Any, tokenizer: Any, task: Task, items: list, cfg: ExperimentConfig, *, eos_ids: Any,
             pad_id: int, sender: str) -> dict[str, Any]:
    """Greedy pass@1 (`accuracy`, per item `greedy`) and, with `eval_samples` k, per item how many of k
    samples are right (`sampled`, `sampled_accuracy`); the same items and sampling seed in every arm."""
    was_training = model.training
    model.eval()
    try:
        out = heldout_accuracy(model, tokenizer, task, items, max_new_tokens=cfg.eval_max_new_tokens,
                               eos_ids=eos_ids, pad_id=pad_id)
        out["greedy"] = [int(v) for v in out["verdicts"]]
        k = cfg.eval_samples
        if k:
            groups = sample_groups(model, tokenizer, task, items, samples=k,
                                   temperature=cfg.eval_temperature or cfg.temperature,
                                   max_new_tokens=cfg.eval_max_new_tokens, seed=cfg.eval_seed, sender=sender)
            out["sampled"] = [int(sum(r)) for r in sampled_rewards(tokenizer, task, items, groups)]
            out["samples"] = k
            out["sampled_accuracy"] = sum(out["sampled"]) / (k * len(items)) if items else 0.0
    finally:
        model.train(was_training)
    return out


def start_evaluation(cfg_json: str) -> dict[str, Any]:
    """Held-out accuracy of both learners' initial weights (shared by every run and seed: the
    evaluation is seeded by `eval_seed` alone, so it would repeat the same figures per seed)."""
    cfg = ExperimentConfig.model_validate_json(cfg_json)
    task = get_task(cfg.eval_task or cfg.task)
    items = eval_items(cfg, task)
    out: dict[str, Any] = {"round": 0}
    for name, spec in zip(cfg.learner_names, cfg.learners):
        same = [n for n, s in zip(cfg.learner_names, cfg.learners) if s.model == spec.model and n in out]
        if same:  # a LoRA twin starts as its base model: the same greedy answers
            out[name] = out[same[0]]
            continue
        model, tok = load_model(spec.model, device=learner_device(cfg.learner_names.index(name)))
        backend = TransformersBackend(model=model, tokenizer=tok, header=GroupHeader(RUN_ID, name, spec.model))
        t0 = time.perf_counter()
        out[name] = evaluate(model, tok, task, items, cfg, eos_ids=backend.eos_ids, pad_id=backend.pad_id,
                             sender=name)
        out[name]["seconds"] = time.perf_counter() - t0
        del model, backend
    return out


def run_arm(cfg_json: str, arm: str, seed: int, *, weights_dir: Optional[Path] = None) -> dict[str, Any]:
    """Trains both learners for `cfg.rounds` rounds under `arm`; returns per-round records and evals.

    Each record carries `optimizer_step` (1 when the learner's policy version advanced that round).
    With `weights_dir`, each learner's final weights (or adapter) are written to
    `weights_dir/<name>/model` (or `adapter`), as a node's checkpoint holds them.
    """
    cfg = ExperimentConfig.model_validate_json(cfg_json)
    spec = arm_spec(arm)
    t0 = time.perf_counter()
    task = get_task(cfg.task)
    peers = [node_learner(name, learner_config(cfg, i, seed, spec.mode, prompts_factor=spec.prompts_factor),
                          device=learner_device(i))
             for i, name in enumerate(cfg.learner_names)]
    for p in peers:
        p.staleness = cfg.max_staleness if spec.staleness is None else spec.staleness
    eval_task = get_task(cfg.eval_task) if cfg.eval_task else task
    eval_set = eval_items(cfg, eval_task)
    rounds: list[dict[str, Any]] = []
    evals: list[dict[str, Any]] = []
    step = {"solo": solo_round, "vertical": vertical_round, "horizontal": horizontal_round}[spec.kind]
    versions = {p.name: p.learner.policy_version for p in peers}
    for r in range(1, cfg.rounds + 1):
        records = step(peers, task, cfg, r)
        for x in records:
            x["optimizer_step"] = int(x["policy_version"] > versions[x["learner"]])
            versions[x["learner"]] = x["policy_version"]
        rounds.extend(records)
        log.info("%s seed %d round %d: %s", arm, seed, r,
                 ", ".join(f"{x['learner']} reward {_fmt(x['reward'])}" for x in records))
        if r in cfg.eval_rounds:
            ev: dict[str, Any] = {"round": r}
            for p in peers:
                ev[p.name] = evaluate(p.backend.model, p.tokenizer, eval_task, eval_set, cfg,
                                      eos_ids=p.backend.eos_ids, pad_id=p.backend.pad_id, sender=p.name)
            evals.append(ev)
    if weights_dir is not None:
        for p in peers:
            p.learner.save_weights(Path(weights_dir) / p.name / ("adapter" if p.learner.is_lora else "model"))
    return {"arm": arm, "kind": spec.kind, "mode": spec.mode, "seed": seed, "rounds": rounds, "evals": evals,
            "threads": torch.get_num_threads(), "seconds": time.perf_counter() - t0}


def _fmt(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.2f}"


def _mean(xs: list) -> Optional[float]:
    return float(np.mean(xs)) if len(xs) else None


def _record(peer: Peer, r: int, items: list[ScoredGroup], metrics: dict[str, float], **extra: Any) -> dict[str, Any]:
    own = [float(x) for it in items for x in it.rewards[~it.offpolicy]]
    peer_r = [float(x) for it in items for x in it.rewards[it.offpolicy]]
    generators = [len(set(it.generators)) for it in items] or [0]
    return {
        "round": r,
        "learner": peer.name,
        "policy_version": peer.learner.policy_version,
        "reward": _mean(own),
        "peer_reward": _mean(peer_r),
        "groups": len(items),
        "mixed_reward_groups": int(sum(float(np.std(it.rewards)) > 0 for it in items)),
        "generators_min": min(generators),
        "generators_max": max(generators),
        "completion_tokens": int(sum(g.group.num_completion_tokens for g in items)),
        **extra,
        **metrics,
    }


def _learned_record(peer: Peer, r: int, learned: RoundLearning, generated: Counter, **extra: Any) -> dict[str, Any]:
    """The round's record: `generated` counts generation's refusals, `learned` the scorer's and the health check's."""
    record = _record(peer, r, learned.items, learned.metrics,
                     **{**generated, **learned.counts, **learned.health, **extra})
    record.update(reward=_mean(learned.own_rewards), peer_reward=_mean(learned.peer_rewards))  # stale own is own
    return record


def solo_round(peers: list[Peer], task: Task, cfg: ExperimentConfig, r: int) -> list[dict[str, Any]]:
    """Each learner's round as a lone node's: its own groups, then the node's learning half."""
    out = []
    for p in peers:
        counts: Counter = Counter()
        t0 = time.perf_counter()
        own = generate_own(p.backend, task, p.tokenizer, p.cfg, r, counts)
        t_gen = time.perf_counter()
        learned = learn_round(p.learning, r, own, [])
        out.append(_learned_record(p, r, learned, counts, bytes_sent=0, bytes_received=0, time_generate=t_gen - t0,
                                   time_learn=time.perf_counter() - t_gen))
    return out


def own_groups(p: Peer, task: Task, cfg: ExperimentConfig, r: int, counts: Counter) -> list[Group]:
    """Round `r`'s own groups; with `max_staleness` k, round r + k's are generated now, before round r learns.

    The node's pipeline (node/pipeline.py) in sequence: round j's groups come from the weights
    after round j - k - 1's update (the first k rounds are generated when they start), with the
    same generate calls in the same order, so they lag the learner by up to k versions.
    """
    k = p.staleness
    groups, made = p.ahead.pop(r, (None, Counter()))
    if groups is None:
        groups = generate_own(p.backend, task, p.tokenizer, p.cfg, r, made)
    counts.update(made)
    if k and r + k <= cfg.rounds and r + k not in p.ahead:
        later: Counter = Counter()
        p.ahead[r + k] = (generate_own(p.backend, task, p.tokenizer, p.cfg, r + k, later), later)
    return groups


def vertical_round(peers: list[Peer], task: Task, cfg: ExperimentConfig, r: int) -> list[dict[str, Any]]:
    """Both learners generate, their groups cross the codec, then each learns as a node with one peer."""
    own, counts, t_gen = [], [], []
    for p in peers:
        counts.append(Counter())
        t0 = time.perf_counter()
        own.append(own_groups(p, task, cfg, r, counts[-1]))
        t_gen.append(time.perf_counter() - t0)
    sent = [[encode_group(g) for g in groups] for groups in own]
    out = []
    for i, p in enumerate(peers):
        received = [p.receive(b) for b in sent[1 - i]]
        t0 = time.perf_counter()
        learned = learn_round(p.learning, r, own[i], received)
        out.append(_learned_record(p, r, learned, counts[i], bytes_sent=sum(map(len, sent[i])),
                                   bytes_received=sum(map(len, sent[1 - i])), time_generate=t_gen[i],
                                   time_learn=time.perf_counter() - t0))
    return out


def merge_halves(own: Group, peer: Group, sender: str) -> Group:
    """One horizontal group: this learner's completions first, then the peer's, for the same prompt."""
    if own.item_id != peer.item_id or not np.array_equal(own.prompt_ids, peer.prompt_ids):
        raise ValueError(f"halves of different prompts: {own.item_id} and {peer.item_id}")
    return Group.build(
        run_id=own.run_id, sender=sender, model_id=f"{own.model_id}+{peer.model_id}",
        policy_version=own.policy_version, created_at=max(own.created_at, peer.created_at),
        tokenizer_fp=own.tokenizer_fp, task_id=own.task_id, item_id=own.item_id, prompt_ids=own.prompt_ids,
        temperature=own.temperature, completion_ids=list(own.completion_ids) + list(peer.completion_ids),
        logp_gen=list(own.logp_gen) + list(peer.logp_gen),
    )


def horizontal_round(peers: list[Peer], task: Task, cfg: ExperimentConfig, r: int) -> list[dict[str, Any]]:
    """Both learners take the union of their round's prompts and generate G/2 each; each group mixes the halves."""
    shared = [it for p in peers for it in round_items(task, p.cfg, r)]
    half = cfg.group_size // 2
    gens = [p.generator for p in peers]  # the policies that generate this round
    own, sent, t_gen = [], [], []
    for p in peers:
        t0 = time.perf_counter()
        groups = generate_groups(p.backend, render_prompts(task, p.tokenizer, shared), half, node_sampling(p.cfg),
                                 Counter(), r=r)
        t_gen.append(time.perf_counter() - t0)
        own.append(groups)
        sent.append([encode_group(g) for g in groups])
    out = []
    for i, p in enumerate(peers):
        other = peers[1 - i]
        received = [p.receive(b) for b in sent[1 - i]]
        merged = [merge_halves(a, b, sender=f"{p.name}+{other.name}") for a, b in zip(own[i], received)]
        t0 = time.perf_counter()
        counts: Counter = Counter()
        scored = score(p.learning, merged, counts)
        items = [
            ScoredGroup(group=g, rewards=rw, offpolicy=np.repeat([False, True], half),
                        source=np.repeat([0, p.learning.source(other.name)], half).astype(np.int64),
                        generators=(gens[i],) * half + (gens[1 - i],) * half)
            for g, rw in zip(scored.groups, scored.rewards)
        ]
        metrics, health = update_and_serve(p.learning, r, items, own_groups=len(items), allow_mixed=True)
        out.append(_record(p, r, items, metrics, **{**counts, **health}, bytes_sent=sum(map(len, sent[i])),
                           bytes_received=sum(map(len, sent[1 - i])), time_generate=t_gen[i],
                           time_learn=time.perf_counter() - t0))
    return out
