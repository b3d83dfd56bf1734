"""Every setting of a node, as strict pydantic models (pydantic and the standard library only).

A node's whole configuration is one `NodeConfig`: TOML file first, then CLI flags on top
(`ftis_swarm.cli`). Each section is its own model so that the parts (core, wire, rollout,
learner, swarm) take only what they use. Unknown keys are errors, not silently ignored:
a typo in a config file must not fall back to a default without a word.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Literal, Mapping, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False)


class FTISConfig(_Strict):
    """The F-TIS loss (METHOD.md). The paper's baselines are modes, not test-only flags."""

    mode: Literal["nois", "vis", "tis", "filter", "fvis", "ftis"] = "ftis"
    """Importance weight and filter: nois/filter weight 1, vis/fvis exp(x), tis/ftis min(exp(x), C);
    filter/fvis/ftis also drop harmful samples."""
    C: float = Field(2.0, gt=0)
    """Truncation cap of the importance weight."""
    g: float = Field(50.0, gt=0)
    """KL threshold of the filter, on the per-sample summed-over-tokens scale."""
    eps: float = Field(0.2, gt=0, lt=1)
    """PPO clip range of the ratio exp(logp - logp_old)."""
    filter_rule: Literal["or", "and"] = "or"
    """`or`: filtered when A <= 0 or kl > g (the method as stated); `and`: A < 0 and kl > g."""
    filter_scope: Literal["offpolicy", "all"] = "offpolicy"
    """Whom the filter applies to: off-policy samples only (own pass), or every sample."""
    kl_estimator: Literal["rlogr", "k3"] = "rlogr"
    """Per-token KL term: rlogr = r*x - r + 1 (proxy for KL(pi_theta||pi_gen)), k3 = r - 1 - x."""

    @property
    def truncates(self) -> bool:
        return self.mode in ("tis", "ftis")

    @property
    def filters(self) -> bool:
        return self.mode in ("filter", "fvis", "ftis")


class WireConfig(_Strict):
    """Limits the decoder enforces on every group that arrives (proto/group_v1.md)."""

    max_group_size: int = Field(64, ge=2, le=4096)
    """Most completions per group (G)."""
    max_completion_tokens: int = Field(8192, ge=1)
    """Most tokens in one completion."""
    max_prompt_tokens: int = Field(8192, ge=1)
    """Most tokens in the prompt."""
    max_bytes: int = Field(1 << 20, ge=1024, le=4 << 20)
    """Most bytes in one encoded group (1 MiB by default; p2pd caps a message at 4 MiB)."""


class SamplingConfig(_Strict):
    """How rollouts are sampled. Top-p and top-k stay off: the sampled distribution is softmax(z/T)."""

    temperature: float = Field(1.0, gt=0, le=10)
    max_new_tokens: int = Field(64, ge=1, le=32768)
    group_size: int = Field(8, ge=2, le=4096)
    """G, the completions per prompt in a vertical group."""
    seed: Optional[int] = None


class LoRAConfig(_Strict):
    rank: int = Field(8, ge=1, le=1024)
    alpha: float = Field(16.0, gt=0)
    dropout: float = Field(0.0, ge=0, lt=1)
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )


class LearnerConfig(_Strict):
    lr: float = Field(1e-6, gt=0, le=1)
    weight_decay: float = Field(0.0, ge=0)
    betas: tuple[float, float] = (0.9, 0.999)
    grad_clip: float = Field(1.0, gt=0)
    dtype: Literal["fp32", "bf16"] = "fp32"
    epochs: int = Field(1, ge=1, le=64)
    """PPO epochs (optimiser steps) per batch; logp_old is fixed at the start of the update."""
    micro_batch: int = Field(8, ge=1)
    """Sequences per forward/backward; the gradient accumulates over the batch."""
    logprob_chunk: int = Field(512, ge=1)
    """Positions per chunk of the output head (no [B, T, V] logits tensor for the whole batch)."""
    activation_checkpointing: bool = False
    """Recompute each decoder layer's activations in the backward pass instead of keeping them:
    about a third more compute, and activation memory falls to each layer's input plus one layer's."""
    lora: Optional[LoRAConfig] = None
    """Train a LoRA adapter instead of the full model."""
    max_peer_groups: int = Field(64, ge=0)
    """Most peers' groups in one update."""
    max_groups_per_peer: int = Field(16, ge=0)
    """Most groups one peer may contribute to one update."""
    ftis: FTISConfig = Field(default_factory=FTISConfig)


class SwarmConfig(_Strict):
    """The hivemind side of a node (ftis_swarm.swarm)."""

    peers: list[str] = Field(default_factory=list)
    """Multiaddrs of peers already in the swarm (a bootstrap peer); empty: start a new swarm."""
    peers_file: Optional[Path] = None
    """A file of multiaddrs, one per line, added to `peers` at start (what `ftis-node bootstrap
    --maddrs-file` writes; docker-compose shares it through a volume)."""
    host: str = "0.0.0.0"
    port: int = Field(0, ge=0, le=65535)
    """TCP port to listen on; 0 picks a free one."""
    announce: list[str] = Field(default_factory=list)
    """Multiaddrs to announce to peers instead of the listening ones (behind NAT)."""
    client_mode: bool = False
    """Accept no incoming connections (for nodes behind NAT); such a node can still gather."""
    identity: Optional[Path] = None
    """Private-key file; created on first start. None: a fresh identity each start."""
    run_id: str = Field("ftis-default", min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._-]+$")
    """Swarm run name: only groups of the same run id are exchanged."""
    ttl: float = Field(600.0, gt=0)
    """Seconds a published group stays in the DHT; older groups are dropped on gather."""
    max_clock_skew: float = Field(30.0, ge=0)
    """Seconds two peers' clocks may differ: a record may expire at most ttl + this far ahead."""
    window: float = Field(30.0, gt=0)
    """Seconds per time window of the DHT key scheme."""
    max_record_bytes: int = Field(4096, ge=256)
    """Most bytes in one signed DHT record (a pointer, about 600 bytes); larger records are refused."""
    max_groups_per_peer_per_gather: int = Field(32, ge=1)
    """Most groups one peer may contribute to one gather; its further groups wait for the next one."""
    poll_interval: float = Field(1.0, gt=0, le=60)
    """Seconds between two reads of the pointer keys by the background gatherer."""
    fetch_timeout: float = Field(10.0, gt=0)
    """Seconds to fetch one group body from its publisher before the attempt counts as failed."""
    max_fetch_attempts: int = Field(3, ge=1)
    """Failed fetches of one body before it is rejected as `fetch_failed`."""
    max_concurrent_fetches: int = Field(8, ge=1, le=256)
    """Bodies fetched at once."""
    num_replicas: int = Field(5, ge=1, le=64)
    """Peers nearest to a key that are asked to store each pointer."""
    min_replicas: int = Field(1, ge=1, le=64)
    """Peers other than this one that must accept a pointer for a publish to succeed."""
    publish_timeout: float = Field(10.0, gt=0)
    """Seconds a publish may take (finding the nearest peers and storing the pointer)."""
    join_timeout: float = Field(30.0, gt=0)
    """Seconds to start the libp2p daemon and reach the --peers."""
    wire: WireConfig = Field(default_factory=WireConfig)


class NodeConfig(_Strict):
    """Everything `ftis-node join` needs; written resolved to the run directory."""

    model: str = "smollm2-135m"
    """Hub id, local path, or short name (`Qwen2.5-1.5B`, `smollm2-135m`, `smollm2-mini`)."""
    task: str = "arith"
    """Task the node draws its own prompts from (`arith`, `gsm_symbolic`, `gsm8k`, `math500`, `champ`)."""
    run_dir: Path = Path("runs/node")
    """Where metrics.jsonl, config.json, checkpoints/ and the node's log go."""
    rounds: int = Field(50, ge=1)
    """Rounds to run; a resumed node continues up to the same number."""
    prompts_per_round: int = Field(4, ge=1)
    """Own prompts per round, one vertical group each."""
    round_deadline: float = Field(10.0, gt=0)
    """Seconds to wait for peers' groups after publishing."""
    checkpoint_every: int = Field(5, ge=1)
    """Rounds between checkpoints (the last round is always checkpointed)."""
    keep_checkpoints: int = Field(2, ge=1)
    """Complete checkpoints kept; older ones are deleted."""
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
    metrics_port: Optional[int] = Field(None, ge=0, le=65535)
    """Port of the Prometheus /metrics endpoint; None: no endpoint (0 picks a free port)."""
    metrics_host: str = "127.0.0.1"
    """Address the metrics endpoint listens on (0.0.0.0 inside a container)."""
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)
    learner: LearnerConfig = Field(default_factory=LearnerConfig)
    swarm: SwarmConfig = Field(default_factory=SwarmConfig)

    @field_validator("task")
    @classmethod
    def _task_name(cls, v: str) -> str:
        if not v or not v.replace("_", "").isalnum():
            raise ValueError(f"task name {v!r} is not a plain name like 'arith' or 'gsm8k'")
        return v

    @model_validator(mode="after")
    def _group_fits_wire(self) -> "NodeConfig":
        if self.sampling.group_size > self.swarm.wire.max_group_size:
            raise ValueError(
                f"sampling.group_size={self.sampling.group_size} exceeds swarm.wire.max_group_size="
                f"{self.swarm.wire.max_group_size}"
            )
        return self


class ConfigError(ValueError):
    """A config file or flag that does not validate, said in one sentence."""


def _one_sentence(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "config"
    more = len(exc.errors()) - 1
    tail = f"; and {more} more problem{'s' * (more > 1)}" if more else ""
    got = first.get("input")
    shown = f" (got {got!r})" if got is not None and not isinstance(got, (dict, list)) else ""
    return f"{where}: {first['msg']}{shown}{tail}"


def _set_dotted(tree: dict, dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    for key in parents:
        tree = tree.setdefault(key, {})
        if not isinstance(tree, dict):
            raise ConfigError(f"{dotted}: '{key}' is a value, not a section")
    tree[leaf] = value


def load_node_config(path: Optional[Path] = None, overrides: Optional[Mapping[str, Any]] = None) -> NodeConfig:
    """A file (TOML, or the JSON a run directory holds), then dotted-key overrides from flags.

    `overrides` maps dotted paths (`"learner.lr"`) to values; None values are skipped, so
    unset flags leave the file's value. Raises `ConfigError` with one sentence.
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
    for key, value in (overrides or {}).items():
        if value is not None:
            _set_dotted(tree, key, value)
    try:
        return NodeConfig.model_validate(tree)
    except ValidationError as exc:
        raise ConfigError(_one_sentence(exc)) from None


def dump_node_config(cfg: NodeConfig) -> str:
    """The resolved config as JSON, loadable again with `load_node_config`."""
    return cfg.model_dump_json(indent=2)
