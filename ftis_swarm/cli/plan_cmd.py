"""`ftis-node plan`: the GPUs and memory per GPU a node needs, from the learner's own choices.

The figures come from `ftis_swarm.learner.plan` (the code's dtypes and sharding, added up);
`--table` prints the table in docs/gpu.md, made by the same code.
"""

from __future__ import annotations

import json
from typing import Optional

import typer

from ftis_swarm.cli.app import app, fail

TABLE_MODELS = ("Qwen2.5-1.5B", "Qwen2.5-3B", "Qwen2.5-7B", "Qwen2.5-14B", "Qwen2.5-32B")
TABLE_LORA_RANK = 64
TABLE_GPUS = (80.0, 141.0)


def _format_plan(plan) -> str:
    s = plan.shape
    lines = [f"{s.name}: {s.params / 1e9:.2f}B parameters ({s.layers} layers, hidden {s.hidden}, vocab {s.vocab}, "
             f"{'tied' if s.tied else 'untied'} head); {plan.mode}, {plan.trainable / 1e6:.1f}M trainable; "
             f"dtype {plan.dtype}; {plan.nproc} learner rank{'s' * (plan.nproc > 1)}",
             "per GPU (GiB; rank 0 holds the rollout_* terms):"]
    lines += [f"  {k:<22} {v:8.2f}" for k, v in plan.terms.items()]
    lines.append("rank 0 by phase (allocated GiB):")
    lines += [f"  {k:<22} {v:8.2f}" for k, v in plan.phases.items()]
    verdict = "fits" if plan.fits else "does NOT fit"
    lines.append(f"peak {plan.peak:.1f} GiB + {_runtime():.1f} GiB runtime: {verdict} a {plan.gpu_gib:.0f} GiB GPU")
    return "\n".join(lines)


def _runtime() -> float:
    from ftis_swarm.learner.plan import RUNTIME_GIB

    return RUNTIME_GIB


def format_table(micro_batch: int, seq_len: int) -> str:
    """The docs table: learner ranks needed for each model, full and LoRA, on 80 and 141 GiB GPUs."""
    from ftis_swarm.config import LearnerConfig, LoRAConfig
    from ftis_swarm.learner.plan import RolloutPlan, plan_memory, ranks_needed
    from ftis_swarm.models.shapes import shape_of

    header = ("| model | trained | " + " | ".join(f"learner GPUs @{g:.0f} GiB (rank-0 peak)" for g in TABLE_GPUS)
              + " | one GPU, vLLM sharing at 0.35 | vLLM GPUs @80 GiB (bf16 weights) |")
    out = [header, "|" + "---|" * (header.count("|") - 1)]
    for name in TABLE_MODELS:
        shape = shape_of(name)
        for lora in (None, LoRAConfig(rank=TABLE_LORA_RANK)):
            cfg = LearnerConfig(dtype="bf16", micro_batch=micro_batch, activation_checkpointing=True, lora=lora)
            cells = []
            for gpu in TABLE_GPUS:
                plan = ranks_needed(shape, cfg, gpu_gib=gpu, rollout=RolloutPlan(backend="vllm", vllm_gpus=1),
                                    seq_len=seq_len)
                cells.append(f"{plan.nproc} ({plan.peak:.0f} GiB)" if plan else "> 64")
            one = plan_memory(shape, cfg, seq_len=seq_len, rollout=RolloutPlan(backend="vllm"), gpu_gib=141.0)
            shared = f"H200: {'yes' if one.fits else 'no'} ({one.peak:.0f} GiB)"
            tp = 1
            while shape.params * 2 / tp > 0.5 * 0.9 * 80 * 2**30:  # weights in half of a 0.9 share; KV the rest
                tp *= 2
            mode = "full" if lora is None else f"LoRA r{TABLE_LORA_RANK}"
            out.append(f"| {name} | {mode} | " + " | ".join(cells) + f" | {shared} | {tp} |")
    return "\n".join(out)


@app.command()
def plan(
    model: Optional[str] = typer.Option(None, help="Qwen2.5 size (Qwen2.5-7B, any -Instruct/-Coder/-Math) or a checkpoint folder."),
    lora_rank: Optional[int] = typer.Option(None, help="Train a LoRA adapter of this rank (default: full fine-tune)."),
    nproc: Optional[int] = typer.Option(None, min=1, help="Learner ranks (GPUs); default: the fewest that fit."),
    dtype: str = typer.Option("bf16", help="fp32, or bf16 (bf16 compute, fp32 master weights and optimiser state)."),
    micro_batch: int = typer.Option(4, min=1, help="Sequences per forward/backward. [learner.micro_batch]"),
    seq_len: int = typer.Option(1024, min=2, help="Prompt + completion tokens per sequence."),
    activation_checkpointing: bool = typer.Option(True, "--activation-checkpointing/--no-activation-checkpointing",
                                                  help="[learner.activation_checkpointing]"),
    backend: str = typer.Option("vllm", help="Rollout: vllm, transformers (own copy), shared (one-process learner's model)."),
    vllm_memory: float = typer.Option(0.35, help="vLLM's share of rank 0's GPU when it shares it."),
    vllm_gpus: int = typer.Option(0, min=0, help="GPUs vLLM has to itself (0: it shares rank 0's)."),
    gpu_memory: float = typer.Option(80.0, help="GiB per GPU."),
    table: bool = typer.Option(False, "--table", help="Print docs/gpu.md's table (every size, full and LoRA) and exit."),
    json_out: bool = typer.Option(False, "--json", help="Print the plan as JSON."),
) -> None:
    """The GPUs and memory per GPU a node needs for a model, full or LoRA, from the code's dtype and sharding."""
    if table:
        typer.echo(format_table(micro_batch, seq_len))
        return
    if model is None:
        fail("--model is required (or --table)")
    if dtype not in ("fp32", "bf16"):
        fail(f"--dtype must be fp32 or bf16, not {dtype!r}")
    if backend not in ("vllm", "transformers", "shared"):
        fail(f"--backend must be vllm, transformers or shared, not {backend!r}")
    if gpu_memory <= 0:
        fail("--gpu-memory must be more than 0 GiB")
    if backend == "shared" and nproc is not None and nproc > 1:
        fail("--backend shared needs one learner process: a sharded model cannot be shared with the sampler")
    if not 0 < vllm_memory < 1:
        fail("--vllm-memory must be in (0, 1)")
    from pydantic import ValidationError

    from ftis_swarm.config import LearnerConfig, LoRAConfig
    from ftis_swarm.learner.plan import RolloutPlan, plan_memory, ranks_needed
    from ftis_swarm.models.shapes import shape_of

    try:
        shape = shape_of(model)
        cfg = LearnerConfig(dtype=dtype, micro_batch=micro_batch, activation_checkpointing=activation_checkpointing,
                            lora=LoRAConfig(rank=lora_rank) if lora_rank is not None else None)
    except ValidationError as exc:
        fail(f"--lora-rank: {exc.errors()[0]['msg']}")
    except ValueError as exc:
        fail(str(exc))
    rollout = RolloutPlan(backend=backend, vllm_memory=vllm_memory, vllm_gpus=vllm_gpus)  # type: ignore[arg-type]
    if nproc is None:
        result = ranks_needed(shape, cfg, gpu_gib=gpu_memory, rollout=rollout, seq_len=seq_len)
        if result is None:
            fail(f"{shape.name} does not fit {gpu_memory:.0f} GiB GPUs with up to 64 learner ranks")
    else:
        result = plan_memory(shape, cfg, nproc=nproc, seq_len=seq_len, rollout=rollout, gpu_gib=gpu_memory)
    typer.echo(json.dumps(result.as_dict(), indent=2) if json_out else _format_plan(result))
