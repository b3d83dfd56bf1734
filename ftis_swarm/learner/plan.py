"""How much GPU memory a node needs: the learner's own dtype and sharding choices, added up per GPU.

`plan_memory` returns, per GPU, the peak of three phases (generate, forward/backward,
optimiser step): what `torch.cuda.max_memory_allocated` should read; a plan fits when that
peak plus `RUNTIME_GIB` (the CUDA context) fits the GPU. Every term follows from what the code does (`learner.py`,
`sharding.py`, `core/logprobs.py`), not from a rule of thumb: the trainable shard's weights,
gradients and AdamW states; the FSDP units gathered at once; autocast's bf16 copies; one
micro-batch's activations (`layer_activation_bytes`); the chunked head's backward
(`head_backward_bytes`); the rollout side on rank 0. docs/gpu.md ("The memory plan") lists
each term and how the activation and head terms were derived and checked.
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
SAMPLE_LOGIT_COPIES = 3
"""Sampling one token per row holds its fp32 logits, their log-softmax and the cumulative sum it draws from."""
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


def layer_activation_bytes(shape: ModelShape, regime: str, seq_len: int, masked: bool | None = None) -> int:
    """Bytes one Qwen2 decoder layer saves for backward, per token.

    `regime`: "fp32"; "autocast" (one process, bf16 matmuls, fp32 residual stream); "bf16"
    (FSDP mixed precision: bf16 parameters, so a bf16 residual stream). `masked`: rows padded
    (a mask) or not; None takes the larger.
    """
    h, kv, inter, heads = shape.hidden, shape.kv_dim, shape.intermediate, shape.heads
    if regime == "fp32":
        norms = 2 * 3 * h * FP32  # per RMSNorm: its input, the normalised value, the output the Linears share
        unmasked = (3 * h + heads * seq_len + h) * FP32  # math SDPA: scaled q, k; v; probabilities; o_proj input
        masked_ = (4 * h + h) * FP32 + seq_len * FP32  # efficient SDPA: q, k, v repeated to every head, output; mask
        mlp = 4 * inter * FP32  # gate output, SiLU output, up output, their product
    else:
        if regime == "autocast":  # fp32 input and normalised value; a bf16 copy of the output per Linear (3, 2)
            norms = (2 * FP32 * h + 3 * BF16 * h) + (2 * FP32 * h + 2 * BF16 * h)
        else:  # fp32 upcast and normalised value, its bf16 cast, and the bf16 output the Linears share
            norms = 2 * (2 * FP32 * h + 2 * BF16 * h)
        unmasked = (2 * h + 2 * kv + h) * BF16 + heads * FP32  # flash: q, k, v, output, log-sum-exp; o_proj input
        masked_ = (4 * h + h) * BF16 + seq_len * BF16 + heads * FP32
        mlp = 4 * inter * BF16
    attention = {None: max(unmasked, masked_), True: masked_, False: unmasked}[masked]
    return norms + attention + mlp


def head_backward_bytes(shape: ModelShape, regime: str, positions: int, chunk: int, *, trained: bool = True) -> int:
    """The chunked head's backward beyond the layers' activations, for one micro-batch.

    The head weight is used once per chunk (and again by the embedding when tied); autograd
    sums the uses' gradients in a buffer, out of place: the running sum, the new gradient and
    their sum at once. Next to the buffer, one chunk: its log-softmax output and the two
    gradients of its logits (fp32), and under autocast the chunk's bf16 copy of the weight.
    A head that is not trained (LoRA leaves it frozen) has no weight gradient: one chunk only.
    """
    grad = BF16 if regime == "bf16" else FP32
    weight = shape.vocab * shape.hidden
    uses = -(-positions // chunk) + (1 if shape.tied else 0)
    rows = min(chunk, positions)
    one_chunk = 3 * rows * shape.vocab * FP32 + (weight * BF16 if regime == "autocast" else 0)
    if not trained:
        return one_chunk
    if uses > 1:
        return max(3 * weight * grad, weight * grad + one_chunk)
    return weight * grad + one_chunk


def plan_memory(shape: ModelShape, cfg: LearnerConfig, *, nproc: int = 1, seq_len: int = 1024,
                completion_len: int | None = None, rollout: RolloutPlan = RolloutPlan(),
                gpu_gib: float = 80.0, sharded: bool | None = None) -> MemoryPlan:
    """Per-GPU memory of a node training `shape` with `cfg` on `nproc` learner ranks.

    `sharded`: the learner is FSDP2's (`ShardedLearner`); by default exactly when `nproc > 1`
    (`ftis-node join` runs one process without FSDP), True also plans one FSDP rank.
    """
    if nproc < 1 or seq_len < 2:
        raise ValueError("nproc must be >= 1 and seq_len >= 2")
    sharded = nproc > 1 if sharded is None else sharded
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
    if sharded:  # gathered parameters; two layers' gradients and their fp32 copies for the reduce-scatter
        grad_bytes = (compute + (FP32 if compute != FP32 else 0)) if cfg.lora is None else 0
        t["fsdp_gathered"] = ((shape.root_params + 2 * shape.layer_params) * compute
                              + 2 * shape.layer_params * grad_bytes)
    elif cfg.dtype == "bf16" and base == FP32:  # the head's copy is made chunk by chunk (head_backward)
        t["autocast_copies"] = shape.layers * shape.layer_params * BF16
    tokens = cfg.micro_batch * seq_len
    comp = completion_len if completion_len is not None else seq_len // 2
    # bf16 parameters (FSDP's gathered ones, or a bf16 LoRA's base) make a bf16 residual stream
    regime = "fp32" if cfg.dtype == "fp32" else ("bf16" if sharded or base == BF16 else "autocast")
    residual = BF16 if regime == "bf16" else FP32
    per_layer = layer_activation_bytes(shape, regime, seq_len)
    if cfg.activation_checkpointing:  # each layer's input, and one layer recomputed in backward
        t["activations"] = tokens * (shape.layers * shape.hidden * residual + per_layer)
    else:
        t["activations"] = tokens * shape.layers * per_layer
    positions = cfg.micro_batch * comp
    final_norm = tokens * 2 * FP32 * shape.hidden + positions * shape.hidden * residual
    t["head_backward"] = final_norm + head_backward_bytes(shape, regime, positions, cfg.logprob_chunk,
                                                          trained=cfg.lora is None)
    kv_cache = rollout.rows * rollout.tokens * shape.layers * 2 * shape.kv_dim
    sample_logits = rollout.rows * shape.vocab * FP32 * SAMPLE_LOGIT_COPIES
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
                             + terms["activations"] + terms["head_backward"]),
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
