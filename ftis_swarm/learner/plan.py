"""How much GPU memory a node needs: the learner's own dtype and sharding choices, added up per GPU.

Every term follows from what the code does (`learner.py`, `sharding.py`), not from a rule of thumb:

- master weights fp32, sharded over the ranks when there are several (FSDP2); a bf16 LoRA
  keeps its frozen base in bf16 (`sharding.base_dtype`) and only the adapter in fp32;
- gradients fp32 (reduced in fp32), AdamW's two fp32 states, and the step's one fp32
  temporary (foreach AdamW's sqrt of the second moment), each the size of the trainable shard;
- under FSDP, the units gathered at once: the root (embedding, tied or untied head, norm; not
  freed after forward) and two decoder layers (the running one and the prefetched one), with
  their gradients before the reduce-scatter;
- in one process with `dtype = "bf16"` (autocast), the bf16 copies autocast makes of the fp32
  weights in matmuls, kept for backward;
- activations of one micro-batch (`micro_batch` x `seq_len` tokens), counted per decoder
  layer from what Qwen2's layer saves for backward (`ACT_*` below), or with activation
  checkpointing each layer's input plus one layer's; the chunked head's one chunk of logits;
- the rollout side on rank 0: nothing extra when the transformers backend shares the
  one-process learner's model (its KV cache and sampling logits while it generates); its own
  copy when the learner is sharded; vLLM's reserved share when vLLM sits on the same GPU.

The peak is the largest of three phases (generate, forward/backward, optimiser step): what
`torch.cuda.max_memory_allocated` should read. The activation count is an estimate (it
ignores the allocator's fragmentation and a few small buffers); the GPU check
(tests/gpu/check_gpu.py) measures the real peak of a 1.5B-shaped step against this figure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ftis_swarm.config import LearnerConfig
from ftis_swarm.learner.sharding import base_dtype
from ftis_swarm.models.shapes import ModelShape

GIB = float(1 << 30)
FP32, BF16 = 4, 2
ADAM_STATES = 2
"""AdamW keeps exp_avg and exp_avg_sq, fp32, per trainable parameter."""
STEP_TEMPORARIES = 1
"""Foreach AdamW allocates one fp32 tensor per parameter (the denominator) during `step`."""
HEAD_CHUNK_COPIES = 3
"""The chunked head holds a chunk's fp32 logits, their log-softmax and, in backward, their gradient."""
RUNTIME_GIB = 1.5
"""CUDA context and allocator slack, outside `max_memory_allocated`; an assumption, not a count."""


@dataclass(frozen=True)
class RolloutPlan:
    """The rollout side, as far as it lives on the learner's rank 0 GPU."""

    backend: Literal["shared", "transformers", "vllm"] = "shared"
    """shared: the transformers backend on the one-process learner's model; transformers: its own
    copy; vllm: an engine reserving `vllm_memory` of rank 0's GPU, or GPUs of its own."""
    rows: int = 64
    """Sequences generated at once (the transformers backend's `max_batch_rows`)."""
    tokens: int = 1024
    """Prompt plus completion budget per generated row."""
    dtype: Literal["fp32", "bf16"] = "bf16"
    """Weights of an own transformers copy."""
    vllm_memory: float = 0.35
    vllm_gpus: int = 0
    """GPUs of vLLM's own (tensor parallel); 0: vLLM shares rank 0's GPU."""


@dataclass
class MemoryPlan:
    shape: ModelShape
    mode: str
    dtype: str
    nproc: int
    trainable: int
    terms: dict[str, float] = field(default_factory=dict)
    """GiB per learner rank (rank 0 adds the `rollout_*` terms)."""
    phases: dict[str, float] = field(default_factory=dict)
    """Rank 0's allocated GiB in each phase."""
    gpu_gib: float = 80.0

    @property
    def peak(self) -> float:
        """Rank 0's peak allocated GiB: what `torch.cuda.max_memory_allocated` should read."""
        return max(self.phases.values())

    @property
    def fits(self) -> bool:
        return self.peak + RUNTIME_GIB <= self.gpu_gib

    def as_dict(self) -> dict:
        return {"model": self.shape.name, "params": self.shape.params, "mode": self.mode, "dtype": self.dtype,
                "nproc": self.nproc, "trainable": self.trainable, "gpu_gib": self.gpu_gib,
                "terms_gib": self.terms, "phases_gib": self.phases, "peak_gib": self.peak, "fits": self.fits}


def activation_bytes_per_token_layer(shape: ModelShape, compute: int) -> int:
    """What one Qwen2 decoder layer saves for backward per token.

    In the compute dtype: the two norms' outputs, q/k/v, q and k before rotary, the attention
    output (twice: SDPA's and o_proj's input), the MLP's gate, up, SiLU(gate) and product
    (`6h + 3kv + 4I`); in fp32, the two RMSNorms' inputs (they upcast).
    """
    h, kv, inter = shape.hidden, shape.kv_dim, shape.intermediate
    return compute * (6 * h + 3 * kv + 4 * inter) + 2 * FP32 * h


def plan_memory(shape: ModelShape, cfg: LearnerConfig, *, nproc: int = 1, seq_len: int = 1024,
                completion_len: int | None = None, rollout: RolloutPlan = RolloutPlan(),
                gpu_gib: float = 80.0) -> MemoryPlan:
    """Per-GPU memory of a node training `shape` with `cfg` on `nproc` learner ranks."""
    if nproc < 1 or seq_len < 2:
        raise ValueError("nproc must be >= 1 and seq_len >= 2")
    sharded = nproc > 1
    compute = BF16 if cfg.dtype == "bf16" else FP32
    base = BF16 if base_dtype(cfg) == "bf16" else FP32
    P = shape.params
    if cfg.lora is None:
        trainable, frozen_bytes, mode = P, 0, "full"
    else:
        trainable = shape.lora_params(cfg.lora.rank, tuple(cfg.lora.target_modules))
        frozen_bytes, mode = P * base, f"lora r{cfg.lora.rank}"
    per_rank = 1.0 / nproc
    t: dict[str, float] = {
        "weights": (frozen_bytes + trainable * FP32) * per_rank,
        "gradients": trainable * FP32 * per_rank,
        "optimizer": trainable * FP32 * ADAM_STATES * per_rank,
        "optimizer_step_temp": trainable * FP32 * STEP_TEMPORARIES * per_rank,
    }
    head_rows = shape.vocab * shape.hidden
    if sharded:
        gathered = shape.root_params + 2 * shape.layer_params
        grad_bytes = (compute + (FP32 if compute != FP32 else 0)) if cfg.lora is None else 0
        t["fsdp_gathered"] = gathered * (compute + grad_bytes)
    elif cfg.dtype == "bf16" and base == FP32:
        t["autocast_copies"] = (shape.layers * shape.layer_params + head_rows) * BF16
    tokens = cfg.micro_batch * seq_len
    comp = completion_len if completion_len is not None else seq_len // 2
    residual = FP32 if not sharded else compute
    per_layer = activation_bytes_per_token_layer(shape, compute)
    if cfg.activation_checkpointing:
        t["activations"] = tokens * (shape.layers * shape.hidden * residual + per_layer)
    else:
        t["activations"] = tokens * shape.layers * per_layer
    t["activations"] += (tokens * shape.hidden * residual + cfg.micro_batch * comp * shape.hidden * FP32
                         + min(cfg.logprob_chunk, cfg.micro_batch * comp) * shape.vocab * FP32 * HEAD_CHUNK_COPIES
                         + cfg.micro_batch * seq_len * seq_len)  # final hidden, gathered rows, head chunk, mask
    kv_cache = rollout.rows * rollout.tokens * shape.layers * 2 * shape.kv_dim
    sample_logits = rollout.rows * shape.vocab * FP32 * HEAD_CHUNK_COPIES
    if rollout.backend == "shared":
        if sharded:
            raise ValueError("a sharded learner cannot share its model with the transformers backend")
        t["rollout_transient"] = kv_cache * base + sample_logits
    elif rollout.backend == "transformers":
        own = FP32 if rollout.dtype == "fp32" else BF16
        t["rollout_weights"] = P * own
        t["rollout_transient"] = kv_cache * own + sample_logits
    elif rollout.vllm_gpus == 0:
        t["rollout_vllm_reserved"] = rollout.vllm_memory * gpu_gib * GIB
    terms = {k: v / GIB for k, v in t.items()}
    rollout_fixed = terms.get("rollout_weights", 0.0) + terms.get("rollout_vllm_reserved", 0.0)
    phases = {k: v + rollout_fixed for k, v in learner_phases(terms).items()}
    phases["generate"] += terms.get("rollout_transient", 0.0)
    return MemoryPlan(shape=shape, mode=mode, dtype=cfg.dtype, nproc=nproc, trainable=trainable, terms=terms,
                      phases=phases, gpu_gib=gpu_gib)


def learner_phases(terms: dict[str, float]) -> dict[str, float]:
    """The learner's own GiB per phase (no rollout side); steady state, AdamW's state already there."""
    resident = terms["weights"] + terms["gradients"] + terms["optimizer"]
    return {
        "generate": resident,
        "forward_backward": (resident + terms.get("fsdp_gathered", 0.0) + terms.get("autocast_copies", 0.0)
                             + terms["activations"]),
        "step": resident + terms["optimizer_step_temp"],
    }


def learner_peak(plan: MemoryPlan) -> float:
    """The learner's own peak: what a bare update's `max_memory_allocated` should read."""
    return max(learner_phases(plan.terms).values())


def ranks_needed(shape: ModelShape, cfg: LearnerConfig, *, gpu_gib: float, rollout: RolloutPlan,
                 seq_len: int = 1024, most: int = 64) -> MemoryPlan | None:
    """The plan with the fewest learner ranks (1, 2, 4, ...) whose rank 0 fits `gpu_gib`; None if none does."""
    n = 1
    while n <= most:
        ro = rollout
        if n > 1 and rollout.backend == "shared":
            ro = RolloutPlan(**{**rollout.__dict__, "backend": "transformers"})
        plan = plan_memory(shape, cfg, nproc=n, seq_len=seq_len, rollout=ro, gpu_gib=gpu_gib)
        if plan.fits:
            return plan
        n *= 2
    return None
