"""`ftis-node eval`: greedy pass@1 of a model, checkpoint or adapter on a task's held-out split.

Greedy decoding (the paper's evaluation); answers scored by the same task verifier the
learner uses. Where CUDA is present the model runs there (bf16), through vLLM when it is
installed (`backend="auto"`), else through transformers, batched with left padding; on
CPU, transformers in fp32. Either way the evaluation is the product's one greedy evaluator,
`node.heldout.greedy_pass_at_1` over the backend's `greedy` (argmax, no generation_config
penalties), which a node's held-out curve and the experiment's held-out accuracy also run,
so all three report the same answers for the same weights and items; the items are
`node.heldout.heldout_items` with seed 0, a node's default `eval_seed`.
A LoRA adapter directory (one with `adapter_config.json`, e.g. a node checkpoint's
`adapter/`) is loaded on its base model with peft, or served by vLLM as a LoRA request.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from ftis_swarm.models import load_model
from ftis_swarm.node.heldout import greedy_pass_at_1, heldout_items
from ftis_swarm.rollout import RolloutBackend
from ftis_swarm.tasks import get_task

log = logging.getLogger(__name__)


def _adapter_base(name: str) -> Optional[str]:
    """The base model recorded in an adapter directory, or None when `name` is not one."""
    config = Path(name) / "adapter_config.json"
    return json.loads(config.read_text())["base_model_name_or_path"] if config.is_file() else None


def load_for_eval(name: str, *, device: str = "cpu", dtype: str = "fp32") -> tuple[Any, Any]:
    """A model by name or path; an adapter directory is applied to its recorded base model."""
    base_name = _adapter_base(name)
    if base_name is not None:
        from peft import PeftModel

        base, tokenizer = load_model(base_name, dtype=dtype, device=device)
        return PeftModel.from_pretrained(base, Path(name)).eval(), tokenizer
    model, tokenizer = load_model(name, dtype=dtype, device=device)
    return model.eval(), tokenizer


def pick_eval_backend(backend: str) -> tuple[str, str]:
    """`(kind, device)` for `backend` auto / transformers / vllm: auto is vLLM on CUDA when installed."""
    from ftis_swarm.rollout.factory import vllm_installed

    cuda = torch.cuda.is_available()
    if backend not in ("auto", "transformers", "vllm"):
        raise ValueError(f"backend must be auto, transformers or vllm, got {backend!r}")
    if backend == "vllm" and not vllm_installed():
        raise ValueError("backend 'vllm' needs the vllm package, which is not installed")
    kind = "vllm" if backend == "vllm" or (backend == "auto" and cuda and vllm_installed()) else "transformers"
    return kind, "cuda" if cuda else "cpu"


def eval_backend(name: str, kind: str, device: str, *, batch_size: int = 8) -> tuple[RolloutBackend, Any]:
    """`(backend, tokenizer)` serving `name` for greedy decoding; an adapter directory on its recorded base.

    vLLM serves an adapter as a LoRA request; transformers applies it with peft (`load_for_eval`).
    """
    from ftis_swarm.models import load_tokenizer
    from ftis_swarm.rollout import GroupHeader, TransformersBackend, make_backend

    base_name = _adapter_base(name)
    header = GroupHeader(run_id="eval", sender="eval", model_id=name[-256:])
    if kind == "transformers":
        model, tokenizer = load_for_eval(name, device=device, dtype="bf16" if device == "cuda" else "fp32")
        return TransformersBackend(model=model, tokenizer=tokenizer, header=header, max_batch_rows=batch_size), tokenizer
    if base_name is None:
        engine = make_backend("vllm", name, header=header, dtype="bf16")
    else:
        rank = int(json.loads((Path(name) / "adapter_config.json").read_text())["r"])
        engine = make_backend("vllm", base_name, header=header, dtype="bf16", enable_lora=True, max_lora_rank=rank)
        engine.set_adapter(name)
    return engine, load_tokenizer(base_name or name)


def evaluate(model_name: str, task_name: str, *, limit: Optional[int], max_new_tokens: int, batch_size: int = 8,
             split: str = "test", on_batch: Optional[Callable[[int, int], None]] = None,
             backend: str = "auto") -> dict[str, Any]:
    """Greedy pass@1 over `limit` items of the split drawn with seed 0 (all of a dataset's, or 200 generated ones)."""
    t0 = time.perf_counter()
    task = get_task(task_name)
    kind, device = pick_eval_backend(backend)
    engine, tokenizer = eval_backend(model_name, kind, device, batch_size=batch_size)
    try:
        items = heldout_items(task, limit, 0, split=split)
        # vLLM batches by itself: one call holds every prompt
        result = greedy_pass_at_1(engine, tokenizer, task, items, max_new_tokens=max_new_tokens, on_batch=on_batch,
                                  batch_size=batch_size if kind == "transformers" else max(1, len(items)))
    finally:
        engine.close()
    accuracy = result.pop("accuracy")
    return {
        "model": model_name,
        "task": task_name,
        "split": split,
        **result,
        "pass_at_1": accuracy,
        "max_new_tokens": max_new_tokens,
        "backend": kind,
        "device": device,
        "seconds": time.perf_counter() - t0,
    }
