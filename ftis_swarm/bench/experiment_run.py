"""One run of the experiment: one arm, one seed, two learners in this process.

A round is synchronous: both learners generate with the policy they serve, the groups
cross through the wire codec (encoded once by the sender, decoded and fingerprint-checked
by the receiver, bytes counted), each learner scores every group with its own verifier,
then each makes one F-TIS update on its own groups (on-policy) plus what it received
(off-policy, source 1), and its backend's policy version follows. The functions here run in
pool processes, so they take the config as JSON and return plain dicts.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import torch

from ftis_swarm.bench.experiment import ExperimentConfig, LearnerSpec, parse_arm
from ftis_swarm.bench.experiment_eval import heldout_accuracy, heldout_items
from ftis_swarm.config import FTISConfig, LearnerConfig, LoRAConfig, SamplingConfig, WireConfig
from ftis_swarm.learner.batch import ScoredGroup
from ftis_swarm.learner.learner import Learner, apply_lora
from ftis_swarm.learner.rewards import TaskCache, score_groups
from ftis_swarm.learner.sharding import base_dtype
from ftis_swarm.models import load_model
from ftis_swarm.rollout import GroupHeader, PromptRequest, TransformersBackend
from ftis_swarm.tasks import Task, TaskItem, get_task
from ftis_swarm.wire import Group, decode_group, encode_group

log = logging.getLogger(__name__)
RUN_ID = "experiment"


@dataclass
class Peer:
    """One learner with its rollout backend (sharing its model object) and its own task copy."""

    name: str
    tokenizer: Any
    backend: TransformersBackend
    learner: Learner
    tasks: TaskCache
    limits: WireConfig

    @property
    def generator(self) -> str:
        return f"{self.name}@{self.backend.policy_version}"

    def receive(self, data: bytes) -> Group:
        """A peer's encoded group, decoded and checked as a node would (vocabulary, tokenizer)."""
        group = decode_group(data, vocab_size=self.backend.vocab_size, limits=self.limits)
        if group.tokenizer_fp != self.backend.tokenizer_fp:
            raise ValueError(f"{self.name} got a group with another tokenizer fingerprint ({group.tokenizer_fp})")
        return group

    def score(self, groups: Sequence[Group]) -> list[np.ndarray]:
        """This learner's own rewards for `groups`, in order (every group must be scorable)."""
        scored = score_groups(groups, self.tokenizer, self.tasks)
        if scored.rejected or len(scored.groups) != len(groups):
            raise RuntimeError(f"{self.name} could not score every group: {dict(scored.rejected)}")
        return scored.rewards


def learner_device(index: int) -> str:
    """Learner `index`'s device: GPU `index` modulo the GPUs present (one GPU: both share it), else the CPU."""
    n = torch.cuda.device_count()
    return f"cuda:{index % n}" if n else "cpu"


def build_peer(name: str, spec: LearnerSpec, cfg: ExperimentConfig, mode: str) -> Peer:
    lcfg = LearnerConfig(lr=spec.lr, dtype=cfg.dtype, micro_batch=cfg.micro_batch,
                         activation_checkpointing=cfg.activation_checkpointing,
                         lora=LoRAConfig(rank=spec.lora_rank, alpha=2.0 * spec.lora_rank) if spec.lora_rank else None,
                         ftis=FTISConfig(mode=mode))
    model, tokenizer = load_model(spec.model, dtype=base_dtype(lcfg),
                                  device=learner_device(cfg.learner_names.index(name)))
    model = apply_lora(model, lcfg)
    header = GroupHeader(run_id=RUN_ID, sender=name, model_id=spec.model + (f"+lora{spec.lora_rank}" if spec.lora_rank else ""))
    backend = TransformersBackend(model=model, tokenizer=tokenizer, header=header)
    learner = Learner(model, cfg=lcfg, pad_id=backend.pad_id)
    return Peer(name, tokenizer, backend, learner, TaskCache(), WireConfig(max_group_size=max(64, cfg.group_size)))


def round_items(task: Task, cfg: ExperimentConfig, seed: int, r: int, index: int) -> list[TaskItem]:
    """Learner `index`'s own prompts in round `r`: the same in every arm for the same seed."""
    return task.sample(cfg.prompts_per_round, seed=(seed * 10_000 + r) * 2 + index, split="train")


def _prompts(peer: Peer, task: Task, items: Sequence[TaskItem]) -> list[PromptRequest]:
    return [PromptRequest(it.task_id, it.item_id, task.render_prompt(peer.tokenizer, it)) for it in items]


def _sampling(cfg: ExperimentConfig, seed: int, index: int, G: int) -> SamplingConfig:
    return SamplingConfig(temperature=cfg.temperature, max_new_tokens=cfg.max_new_tokens, group_size=max(2, G),
                          seed=seed * 10 + index)


def start_evaluation(cfg_json: str) -> dict[str, Any]:
    """Held-out accuracy of both learners' initial weights (shared by every run)."""
    cfg = ExperimentConfig.model_validate_json(cfg_json)
    task = get_task(cfg.eval_task or cfg.task)
    items = heldout_items(task, cfg.eval_items, cfg.eval_seed)
    out: dict[str, Any] = {"round": 0}
    for name, spec in zip(cfg.learner_names, cfg.learners):
        same = [n for n, s in zip(cfg.learner_names, cfg.learners) if s.model == spec.model and n in out]
        if same:  # a LoRA twin starts as its base model: the same greedy answers
            out[name] = out[same[0]]
            continue
        model, tok = load_model(spec.model, device=learner_device(cfg.learner_names.index(name)))
        backend = TransformersBackend(model=model, tokenizer=tok, header=GroupHeader(RUN_ID, name, spec.model))
        t0 = time.perf_counter()
        out[name] = heldout_accuracy(model, tok, task, items, max_new_tokens=cfg.eval_max_new_tokens,
                                     eos_ids=backend.eos_ids, pad_id=backend.pad_id)
        out[name]["seconds"] = time.perf_counter() - t0
        del model, backend
    return out


def run_arm(cfg_json: str, arm: str, seed: int) -> dict[str, Any]:
    """Trains both learners for `cfg.rounds` rounds under `arm`; returns per-round records and evals."""
    cfg = ExperimentConfig.model_validate_json(cfg_json)
    kind, mode = parse_arm(arm)
    torch.manual_seed(seed)
    t0 = time.perf_counter()
    task = get_task(cfg.task)
    peers = [build_peer(n, s, cfg, mode) for n, s in zip(cfg.learner_names, cfg.learners)]
    eval_task = get_task(cfg.eval_task) if cfg.eval_task else task
    eval_set = heldout_items(eval_task, cfg.eval_items, cfg.eval_seed)
    rounds: list[dict[str, Any]] = []
    evals: list[dict[str, Any]] = []
    step = {"solo": solo_round, "vertical": vertical_round, "horizontal": horizontal_round}[kind]
    for r in range(1, cfg.rounds + 1):
        records = step(peers, task, cfg, seed, r)
        rounds.extend(records)
        log.info("%s seed %d round %d: %s", arm, seed, r,
                 ", ".join(f"{x['learner']} reward {x['reward']:.2f}" for x in records))
        if r in cfg.eval_rounds:
            ev: dict[str, Any] = {"round": r}
            for p in peers:
                ev[p.name] = heldout_accuracy(p.backend.model, p.tokenizer, eval_task, eval_set,
                                              max_new_tokens=cfg.eval_max_new_tokens, eos_ids=p.backend.eos_ids,
                                              pad_id=p.backend.pad_id)
            evals.append(ev)
    return {"arm": arm, "kind": kind, "mode": mode, "seed": seed, "rounds": rounds, "evals": evals,
            "threads": torch.get_num_threads(), "seconds": time.perf_counter() - t0}


def _learn(peer: Peer, items: list[ScoredGroup], *, allow_mixed: bool) -> tuple[dict[str, float], float]:
    t0 = time.perf_counter()
    metrics = peer.learner.update(items, allow_mixed=allow_mixed)
    peer.backend.bump_policy_version()
    return metrics, time.perf_counter() - t0


def _record(peer: Peer, r: int, items: list[ScoredGroup], metrics: dict[str, float], **extra: Any) -> dict[str, Any]:
    own = np.concatenate([it.rewards[~it.offpolicy] for it in items])
    peer_r = [it.rewards[it.offpolicy] for it in items if it.offpolicy.any()]
    generators = [len(set(it.generators)) for it in items]
    return {
        "round": r,
        "learner": peer.name,
        "reward": float(own.mean()),
        "peer_reward": float(np.concatenate(peer_r).mean()) if peer_r else None,
        "groups": len(items),
        "mixed_reward_groups": int(sum(float(np.std(it.rewards)) > 0 for it in items)),
        "generators_min": min(generators),
        "generators_max": max(generators),
        "completion_tokens": int(sum(g.group.num_completion_tokens for g in items)),
        **extra,
        **metrics,
    }


def solo_round(peers: list[Peer], task: Task, cfg: ExperimentConfig, seed: int, r: int) -> list[dict[str, Any]]:
    out = []
    for i, p in enumerate(peers):
        t0 = time.perf_counter()
        groups = p.backend.generate(_prompts(p, task, round_items(task, cfg, seed, r, i)), cfg.group_size,
                                    _sampling(cfg, seed, i, cfg.group_size))
        t_gen = time.perf_counter() - t0
        items = [ScoredGroup.vertical(g, rw, offpolicy=False, source=0) for g, rw in zip(groups, p.score(groups))]
        metrics, t_learn = _learn(p, items, allow_mixed=False)
        out.append(_record(p, r, items, metrics, bytes_sent=0, bytes_received=0, time_generate=t_gen,
                           time_learn=t_learn))
    return out


def _generate_and_encode(peers: list[Peer], items_of: Callable[[int], list[TaskItem]], task: Task,
                         cfg: ExperimentConfig, seed: int, n: int) -> tuple[list, list, list[float]]:
    """Each learner generates `n` completions for each of `items_of(i)` and encodes the groups
    once, as a sender would: `(groups per learner, encoded bytes per learner, seconds per learner)`."""
    own, sent, t_gen = [], [], []
    for i, p in enumerate(peers):
        t0 = time.perf_counter()
        groups = p.backend.generate(_prompts(p, task, items_of(i)), n, _sampling(cfg, seed, i, n))
        t_gen.append(time.perf_counter() - t0)
        own.append(groups)
        sent.append([encode_group(g) for g in groups])
    return own, sent, t_gen


def vertical_round(peers: list[Peer], task: Task, cfg: ExperimentConfig, seed: int, r: int) -> list[dict[str, Any]]:
    own, sent, t_gen = _generate_and_encode(
        peers, lambda i: round_items(task, cfg, seed, r, i), task, cfg, seed, cfg.group_size)
    out = []
    for i, p in enumerate(peers):
        received = [p.receive(b) for b in sent[1 - i]]
        rewards = p.score(own[i] + received)
        items = [ScoredGroup.vertical(g, rw, offpolicy=k >= len(own[i]), source=int(k >= len(own[i])))
                 for k, (g, rw) in enumerate(zip(own[i] + received, rewards))]
        metrics, t_learn = _learn(p, items, allow_mixed=False)
        out.append(_record(p, r, items, metrics, bytes_sent=sum(map(len, sent[i])),
                           bytes_received=sum(map(len, sent[1 - i])), time_generate=t_gen[i], time_learn=t_learn))
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


def horizontal_round(peers: list[Peer], task: Task, cfg: ExperimentConfig, seed: int,
                     r: int) -> list[dict[str, Any]]:
    shared = [it for i in range(len(peers)) for it in round_items(task, cfg, seed, r, i)]
    half = cfg.group_size // 2
    gens = [p.generator for p in peers]  # the policies that generate this round
    own, sent, t_gen = _generate_and_encode(peers, lambda i: shared, task, cfg, seed, half)
    out = []
    for i, p in enumerate(peers):
        received = [p.receive(b) for b in sent[1 - i]]
        merged = [merge_halves(a, b, sender=f"{p.name}+{peers[1 - i].name}") for a, b in zip(own[i], received)]
        items = [
            ScoredGroup(group=g, rewards=rw, offpolicy=np.repeat([False, True], half),
                        source=np.repeat([0, 1], half).astype(np.int64),
                        generators=(gens[i],) * half + (gens[1 - i],) * half)
            for g, rw in zip(merged, p.score(merged))
        ]
        metrics, t_learn = _learn(p, items, allow_mixed=True)
        out.append(_record(p, r, items, metrics, bytes_sent=sum(map(len, sent[i])),
                           bytes_received=sum(map(len, sent[1 - i])), time_generate=t_gen[i], time_learn=t_learn))
    return out
