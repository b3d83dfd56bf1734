"""One run of the experiment: one arm, one seed, two real nodes in this process on a loopback hub.

Each learner is a `Node` (`node.daemon`) built from the `NodeConfig` of its arm
(`config.arm_config`), with the in-process transport (`peers.loopback`) in place of the hivemind swarm:
everything else is the node's, its learner (seeded by the node's seed), prompt schedule
and sampling seeds, publish (the vocabulary check), the transport's checks after decode,
the intake (caps, budget, duplicates), the learning half (`node.learning.learn_round`),
its record, and with `max_staleness` k its pipeline (`node.pipeline`, with `fresh_enough`).
Learner `i` of seed `s` is the node with seed `config.learner_seed(s, i)`, so the `solo` arm of
learner A with seed `s` trains exactly as a lone `ftis-node join --seed s` with the same
config (a test holds this). A round runs both nodes in lockstep (`lockstep_round`): each
node's publish half, then each node's learn half, so each learns on its own groups plus
the other's of the same round, whose bytes crossed the wire codec. The horizontal arm
mixes each group's halves (both halves cross the hub) and runs the node's `score` and
`update_and_serve` with `allow_mixed`, with a record of its own: the node's learn half
cannot take a mixed group (it learns what it gathers, the peer's halves; a merged group
posted as bytes has a sender, `A+B`, that is not its publisher; `learn_round` updates
without `allow_mixed`), and a node setting for it would put the experiment into the
product (docs/experiment.md). The functions here run in pool
processes, so they take the config as JSON and return plain dicts.
"""

from __future__ import annotations

import logging
import platform
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch

from ftis_swarm.config import NodeConfig
from ftis_swarm.lab.experiment.config import RUN_ID, ExperimentConfig, arm_config, arm_spec, merged, node_config
from ftis_swarm.lab.experiment.heldout import heldout_accuracy, heldout_items, sample_groups, sampled_rewards
from ftis_swarm.learner.batch import ScoredGroup
from ftis_swarm.models import load_model
from ftis_swarm.node.daemon import Node
from ftis_swarm.node.learning import score, update_and_serve
from ftis_swarm.node.rollouts import generate_groups, node_sampling, render_prompts, round_items
from ftis_swarm.peers.loopback import LoopbackHub
from ftis_swarm.rollout import GroupHeader, TransformersBackend
from ftis_swarm.tasks import Task, get_task
from ftis_swarm.wire import Group

log = logging.getLogger(__name__)


def learner_device(index: int) -> str:
    """Learner `index`'s device: GPU `index` modulo the GPUs present (one GPU: both share it), else the CPU."""
    n = torch.cuda.device_count()
    return f"cuda:{index % n}" if n else "cpu"


def start_node(name: str, cfg: NodeConfig, hub: LoopbackHub, run_dir: Path) -> Node:
    """A real node for `cfg`, in this process, on `hub` as peer `name` (its files under `run_dir/name`).

    The rounds are driven from here (`lockstep_round`), so it writes no checkpoint.
    """
    return Node(cfg.model_copy(update={"run_dir": run_dir / name}), swarm=hub.member(name))


def eval_items(cfg: ExperimentConfig, task: Task) -> list:
    """The fixed held-out set, a node's (`node.eval_items` test items drawn by `node.eval_seed`: node/heldout.py)."""
    return heldout_items(task, cfg.node.eval_items, cfg.node.eval_seed)


def eval_tokens(cfg: ExperimentConfig) -> int:
    """Most tokens of a held-out answer, as a node's evaluation has them."""
    return cfg.node.eval_max_new_tokens or cfg.node.sampling.max_new_tokens


def evaluate(model: Any, tokenizer: Any, task: Task, items: list, cfg: ExperimentConfig, *, eos_ids: Any,
             pad_id: int, sender: str) -> dict[str, Any]:
    """Greedy pass@1 (`accuracy`, per item `greedy`) and, with `eval_samples` k, per item how many of k
    samples are right (`sampled`, `sampled_accuracy`); the same items and sampling seed in every arm."""
    was_training = model.training
    model.eval()
    try:
        out = heldout_accuracy(model, tokenizer, task, items, max_new_tokens=eval_tokens(cfg),
                               eos_ids=eos_ids, pad_id=pad_id)
        out["greedy"] = [int(v) for v in out["verdicts"]]
        k = cfg.eval_samples
        if k:
            groups = sample_groups(model, tokenizer, task, items, samples=k,
                                   temperature=cfg.eval_temperature or cfg.node.sampling.temperature,
                                   max_new_tokens=eval_tokens(cfg), seed=cfg.node.eval_seed, sender=sender)
            out["sampled"] = [int(sum(r)) for r in sampled_rewards(tokenizer, task, items, groups)]
            out["samples"] = k
            out["sampled_accuracy"] = sum(out["sampled"]) / (k * len(items)) if items else 0.0
    finally:
        model.train(was_training)
    return out


def eval_sets(cfg: ExperimentConfig) -> list[tuple[str, Task, list]]:
    """`(name, task, items)` of every task a learner is evaluated on (`cfg.eval_task_names`), the held-out task first."""
    return [(name, task, eval_items(cfg, task)) for name in cfg.eval_task_names for task in (get_task(name),)]


def evaluate_all(model: Any, tokenizer: Any, sets: list[tuple[str, Task, list]], cfg: ExperimentConfig, *,
                 eos_ids: Any, pad_id: int, sender: str) -> dict[str, Any]:
    """`evaluate` on the first set (the held-out task, as before), with `by_task` holding every set's when there
    are several (`node.eval_tasks`)."""
    results = {name: evaluate(model, tokenizer, task, items, cfg, eos_ids=eos_ids, pad_id=pad_id, sender=sender)
               for name, task, items in sets}
    out = dict(results[sets[0][0]])
    if len(sets) > 1:
        out["by_task"] = results
    return out


def warm_model(cfg: ExperimentConfig, index: int, warm_dir: Optional[str]) -> Optional[str]:
    """The folder of learner `index`'s warm-started weights, when `cfg.warm` makes it a specialist."""
    if cfg.warm is None or warm_dir is None or cfg.learner_names[index] != cfg.warm.learner:
        return None
    return str(Path(warm_dir) / cfg.warm.learner / "model")


def learner_model(cfg: ExperimentConfig, index: int, warm_dir: Optional[str]) -> str:
    return warm_model(cfg, index, warm_dir) or cfg.learners[index]["model"]


def warm_start(cfg_json: str, warm_dir: str) -> dict[str, Any]:
    """Makes `cfg.warm.learner` a specialist: `cfg.warm.rounds` solo rounds of its own task as a lone node (seed
    `cfg.warm.seed`), its weights and tokenizer written to `<warm_dir>/<learner>/model`; returns its rounds."""
    cfg = ExperimentConfig.model_validate_json(cfg_json)
    warm = cfg.warm
    assert warm is not None
    index = cfg.learner_names.index(warm.learner)
    base = arm_config(cfg, index, warm.seed, "solo")
    changes: dict[str, Any] = {"rounds": warm.rounds, "seed": warm.seed}
    if warm.prompts_per_round:
        changes["prompts_per_round"] = warm.prompts_per_round
    if warm.lr:
        changes["learner"] = {"lr": warm.lr}
    node_cfg = node_config(merged(base.model_dump(), changes), where="warm")
    t0 = time.perf_counter()
    rounds = []
    with tempfile.TemporaryDirectory(prefix="ftis-warm-") as tmp:
        node = start_node(warm.learner, node_cfg, LoopbackHub(), Path(tmp))
        try:
            for r in range(1, warm.rounds + 1):
                rounds.extend(lockstep_round([node], r))
                log.info("warm %s round %d: reward %s", warm.learner, r, _fmt(rounds[-1]["reward"]))
            path = Path(warm_dir) / warm.learner / "model"
            node.parts.learner.save_weights(path)
            node.parts.tokenizer.save_pretrained(path)
        finally:
            node.close()
    return {"learner": warm.learner, "task": node_cfg.task, "rounds": rounds, "seconds": time.perf_counter() - t0,
            "host": host()}


def start_evaluation(cfg_json: str, warm_dir: Optional[str] = None) -> dict[str, Any]:
    """Held-out accuracy of both learners' initial weights (shared by every run and seed: the
    evaluation is seeded by `node.eval_seed` alone, so it would repeat the same figures per seed);
    a warm-started learner's are its specialist weights."""
    cfg = ExperimentConfig.model_validate_json(cfg_json)
    sets = eval_sets(cfg)
    out: dict[str, Any] = {"round": 0}
    models = [learner_model(cfg, i, warm_dir) for i in range(len(cfg.learner_names))]
    for i, (name, model_name) in enumerate(zip(cfg.learner_names, models)):
        same = [n for n, m in zip(cfg.learner_names, models) if m == model_name and n in out]
        if same:  # a LoRA twin starts as its base model: the same greedy answers
            out[name] = out[same[0]]
            continue
        model, tok = load_model(model_name, device=learner_device(i))
        backend = TransformersBackend(model=model, tokenizer=tok, header=GroupHeader(RUN_ID, name, "start"))
        t0 = time.perf_counter()
        out[name] = evaluate_all(model, tok, sets, cfg, eos_ids=backend.eos_ids, pad_id=backend.pad_id, sender=name)
        out[name]["seconds"] = time.perf_counter() - t0
        del model, backend
    return out


def run_arm(cfg_json: str, arm: str, seed: int, *, weights_dir: Optional[Path] = None,
            warm_dir: Optional[str] = None) -> dict[str, Any]:
    """Trains both learners for `cfg.rounds` rounds under `arm`; returns per-round records and evals.

    Each learner is a real `Node` on a loopback hub (`peers.loopback`): one hub each in
    `solo`, both on one in the other arms. Each record carries `optimizer_step` (1 when the
    learner's policy version advanced that round). With `weights_dir`, each learner's final
    weights (or adapter) are written to `weights_dir/<name>/model` (or `adapter`), as a
    node's checkpoint holds them. With `cfg.warm` and `warm_dir`, the warm learner starts from its
    specialist weights there (`warm_start`).
    """
    cfg = ExperimentConfig.model_validate_json(cfg_json)
    spec = arm_spec(arm)
    t0 = time.perf_counter()
    shared = LoopbackHub()
    with tempfile.TemporaryDirectory(prefix="ftis-experiment-") as tmp:
        nodes = []
        for i, name in enumerate(cfg.learner_names):
            node_cfg = arm_config(cfg, i, seed, arm)
            if (warm := warm_model(cfg, i, warm_dir)) is not None:
                node_cfg = node_config(merged(node_cfg.model_dump(), {"model": warm}), where="warm")
            nodes.append(start_node(name, node_cfg, LoopbackHub() if spec.kind == "solo" else shared, Path(tmp)))
        try:
            out = _rounds(nodes, cfg, spec.kind)
            if weights_dir is not None:
                for name, node in zip(cfg.learner_names, nodes):
                    learner = node.parts.learner
                    learner.save_weights(Path(weights_dir) / name / ("adapter" if learner.is_lora else "model"))
        finally:
            for node in nodes:
                node.close()
    return {"arm": arm, "kind": spec.kind, "mode": spec.mode, "seed": seed, **out,
            "threads": torch.get_num_threads(), "seconds": time.perf_counter() - t0, "host": host()}


def host() -> dict[str, str]:
    """What a run's floating point depends on besides its seed: the CPU, the kernels torch picks
    for it, and the versions. A run repeats bit for bit on one host; on another, differences of
    about 1e-6 in the first round's gradients can grow into other answers by round 4."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        pass
    return {"cpu": cpu, "capability": torch.backends.cpu.get_cpu_capability(), "torch": torch.__version__,
            "python": platform.python_version()}


def _rounds(nodes: list[Node], cfg: ExperimentConfig, kind: str) -> dict[str, Any]:
    task = get_task(cfg.node.task)
    sets = eval_sets(cfg)
    rounds: list[dict[str, Any]] = []
    evals: list[dict[str, Any]] = []
    versions = {node.parts.swarm.peer_id: node.parts.learner.policy_version for node in nodes}
    for r in range(1, cfg.node.rounds + 1):
        records = horizontal_round(nodes, task, cfg, r) if kind == "horizontal" else lockstep_round(nodes, r)
        for x in records:
            x["optimizer_step"] = int(x["policy_version"] > versions[x["learner"]])
            versions[x["learner"]] = x["policy_version"]
        rounds.extend(records)
        log.info("%s round %d: %s", kind, r,
                 ", ".join(f"{x['learner']} reward {_fmt(x['reward'])}" for x in records))
        if r in cfg.eval_rounds:
            ev: dict[str, Any] = {"round": r}
            for node in nodes:
                p = node.parts
                ev[p.swarm.peer_id] = evaluate_all(p.backend.model, p.tokenizer, sets, cfg,
                                                   eos_ids=p.backend.eos_ids, pad_id=p.backend.pad_id,
                                                   sender=p.swarm.peer_id)
            evals.append(ev)
    return {"rounds": rounds, "evals": evals}


def _fmt(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.2f}"


def _mean(xs: list) -> Optional[float]:
    return float(np.mean(xs)) if len(xs) else None


def _columns(name: str, policy_version: int, items: list[ScoredGroup]) -> dict[str, Any]:
    """The experiment's columns of a learner's round: what its update was given, by group."""
    generators = [len(set(it.generators)) for it in items] or [0]
    return {
        "learner": name,
        "policy_version": policy_version,
        "groups": len(items),
        "mixed_reward_groups": int(sum(float(np.std(it.rewards)) > 0 for it in items)),
        "generators_min": min(generators),
        "generators_max": max(generators),
        "completion_tokens": int(sum(g.group.num_completion_tokens for g in items)),
    }


def lockstep_round(nodes: list[Node], r: int) -> list[dict[str, Any]]:
    """Round `r` of every node: each one's publish half, then each one's learn half (`node.daemon`).

    The record is the node's (its line of metrics.jsonl) with the learner's per-source
    metrics keyed by source index (`@0` itself, `@1` its peer) and the experiment's columns;
    `bytes_sent` / `bytes_received` are the wire bytes the hub carried this round.
    """
    published = [node.publish_round(r) for node in nodes]
    before = [node.parts.swarm.counters() for node in nodes]
    results = [node.learn_published(half) for node, half in zip(nodes, published)]
    out = []
    for node, res, was in zip(nodes, results, before):
        learned, now = node.last_learning, node.parts.swarm.counters()
        assert learned is not None
        record = {k: v for k, v in res.record.items() if "@" not in k}
        record.update(learned.metrics)
        record.update(_columns(node.parts.swarm.peer_id, node.parts.learner.policy_version, learned.items))
        record.update(bytes_sent=now["served_bytes"] - was["served_bytes"],
                      bytes_received=now["fetched_bytes"] - was["fetched_bytes"])
        out.append(record)
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


def horizontal_round(nodes: list[Node], task: Task, cfg: ExperimentConfig, r: int) -> list[dict[str, Any]]:
    """Both learners take the union of their round's prompts and generate G/2 each; each group mixes the halves.

    The halves cross the hub as any group does; the mixed groups, which a node refuses, are
    scored and learned by the node's `score` and `update_and_serve` with `allow_mixed`.
    """
    shared = [it for node in nodes for it in round_items(task, node.cfg, r)]
    half = cfg.node.sampling.group_size // 2
    names = [node.parts.swarm.peer_id for node in nodes]
    gens = [f"{name}@{node.parts.backend.policy_version}" for name, node in zip(names, nodes)]  # this round's policies
    own, t_gen = [], []
    before = [node.parts.swarm.counters() for node in nodes]
    for node in nodes:
        p, t0 = node.parts, time.perf_counter()
        groups = generate_groups(p.backend, render_prompts(task, p.tokenizer, shared), half, node_sampling(node.cfg),
                                 Counter(), r=r)
        t_gen.append(time.perf_counter() - t0)
        own.append(groups)
        p.swarm.publish_round(groups, round=r)
    out = []
    for i, node in enumerate(nodes):
        p, learning = node.parts, node.learning
        received = p.swarm.gather(0.0, round=r)
        merged = [merge_halves(a, b, sender=f"{names[i]}+{names[1 - i]}") for a, b in zip(own[i], received)]
        t0 = time.perf_counter()
        counts: Counter = Counter()
        scored = score(learning, merged, counts)
        items = [
            ScoredGroup(group=g, rewards=rw, offpolicy=np.repeat([False, True], half),
                        source=np.repeat([0, learning.source(names[1 - i])], half).astype(np.int64),
                        generators=(gens[i],) * half + (gens[1 - i],) * half)
            for g, rw in zip(scored.groups, scored.rewards)
        ]
        metrics, health = update_and_serve(learning, r, items, own_groups=len(items), allow_mixed=True)
        own_r = [float(x) for it in items for x in it.rewards[~it.offpolicy]]
        peer_r = [float(x) for it in items for x in it.rewards[it.offpolicy]]
        out.append({"round": r, "reward": _mean(own_r), "peer_reward": _mean(peer_r), **counts, **health,
                    "time_generate": t_gen[i], "time_learn": time.perf_counter() - t0, **metrics,
                    **_columns(names[i], p.learner.policy_version, items)})
    for record, node, was in zip(out, nodes, before):
        now = node.parts.swarm.counters()
        record.update(bytes_sent=now["served_bytes"] - was["served_bytes"],
                      bytes_received=now["fetched_bytes"] - was["fetched_bytes"])
    return out
