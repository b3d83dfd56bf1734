"""`ftis-node eval`: greedy pass@1 of a model, checkpoint or adapter on a task's held-out split.

Greedy decoding (the paper's evaluation), batched with left padding through transformers'
`generate`; answers scored by the same task verifier the learner uses. A LoRA adapter
directory (one with `adapter_config.json`, e.g. a node checkpoint's `adapter/`) is loaded
on its base model with peft.
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


def load_for_eval(name: str) -> tuple[Any, Any]:
    """A model by name or path; an adapter directory is applied to its recorded base model."""
    path = Path(name)
    if (path / "adapter_config.json").is_file():
        from peft import PeftModel

        base_name = json.loads((path / "adapter_config.json").read_text())["base_model_name_or_path"]
        base, tokenizer = load_model(base_name)
        return PeftModel.from_pretrained(base, path).eval(), tokenizer
    model, tokenizer = load_model(name)
    return model.eval(), tokenizer


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
        out = model.generate(input_ids=ids, attention_mask=att, max_new_tokens=max_new_tokens, do_sample=False,
                             pad_token_id=pad, top_p=None, top_k=None, temperature=None)  # (b, L + new)
        texts.extend(tokenizer.batch_decode(out[:, L:], skip_special_tokens=True))
    return texts


def evaluate(model_name: str, task_name: str, *, limit: Optional[int], max_new_tokens: int, batch_size: int = 8,
             split: str = "test", on_batch: Optional[Callable[[int, int], None]] = None) -> dict[str, Any]:
    """Greedy pass@1 over the first `limit` items of the split (all of a dataset's, or 200 generated ones)."""
    t0 = time.perf_counter()
    task = get_task(task_name)
    model, tokenizer = load_for_eval(model_name)
    n = limit if limit is not None else (task.size(split) or GENERATED_EVAL_ITEMS)
    items = task.sample(n, seed=0, split=split)
    prompts = [list(task.render_prompt(tokenizer, it)) for it in items]
    texts: list[str] = []
    for start in range(0, len(prompts), batch_size):
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
        "seconds": time.perf_counter() - t0,
    }
