"""`ftis-node eval`: greedy pass@1 of a model, checkpoint or adapter on a task's held-out split.

Greedy decoding (the paper's evaluation); answers scored by the same task verifier the
learner uses. Where CUDA is present the model runs there (bf16), through vLLM when it is
installed (`backend="auto"`), else through transformers' `generate`, batched with left
padding; on CPU, transformers in fp32. A LoRA adapter directory (one with
`adapter_config.json`, e.g. a node checkpoint's `adapter/`) is loaded on its base model with
peft, or served by vLLM as a LoRA request.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from ftis_swarm.models import load_model
from ftis_swarm.tasks import get_task

log = logging.getLogger(__name__)

GENERATED_EVAL_ITEMS = 200
"""Items evaluated from a generated task (no fixed size) when no --limit is given."""


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


def vllm_greedy_texts(name: str, prompts: list[list[int]], *, max_new_tokens: int) -> list[str]:
    """Greedy answers through a vLLM engine (an adapter directory served as a LoRA request)."""
    from ftis_swarm.models import load_tokenizer
    from ftis_swarm.rollout import GroupHeader, make_backend

    base_name = _adapter_base(name)
    header = GroupHeader(run_id="eval", sender="eval", model_id=name[-256:])
    if base_name is None:
        engine = make_backend("vllm", name, header=header, dtype="bf16")
    else:
        rank = int(json.loads((Path(name) / "adapter_config.json").read_text())["r"])
        engine = make_backend("vllm", base_name, header=header, dtype="bf16", enable_lora=True, max_lora_rank=rank)
        engine.set_adapter(name)
    try:
        ids = engine.greedy(prompts, max_new_tokens)
    finally:
        engine.close()
    return load_tokenizer(base_name or name).batch_decode(ids, skip_special_tokens=True)


@torch.no_grad()
def greedy_completions(model: Any, tokenizer: Any, prompts: list[list[int]], *, max_new_tokens: int,
                       batch_size: int) -> list[str]:
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    texts: list[str] = []
    for start in range(0, len(prompts), batch_size):
        chunk = prompts[start : start + batch_size]
        L = max(len(p) for p in chunk)
        ids = torch.full((len(chunk), L), pad, dtype=torch.long)  # (b, L) left padded
        att = torch.zeros(len(chunk), L, dtype=torch.long)  # (b, L)
        for i, p in enumerate(chunk):
            ids[i, L - len(p) :] = torch.tensor(p)
            att[i, L - len(p) :] = 1
        device = next(model.parameters()).device
        ids, att = ids.to(device), att.to(device)  # (b, L), (b, L)
        out = model.generate(input_ids=ids, attention_mask=att, max_new_tokens=max_new_tokens, do_sample=False,
                             pad_token_id=pad, top_p=None, top_k=None, temperature=None)  # (b, L + new)
        texts.extend(tokenizer.batch_decode(out[:, L:], skip_special_tokens=True))
    return texts


def evaluate(model_name: str, task_name: str, *, limit: Optional[int], max_new_tokens: int, batch_size: int = 8,
             split: str = "test", on_batch: Optional[Callable[[int, int], None]] = None,
             backend: str = "auto") -> dict[str, Any]:
    """Greedy pass@1 over the first `limit` items of the split (all of a dataset's, or 200 generated ones)."""
    t0 = time.perf_counter()
    task = get_task(task_name)
    kind, device = pick_eval_backend(backend)
    if kind == "vllm":
        from ftis_swarm.models import load_tokenizer

        tokenizer = load_tokenizer(_adapter_base(model_name) or model_name)
    else:
        model, tokenizer = load_for_eval(model_name, device=device, dtype="bf16" if device == "cuda" else "fp32")
    n = limit if limit is not None else (task.size(split) or GENERATED_EVAL_ITEMS)
    items = task.sample(n, seed=0, split=split)
    prompts = [list(task.render_prompt(tokenizer, it)) for it in items]
    texts: list[str] = []
    if kind == "vllm":  # the engine batches by itself
        texts = vllm_greedy_texts(model_name, prompts, max_new_tokens=max_new_tokens)
        if on_batch:
            on_batch(len(texts), len(prompts))
    for start in range(0, len(prompts) if kind == "transformers" else 0, batch_size):
        texts += greedy_completions(model, tokenizer, prompts[start : start + batch_size],
                                    max_new_tokens=max_new_tokens, batch_size=batch_size)
        if on_batch:
            on_batch(len(texts), len(prompts))
    scores = task.score(items, texts)
    correct = sum(1 for s in scores if s.correct)
    return {
        "model": model_name,
        "task": task_name,
        "split": split,
        "items": len(items),
        "correct": correct,
        "pass_at_1": correct / len(items) if items else 0.0,
        "max_new_tokens": max_new_tokens,
        "backend": kind,
        "device": device,
        "seconds": time.perf_counter() - t0,
    }
