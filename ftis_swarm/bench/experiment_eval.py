"""Held-out accuracy for the experiment: greedy pass@1 on a fixed set of a task's test items.

The same items (the task's `test` split, drawn with one seed) for every arm and every
evaluation, so accuracies are comparable; their ids are hashed into the result so a reader
(and the test) can check that. Greedy decoding as in the paper's evaluation: argmax at
each step, no sampling settings at all, batched with left padding; answers scored by the
task's own verifier.
"""

from __future__ import annotations

import hashlib
from typing import Any, Sequence

import torch

from ftis_swarm.tasks import Task, TaskItem


def heldout_items(task: Task, n: int, seed: int) -> list[TaskItem]:
    """The fixed evaluation set: `n` test items of `task` drawn with `seed`."""
    return task.sample(n, seed=seed, split="test")


def items_digest(items: Sequence[TaskItem]) -> str:
    """16 hex digits identifying the evaluation set (a hash of the item ids, in order)."""
    return hashlib.sha256("\n".join(it.item_id for it in items).encode()).hexdigest()[:16]


@torch.no_grad()
def greedy_texts(model: Any, tokenizer: Any, prompts: Sequence[Sequence[int]], *, max_new_tokens: int,
                 eos_ids: Sequence[int], pad_id: int, batch_size: int = 64) -> list[str]:
    """The greedy completion of each prompt, decoded without special tokens.

    One batch holds up to `batch_size` prompts: on CPU a decode step of this size of model
    costs about the same at 8 rows as at 64 (it is bound by reading the weights).
    """
    device = next(model.parameters()).device
    eos = torch.tensor(sorted(set(eos_ids)), device=device)  # (E,)
    texts: list[str] = []
    for start in range(0, len(prompts), batch_size):
        chunk = prompts[start : start + batch_size]
        width = max(len(p) for p in chunk)
        ids = torch.full((len(chunk), width), pad_id, dtype=torch.long)  # (b, P) left padded
        mask = torch.zeros((len(chunk), width), dtype=torch.long)  # (b, P)
        for i, p in enumerate(chunk):
            ids[i, width - len(p) :] = torch.tensor(list(p))
            mask[i, width - len(p) :] = 1
        ids, mask = ids.to(device), mask.to(device)
        out = torch.full((len(chunk), max_new_tokens), pad_id, dtype=torch.long, device=device)  # (b, S)
        done = torch.zeros(len(chunk), dtype=torch.bool, device=device)  # (b,)
        past, step_ids = None, ids  # (b, P)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)  # (b, P)
        for t in range(max_new_tokens):
            res = model(input_ids=step_ids, attention_mask=mask, position_ids=positions, past_key_values=past,
                        use_cache=True, logits_to_keep=1)
            past = res.past_key_values
            nxt = res.logits[:, -1].argmax(-1)  # (b,)
            out[:, t] = torch.where(done, torch.full_like(nxt, pad_id), nxt)  # (b,)
            done |= torch.isin(nxt, eos)  # (b,)
            if bool(done.all()):
                break
            step_ids = nxt[:, None]  # (b, 1)
            positions = positions[:, -1:] + 1  # (b, 1)
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)  # (b, P+t+1)
        texts.extend(tokenizer.batch_decode(out.tolist(), skip_special_tokens=True))
    return texts


def heldout_accuracy(model: Any, tokenizer: Any, task: Task, items: Sequence[TaskItem], *, max_new_tokens: int,
                     eos_ids: Sequence[int], pad_id: int) -> dict[str, Any]:
    """Greedy pass@1 of `model` on `items`: `{accuracy, correct, items, digest, reasons}`."""
    was_training = model.training
    model.eval()
    try:
        prompts = [task.render_prompt(tokenizer, it) for it in items]
        texts = greedy_texts(model, tokenizer, prompts, max_new_tokens=max_new_tokens, eos_ids=eos_ids,
                             pad_id=pad_id)
    finally:
        model.train(was_training)
    scores = task.score(list(items), texts)
    correct = sum(1 for s in scores if s.correct)
    reasons: dict[str, int] = {}
    for s in scores:
        reasons[s.reason] = reasons.get(s.reason, 0) + 1
    return {
        "accuracy": correct / len(items) if items else 0.0,
        "correct": correct,
        "items": len(items),
        "digest": items_digest(items),
        "reasons": reasons,
    }
