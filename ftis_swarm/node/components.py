"""Builds a node's parts from its config, and keeps the rollout side serving the learner's weights.

Order matters: the tasks are checked first (a node trains only on tasks with a train split),
then the model and tokenizer (the swarm needs the tokenizer fingerprint and vocabulary),
then the swarm (the backend stamps groups with the swarm's peer id), through a
`peers.protocol.SwarmFactory`: the hivemind `SwarmClient.start` unless the caller passes
another (the lab passes a `peers.loopback.LoopbackHub` member's), then the
backend. On CPU the transformers backend shares the learner's model object: an update is
visible to generation at once, and `Serving.after_update` only advances the served version. Any
other backend (vLLM, or a transformers backend owning its copy because the learner's model
is sharded over ranks) gets the new weights or adapter from a directory the learner writes.

With `ranks` (a node under torchrun), this runs on rank 0 only; the other ranks build just
the learner (`build_learner`, the same model and sharding) and follow rank 0's calls.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from ftis_swarm.config import NodeConfig, dump_node_config
from ftis_swarm.learner.checkpoint import CheckpointManager
from ftis_swarm.learner.distributed import Ranks, ShardedLearner
from ftis_swarm.learner.learner import Learner, apply_lora
from ftis_swarm.learner.sharding import base_dtype
from ftis_swarm.metrics import JsonlSink, MetricsSink, MultiSink
from ftis_swarm.models import load_model
from ftis_swarm.node.learning import node_admission
from ftis_swarm.node.preflight import with_peers_file
from ftis_swarm.node.rollouts import group_header
from ftis_swarm.node.scoring import Admission, TaskCache
from ftis_swarm.node.serving import Serving
from ftis_swarm.peers.ledger import PeerLedger
from ftis_swarm.peers.protocol import Swarm, SwarmFactory
from ftis_swarm.rollout import RolloutBackend, TransformersBackend, make_backend
from ftis_swarm.rollout.factory import pick_kind
from ftis_swarm.swarm import SwarmClient
from ftis_swarm.tasks import Task, check_trainable, get_task
from ftis_swarm.wire import tokenizer_fingerprint

log = logging.getLogger(__name__)


@dataclass
class Components:
    cfg: NodeConfig
    model: Any
    tokenizer: Any
    learner: Learner
    backend: RolloutBackend
    """Serves the policy the learner trains (shares its model object when `shares_model`)."""
    swarm: Swarm
    task: Task
    tasks: TaskCache
    sink: MetricsSink
    consumed: JsonlSink
    """consumed.jsonl: per round, the ids of the peers' groups that went into the update."""
    checkpoints: CheckpointManager
    shares_model: bool
    admission: Admission
    """What the scorer accepts from a group (node/scoring.py)."""
    peer_ledger: PeerLedger
    token_bound: int
    """Token ids at or above this no peer accepts: the tokenizer's length where that is below the
    embedding count (the rest are padding rows no tokenizer decodes)."""

    @property
    def weights_dir(self) -> Path:
        return self.cfg.run_dir / "serving"

    @property
    def serving(self) -> Serving:
        """The backend serving the learner's weights under its version (`serving.py`)."""
        return Serving(self.learner, self.backend, shares_model=self.shares_model, weights_dir=self.weights_dir)

    def sync_rollout_weights(self, *, resumed_from: Optional[Path] = None) -> None:
        """After a resume: the backend serves the restored weights under the restored version."""
        self.serving.sync(resumed_from=resumed_from)

    def close(self) -> None:
        closers = (("learner", getattr(self.learner, "stop", _nothing)), ("swarm", self.swarm.shutdown), ("backend", self.backend.close), ("sink", self.sink.close),
                   ("consumed log", self.consumed.close))
        for name, closer in closers:
            try:
                closer()
            except Exception:  # noqa: BLE001 - one part failing to close must not keep the others open
                log.exception("closing the %s failed", name)


def _nothing() -> None:
    return None


def build_learner(cfg: NodeConfig, *, device: str, ranks: Optional[Ranks] = None) -> tuple[Any, Any, Learner]:
    """`(model, tokenizer, learner)`: the model in the learner's base dtype, LoRA applied, sharded over `ranks`.

    A sharded model is loaded on the CPU and FSDP moves each rank's shard to its device. Seeds
    torch with the node's seed first (a LoRA adapter's initial weights are drawn from it), so
    every rank, and the experiment's learner built from the same config, starts the same.
    """
    import torch

    torch.manual_seed(cfg.seed)
    sharded = ranks is not None and ranks.world > 1
    model, tokenizer = load_model(cfg.model, dtype=base_dtype(cfg.learner), device="cpu" if sharded else device)
    model = apply_lora(model, cfg.learner)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    fingerprint = tokenizer_fingerprint(tokenizer)
    if sharded:
        return model, tokenizer, ShardedLearner(model, cfg=cfg.learner, pad_id=pad_id, ranks=ranks,
                                                tokenizer_fp=fingerprint)
    return model, tokenizer, Learner(model, cfg=cfg.learner, pad_id=pad_id, tokenizer_fp=fingerprint)


def build_components(cfg: NodeConfig, *, checkpoints: Optional[CheckpointManager] = None,
                     ranks: Optional[Ranks] = None, swarm: Optional[SwarmFactory] = None) -> Components:
    """Everything a node runs on, built from `cfg`; writes the resolved config to the run dir.

    `swarm` starts the transport (`peers.protocol`); None: the hivemind swarm (`SwarmClient.start`).

    Raises `EvaluationTaskError` (one sentence) when `task` or an `accept_tasks` entry has no train split.
    """
    import torch

    for name in dict.fromkeys([cfg.task, *cfg.accepted_tasks]):
        check_trainable(name)
    cfg.run_dir.mkdir(parents=True, exist_ok=True)
    (cfg.run_dir / "config.json").write_text(dump_node_config(cfg))
    sinks = _sinks(cfg)  # first: a port that cannot be bound stops the node before the model loads
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    device = str(ranks.device) if ranks is not None else ("cuda" if torch.cuda.is_available() else "cpu")
    model, tokenizer, learner = build_learner(cfg, device=device, ranks=ranks)
    fingerprint = tokenizer_fingerprint(tokenizer)
    task = get_task(cfg.task, options=cfg.task_options)
    token_bound = min(len(tokenizer), model.get_input_embeddings().num_embeddings)
    per_gather = min(cfg.swarm.fetch.max_groups_per_peer_per_gather, max(1, cfg.learner.max_groups_per_peer))
    identity = cfg.swarm.identity or cfg.run_dir / "identity.key"  # kept across restarts: standing survives them
    swarm_cfg = with_peers_file(cfg.swarm).replace(fetch={"max_groups_per_peer_per_gather": per_gather})
    swarm_cfg = swarm_cfg.model_copy(update={"identity": identity})
    peer_ledger = PeerLedger(cfg.ledger)
    # the hivemind swarm's gossip gate reads its ban lengths from the ledger's config
    start_swarm: SwarmFactory = swarm or functools.partial(SwarmClient.start, bans=peer_ledger.cfg)
    joined = start_swarm(swarm_cfg, tokenizer_fp=fingerprint, vocab_size=token_bound, policy=peer_ledger)
    learner.detector.origin_of = joined.origin_of  # the forgery evidence pooled per origin (learner/forgery.py)
    header = group_header(cfg, joined.peer_id, task.digest)
    kind = pick_kind(cfg.backend)
    shares = kind == "transformers" and not isinstance(learner, ShardedLearner)
    if shares:  # one model object for learning and sampling, on whichever device it lives
        backend = TransformersBackend(model=learner.model, tokenizer=tokenizer, header=header)
    elif kind == "transformers":  # the learner's model is sharded: rank 0 samples from its own copy
        backend = make_backend(kind, cfg.model, header=header, dtype=cfg.learner.dtype, device=device)
    else:
        options: dict[str, Any] = {}
        if device.startswith("cuda"):
            options["gpu_memory_utilization"] = cfg.vllm_gpu_memory_utilization
        if cfg.vllm_tensor_parallel_size > 1:
            options["engine_options"] = {"tensor_parallel_size": cfg.vllm_tensor_parallel_size}
        if cfg.learner.lora is not None:
            options.update(enable_lora=True, max_lora_rank=cfg.learner.lora.rank)
        backend = make_backend(kind, cfg.model, header=header, **options)
    return Components(
        cfg=cfg, model=model, tokenizer=tokenizer, learner=learner, backend=backend, swarm=joined, task=task,
        tasks=TaskCache(), sink=MultiSink(*sinks), consumed=JsonlSink(cfg.run_dir / "consumed.jsonl"),
        checkpoints=checkpoints or CheckpointManager(cfg.run_dir / "checkpoints", keep=cfg.keep_checkpoints),
        shares_model=shares,
        admission=node_admission(cfg, fingerprint),
        peer_ledger=peer_ledger, token_bound=token_bound,
    )


def _sinks(cfg: NodeConfig) -> list[MetricsSink]:
    """metrics.jsonl always; Prometheus, TensorBoard and W&B when the config asks for them."""
    sinks: list[MetricsSink] = [JsonlSink(cfg.run_dir / "metrics.jsonl")]
    if cfg.metrics_port is not None:
        from ftis_swarm.metrics.prometheus import PrometheusSink

        sinks.append(PrometheusSink(cfg.metrics_port, host=cfg.metrics_host))
    if cfg.tensorboard:
        from ftis_swarm.metrics.extra_sinks import TensorBoardSink

        sinks.append(TensorBoardSink(cfg.run_dir / "tensorboard"))
    if cfg.wandb_project is not None:
        from ftis_swarm.metrics.extra_sinks import WandbSink

        sinks.append(WandbSink(cfg.wandb_project, run_dir=cfg.run_dir, config=cfg.model_dump(mode="json")))
    return sinks
