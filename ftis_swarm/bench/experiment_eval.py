"""Held-out accuracy for the experiment: greedy pass@1 on a fixed set of a task's test items.

The same items (the task's `test` split, drawn with one seed) for every arm and every
evaluation, so accuracies are comparable; their ids are hashed into the result so a reader
(and the test) can check that. Decoding and scoring are `ftis-node eval`'s own
(`rollout.greedy_texts` over a backend's `greedy`, `tasks.evaluation_summary`): on the same
checkpoint and items the two report the same answers, item by item.
"""

from __future__ import annotations

from typing import Any, Sequence

from ftis_swarm.rollout import GroupHeader, TransformersBackend, greedy_texts
from ftis_swarm.tasks import Task, TaskItem, evaluation_summary, items_digest

EVAL_BATCH = 64
"""Prompts per greedy batch: on CPU a decode step of a small model costs about the same at 8 rows
as at 64 (it is bound by reading the weights)."""

__all__ = ["heldout_accuracy", "heldout_items", "items_digest"]


def heldout_items(task: Task, n: int, seed: int) -> list[TaskItem]:
    """The fixed evaluation set: `n` test items of `task` drawn with `seed`."""
    return task.sample(n, seed=seed, split="test")


def heldout_accuracy(model: Any, tokenizer: Any, task: Task, items: Sequence[TaskItem], *, max_new_tokens: int,
                     eos_ids: Sequence[int], pad_id: int) -> dict[str, Any]:
    """Greedy pass@1 of `model` on `items`: `{accuracy, correct, items, digest, reasons, verdicts, answers_digest}`.

    `eos_ids` and `pad_id` are the ones the caller's rollout backend stops and pads with;
    the model is served in place (no copy) by a transformers backend for the call.
    """
    backend = TransformersBackend(model=model, tokenizer=tokenizer, max_batch_rows=EVAL_BATCH,
                                  header=GroupHeader(run_id="heldout", sender="heldout", model_id="heldout"))
    backend.eos_ids, backend.pad_id = sorted(set(eos_ids)), int(pad_id)
    prompts = [task.render_prompt(tokenizer, it) for it in items]
    texts = greedy_texts(backend, tokenizer, prompts, max_new_tokens=max_new_tokens, batch_size=EVAL_BATCH)
    result = evaluation_summary(task, items, texts)
    return {"accuracy": result["correct"] / len(items) if items else 0.0, **result}
