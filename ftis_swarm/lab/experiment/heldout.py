"""Held-out accuracy, the experiment's one evaluator: greedy pass@1 and sampled accuracy per item.

The same items (the task's `test` split, drawn with one seed: a node's held-out set,
`node.heldout.heldout_items`) for every arm and every evaluation, so accuracies are
comparable and pairable item by item; their ids are hashed into the result so a reader (and
the test) can check that. Greedy pass@1 is the product's one evaluator,
`node.heldout.greedy_pass_at_1`, which `ftis-node eval` and a node's held-out curve run
too: on the same weights and items the three report the same answers, item by item.

The experiment compares arms item by item (paired on the same held-out questions), so both
figures are kept per item, in the order of the items, with the item ids beside them:

- greedy: 1 when the greedy completion is right, else 0 (the paper's pass@1); decoded and
  scored by `heldout_accuracy`, the product's greedy evaluator over the model served in place;
- sampled: how many of `samples` completions at temperature `T` are right (top-k and top-p
  off, the distribution a node samples from), drawn by the rollout backend the node uses,
  so the groups come back with their fp32 `logp_gen` (the pilot weighs them under another
  model). `correct / samples` per item estimates the model's accuracy at `T`, with less
  noise than one greedy answer.

Answers are scored by the task's own verifier (`task.score`), as the learner scores them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from ftis_swarm.config import SamplingConfig
from ftis_swarm.node.heldout import EVAL_BATCH, greedy_pass_at_1, heldout_items
from ftis_swarm.rollout import GroupHeader, PromptRequest, TransformersBackend
from ftis_swarm.rollout.base import eos_token_ids
from ftis_swarm.tasks import Task, TaskItem, items_digest
from ftis_swarm.wire import Group

__all__ = ["HeldoutResult", "evaluate_heldout", "heldout_accuracy", "heldout_items", "items_digest", "sample_groups", "sampled_rewards"]


def heldout_accuracy(model: Any, tokenizer: Any, task: Task, items: Sequence[TaskItem], *, max_new_tokens: int,
                     eos_ids: Sequence[int], pad_id: int) -> dict[str, Any]:
    """Greedy pass@1 of `model` on `items`: `{accuracy, correct, items, digest, reasons, verdicts, answers_digest}`.

    `eos_ids` and `pad_id` are the ones the caller's rollout backend stops and pads with;
    the model is served in place (no copy) by a transformers backend for the call.
    """
    backend = TransformersBackend(model=model, tokenizer=tokenizer, max_batch_rows=EVAL_BATCH,
                                  header=GroupHeader(run_id="heldout", sender="heldout", model_id="heldout"))
    backend.eos_ids, backend.pad_id = sorted(set(eos_ids)), int(pad_id)
    return greedy_pass_at_1(backend, tokenizer, task, items, max_new_tokens=max_new_tokens, batch_size=EVAL_BATCH)


@dataclass
class HeldoutResult:
    """Per item, in the order of `item_ids`: greedy right (0/1) and sampled right (0..samples)."""

    item_ids: list[str]
    greedy: list[int]
    rewards: list[list[float]]
    """Per item, the reward of each sampled completion (the order of its group's completions)."""
    samples: int
    temperature: float
    groups: list[Group] = field(default_factory=list, repr=False)
    """The sampled groups (one per item), kept for weighing them under another model; not saved."""

    @property
    def sampled(self) -> list[int]:
        """Per item, how many of its sampled completions are right."""
        return [int(sum(r)) for r in self.rewards]

    @property
    def greedy_accuracy(self) -> float:
        return sum(self.greedy) / len(self.greedy) if self.greedy else 0.0

    @property
    def sampled_accuracy(self) -> float:
        return sum(self.sampled) / (self.samples * len(self.sampled)) if self.sampled else 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: both accuracies, the per-item figures and the digest of the item set."""
        return {"greedy_accuracy": self.greedy_accuracy, "sampled_accuracy": self.sampled_accuracy,
                "items": len(self.item_ids), "samples": self.samples, "temperature": self.temperature,
                "item_ids": self.item_ids, "greedy": self.greedy, "sampled": self.sampled}


def greedy_correct(model: Any, tokenizer: Any, task: Task, items: Sequence[TaskItem], *,
                   max_new_tokens: int) -> list[int]:
    """1 where the greedy completion of the item is right, else 0: the experiment's held-out decoder and scorer."""
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    result = heldout_accuracy(model, tokenizer, task, items, max_new_tokens=max_new_tokens, pad_id=pad,
                              eos_ids=eos_token_ids(tokenizer, model.config, getattr(model, "generation_config", None)))
    return [int(v) for v in result["verdicts"]]


def sample_groups(model: Any, tokenizer: Any, task: Task, items: Sequence[TaskItem], *, samples: int,
                  temperature: float, max_new_tokens: int, seed: int, sender: str = "heldout") -> list[Group]:
    """One group of `samples` completions per item at `temperature`, with their `logp_gen`."""
    backend = TransformersBackend(model=model, tokenizer=tokenizer,
                                  header=GroupHeader(run_id="heldout", sender=sender, model_id=sender))
    prompts = [PromptRequest(task.name, it.item_id, task.render_prompt(tokenizer, it)) for it in items]
    sampling = SamplingConfig(temperature=temperature, max_new_tokens=max_new_tokens, group_size=max(samples, 2),
                              seed=seed)
    return backend.generate(prompts, samples, sampling)


def sampled_rewards(tokenizer: Any, task: Task, items: Sequence[TaskItem], groups: Sequence[Group]) -> list[list[float]]:
    """Per item, the reward of each completion of its group, scored by the task's verifier."""
    texts = [tokenizer.decode(c, skip_special_tokens=True) for g in groups for c in g.completion_ids]
    per_item = [it for it, g in zip(items, groups) for _ in range(g.G)]
    scores = task.score(per_item, texts)
    out, k = [], 0
    for g in groups:
        out.append([s.reward for s in scores[k : k + g.G]])
        k += g.G
    return out


def evaluate_heldout(model: Any, tokenizer: Any, task: Task, items: Sequence[TaskItem], *, samples: int = 16,
                     temperature: float = 1.0, max_new_tokens: int = 24, seed: int = 0,
                     sender: str = "heldout") -> HeldoutResult:
    """Greedy and sampled correctness of `model` on every item (eval mode; training mode restored)."""
    was_training = model.training
    model.eval()
    try:
        greedy = greedy_correct(model, tokenizer, task, items, max_new_tokens=max_new_tokens)
        groups = sample_groups(model, tokenizer, task, items, samples=samples, temperature=temperature,
                               max_new_tokens=max_new_tokens, seed=seed, sender=sender)
    finally:
        model.train(was_training)
    return HeldoutResult(item_ids=[it.item_id for it in items], greedy=greedy,
                         rewards=sampled_rewards(tokenizer, task, items, groups), samples=samples,
                         temperature=temperature, groups=groups)

