"""`NodeConfig`, a node's whole configuration, and how it loads: a file, then dotted-key overrides."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any, Literal, Mapping, Optional

from pydantic import Field, ValidationError, field_validator, model_validator

from ftis_swarm.config.base import ConfigError, Strict, format_validation_error
from ftis_swarm.config.learner import LearnerConfig
from ftis_swarm.config.ledger import LedgerConfig
from ftis_swarm.config.rollout import SamplingConfig
from ftis_swarm.config.swarm import SwarmConfig, moved_key_sentence
from ftis_swarm.config.task_options import TaskOptionsConfig

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

logger = logging.getLogger(__name__)


def _plain_task_name(v: str) -> str:
    """A task name (`arith`, a package's entry point), or a spec: `jsonl:PATH`, `rg:NAME` (docs/tasks.md)."""
    kind, sep, rest = v.partition(":")
    if sep and kind in ("jsonl", "rg") and rest.strip():
        return v
    if not v or not v.replace("_", "").isalnum():
        raise ValueError(f"task name {v!r} is not a plain name like 'arith' or 'gsm8k', nor jsonl:PATH or rg:NAME")
    return v


class NodeConfig(Strict):
    """Everything `ftis-node join` needs; written resolved to the run directory."""

    model: str = "smollm2-135m"
    """Hub id, local path, or short name (`Qwen2.5-1.5B`, `smollm2-135m`, `smollm2-mini`)."""
    hub_timeout: float = Field(60.0, gt=0, le=3600)
    """Seconds the model hub may stay silent while the node starts (no answer to a request, no next bytes of
    a download) before the node stops with one sentence, or loads the hub cache's copy; a download that
    keeps arriving is never cut (models/hub.py `hub_deadline`)."""
    task: str = "arith"
    """Task the node draws its own prompts from (`arith`, `gsm_symbolic`, `gsm8k`, `math500`, `champ`, ...), a
    dataset file `jsonl:PATH`, a reasoning-gym family `rg:NAME`, or a package's task (docs/tasks.md)."""
    task_options: TaskOptionsConfig = Field(default_factory=TaskOptionsConfig)
    run_dir: Path = Path("runs/node")
    """Where metrics.jsonl, config.json, checkpoints/ and the node's log go."""
    rounds: int = Field(50, ge=1)
    """Rounds to run; a resumed node continues up to the same number."""
    prompts_per_round: int = Field(4, ge=1)
    """Own prompts per round, one vertical group each."""
    round_deadline: float = Field(10.0, gt=0)
    """Most seconds to wait for peers' groups after publishing; the wait ends sooner once every live
    peer's round is in (a peer is live when a pointer of it was seen within two deadlines)."""
    checkpoint_every: int = Field(5, ge=1)
    """Rounds between checkpoints (the last round is always checkpointed)."""
    keep_checkpoints: int = Field(1, ge=1)
    """Complete checkpoints kept; older ones are deleted once the next is complete (so a save in
    progress holds one more: about 1.6 GB each for a full SmolLM2-135M node with its AdamW state)."""
    max_failed_updates: int = Field(3, ge=1)
    """Failed updates in a row (the learner raised, skipped a non-finite step, or the node's own
    samples had non-finite log-probs: node/health.py) after which the node stops publishing and
    exits with status 3."""
    backend: Literal["auto", "transformers", "vllm"] = "auto"
    """Rollout backend: auto = vLLM where CUDA is present, else transformers sharing the learner's model."""
    vllm_gpu_memory_utilization: float = Field(0.35, gt=0, lt=1)
    """Share of the GPU's memory vLLM may take; the rest is the learner's (both live on one GPU)."""
    vllm_tensor_parallel_size: int = Field(1, ge=1, le=64)
    """GPUs one vLLM engine spans (tensor parallel); `ftis-node plan` says how many a model needs."""
    seed: int = 0
    """Seeds prompt sampling (per round), generation and torch."""
    threads: Optional[int] = Field(None, ge=1, le=1024)
    """torch CPU threads for this node; None keeps torch's default (all cores)."""
    max_staleness: int = Field(0, ge=0, le=8)
    """Policy versions own samples may lag the learner: 0 is the synchronous round (generate, then
    learn); k >= 1 generates round r + k while round r learns (node/pipeline.py), and an own group
    more than k versions old when its round learns is dropped and counted (`stale_dropped`)."""
    generate_threads: Optional[int] = Field(None, ge=1, le=1024)
    """With `max_staleness` >= 1 on CPU: torch threads of the generator; the learner keeps the rest of
    `threads` (at least one). None: half of them."""
    generate_in: Literal["process", "thread"] = "process"
    """With `max_staleness` >= 1 and the transformers backend on CPU: where the generator samples. A
    process of its own (weights in shared memory, refreshed in place) keeps the two sides from
    contending for the GIL; a thread of the node's process is the fallback (and what a model on a
    GPU always uses)."""
    metrics_port: Optional[int] = Field(None, ge=0, le=65535)
    """Port of the Prometheus /metrics endpoint; None: no endpoint (0 picks a free port)."""
    metrics_host: str = "127.0.0.1"
    """Address the metrics endpoint listens on (0.0.0.0 inside a container)."""
    status_port: Optional[int] = Field(None, ge=0, le=65535)
    """Port of the status page (`/` and `/status.json`: node/status_page.py); None: no page (0 picks a
    free port). `<run_dir>/status.json` is written every round either way."""
    status_host: str = "127.0.0.1"
    """Address the status page listens on; anything but loopback shows the node's peers and rounds to
    whoever can reach it."""
    tensorboard: bool = False
    """Also write each round's numbers as TensorBoard scalars under `<run_dir>/tensorboard`
    (needs the `tensorboard` extra)."""
    wandb_project: Optional[str] = Field(None, min_length=1, max_length=128)
    """Also log each round to this Weights & Biases project (needs the `wandb` extra;
    `WANDB_MODE=offline` logs without an account)."""
    accept_tasks: Optional[list[str]] = None
    """Tasks whose peers' groups this node trains on (train split only); None: its own task alone."""
    eval_every: int = Field(10, ge=0)
    """Rounds between held-out evaluations (greedy pass@1, node/heldout.py), besides round 0 (before any
    update) and the last round, which are always evaluated; 0: no held-out evaluation."""
    eval_items: Optional[int] = Field(50, ge=1)
    """Items of each held-out set, drawn once from the task's test split by `eval_seed` (a split with
    fewer: all of it); None: the whole split (200 items of a generated task)."""
    eval_seed: int = Field(0, ge=0)
    """Seeds the held-out draw, apart from `seed`: every node of a task is scored on the same items."""
    eval_tasks: list[str] = Field(default_factory=list)
    """Tasks evaluated besides the node's own, on their test split (`math500` for a `gsm8k` node: the
    out-of-distribution check)."""
    eval_max_new_tokens: Optional[int] = Field(None, ge=1, le=32768)
    """Most tokens of a held-out answer; None: `sampling.max_new_tokens`."""
    publish_alignment: bool = True
    """Publish each group with its alignment data (tokenizer family, each completion's UTF-8 text, each token's
    byte length), so learners with another tokenizer can weigh it (docs/method.md, "Peers with another
    tokenizer"); about 32% more bytes per token on the wire (8.3 -> 10.9). False: groups only this tokenizer's
    learners read."""
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)
    learner: LearnerConfig = Field(default_factory=LearnerConfig)
    swarm: SwarmConfig = Field(default_factory=SwarmConfig)
    ledger: LedgerConfig = Field(default_factory=LedgerConfig)

    @property
    def accepted_tasks(self) -> list[str]:
        """`accept_tasks`, or the node's own task when unset."""
        return list(self.accept_tasks) if self.accept_tasks is not None else [self.task]

    @field_validator("task")
    @classmethod
    def _task_name(cls, v: str) -> str:
        return _plain_task_name(v)

    @field_validator("accept_tasks")
    @classmethod
    def _task_names(cls, v: Optional[list[str]]) -> Optional[list[str]]:
        return None if v is None else [_plain_task_name(t) for t in v]

    @model_validator(mode="after")
    def _group_fits_wire(self) -> "NodeConfig":
        if self.sampling.group_size > self.swarm.wire.max_group_size:
            raise ValueError(
                f"sampling.group_size={self.sampling.group_size} exceeds swarm.wire.max_group_size="
                f"{self.swarm.wire.max_group_size}"
            )
        if self.generate_threads and self.threads and self.generate_threads >= self.threads:
            raise ValueError(f"generate_threads={self.generate_threads} must be below threads={self.threads}: the "
                             "learner keeps the rest")
        if self.metrics_port and self.metrics_port == self.swarm.transport.port:
            raise ValueError(f"metrics_port and swarm.transport.port are both {self.metrics_port}; give them "
                             "different ports")
        if self.status_port and self.status_port in (self.swarm.transport.port, self.metrics_port):
            raise ValueError(f"status_port {self.status_port} is also the swarm or metrics port; give it another")
        return self


def _set_dotted(tree: dict, dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    for key in parents:
        tree = tree.setdefault(key, {})
        if not isinstance(tree, dict):
            raise ConfigError(f"{dotted}: '{key}' is a value, not a section")
    tree[leaf] = value


def _new_spelling(dotted: str) -> str:
    """The path a dotted key has now (`swarm.ttl` -> `swarm.records.ttl`, with one WARNING sentence)."""
    head, _, old = dotted.partition(".")
    if head != "swarm" or old not in SwarmConfig.MOVED_KEYS:
        return dotted
    new = f"swarm.{SwarmConfig.MOVED_KEYS[old]}"
    logger.warning(moved_key_sentence(f"config key {dotted}", new))
    return new


def load_node_config(path: Optional[Path] = None, overrides: Optional[Mapping[str, Any]] = None, *,
                     keep_none: bool = False) -> NodeConfig:
    """A file (TOML, or the JSON a run directory holds), then dotted-key overrides, in their order.

    `overrides` maps dotted paths (`"learner.lr"`) to values; None values are skipped, so
    unset flags leave the file's value, unless `keep_none` (then None clears the key, as
    `--set learner.lora=none` asks). Raises `ConfigError` with one sentence.
    """
    tree: dict = {}
    if path is not None:
        try:
            raw = Path(path).read_bytes()
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
        try:
            tree = json.loads(raw) if str(path).endswith(".json") else tomllib.loads(raw.decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise ConfigError(f"config file {path} does not parse: {exc}") from None
    if isinstance(tree.get("swarm"), dict):  # a file's old flat keys first, so that later keys win
        try:
            tree["swarm"] = SwarmConfig.sectioned(tree["swarm"])
        except ValueError as exc:
            raise ConfigError(f"swarm: {exc}") from None
    for key, value in (overrides or {}).items():
        if value is not None or keep_none:
            _set_dotted(tree, _new_spelling(key), value)
    try:
        return NodeConfig.model_validate(tree)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc)) from None


def dump_node_config(cfg: NodeConfig) -> str:
    """The resolved config as JSON, loadable again with `load_node_config`."""
    return cfg.model_dump_json(indent=2)
