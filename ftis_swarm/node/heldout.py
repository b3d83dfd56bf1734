"""Held-out accuracy: the product's one greedy evaluator, and a node's curve of it.

`greedy_pass_at_1(backend, tokenizer, task, items, ...)` renders each item with the
tokenizer's chat template, decodes greedily through the backend (`rollout.greedy_texts`
over `RolloutBackend.greedy`: the argmax of the raw logits, no generation_config penalties;
vLLM's greedy sampling where the node has vLLM) and scores the answers with the task's
verifier (`tasks.evaluation_summary`: per-item verdicts and digests). `ftis-node eval`
(ops/evaluate.py), the experiment (lab/experiment/heldout.py) and the node all call it, so
on the same weights and items they give the same answers, item by item
(tests/node/test_node_eval_agreement.py). `heldout_items` is the fixed set: items of a
task's test split drawn by a seed of their own.

`HeldoutEval` is a node's curve: at round 0 (before any update), every `eval_every` rounds
and at the last round, greedy pass@1 of the weights the node serves on `eval_items` test
items of its task (the same items for every node of the task: `eval_seed`, not the node's
seed) and of each of `eval_tasks`. It changes nothing in training: greedy decoding draws
no random number, the torch RNG streams are forked around it all the same, the sampler
restores the model's train/eval mode, and no generate call is counted (a call's sampling
seed follows that count). Its results are the round's record keys (`heldout_acc`,
`heldout_acc_<task>`, `heldout_items`, `time_eval`) and, as the curve so far, part of the
checkpoint (`state.json`: `heldout`), so a resumed node neither redoes an evaluation nor
loses the curve.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Optional, Sequence

import torch

from ftis_swarm.config import NodeConfig
from ftis_swarm.rollout import RolloutBackend, TransformersBackend, greedy_texts
from ftis_swarm.tasks import Task, TaskItem, evaluation_summary, get_task

log = logging.getLogger(__name__)

EVAL_BATCH = 64
"""Prompts a greedy call: on CPU a decode step of a small model costs about the same at 8 rows as at
64 (it is bound by reading the weights)."""
GENERATED_EVAL_ITEMS = 200
"""Items of a generated task's held-out set (no fixed test split) when no number is given."""
MAX_CURVE_POINTS = 10_000
"""Evaluations a node keeps in its curve (status page, checkpoint): the earliest one and the latest."""


def heldout_items(task: Task, n: Optional[int], seed: int, *, split: str = "test") -> list[TaskItem]:
    """`n` items of `task`'s `split` drawn with `seed`: all of a split with fewer; None: the whole split
    (`GENERATED_EVAL_ITEMS` of a generated task)."""
    size = task.size(split)
    if n is None:
        n = size or GENERATED_EVAL_ITEMS
    elif size:
        n = min(n, size)
    return task.sample(n, seed=seed, split=split)


def greedy_pass_at_1(backend: RolloutBackend, tokenizer: Any, task: Task, items: Sequence[TaskItem], *,
                     max_new_tokens: int, batch_size: int = EVAL_BATCH,
                     on_batch: Optional[Callable[[int, int], None]] = None) -> dict[str, Any]:
    """Greedy pass@1 of the policy `backend` serves on `items`:
    `{accuracy, correct, items, digest, reasons, verdicts, answers_digest}` (`tasks.evaluation_summary`).

    `batch_size` prompts a call to the backend (vLLM batches by itself: give it all of them).
    """
    prompts = [list(task.render_prompt(tokenizer, it)) for it in items]
    texts = greedy_texts(backend, tokenizer, prompts, max_new_tokens=max_new_tokens, batch_size=batch_size,
                         on_batch=on_batch)
    result = evaluation_summary(task, items, texts)
    return {"accuracy": result["correct"] / len(items) if items else 0.0, **result}


def acc_key(task: str, own: str) -> str:
    """The record key of `task`'s held-out accuracy on a node of task `own`."""
    return "heldout_acc" if task == own else f"heldout_acc_{task}"


class HeldoutEval:
    """A node's held-out curve: `due(r)`, `run(r)` -> the round record's keys, `curve`, `state()`."""

    def __init__(self, cfg: NodeConfig, *, backend: RolloutBackend, tokenizer: Any) -> None:
        self.every, self.last = cfg.eval_every, cfg.rounds
        self.own = cfg.task
        self.tasks = list(dict.fromkeys([cfg.task, *cfg.eval_tasks]))
        self.n, self.seed = cfg.eval_items, cfg.eval_seed
        self.max_new_tokens = cfg.eval_max_new_tokens or cfg.sampling.max_new_tokens
        self.backend, self.tokenizer = backend, tokenizer
        self.batch_size = EVAL_BATCH if isinstance(backend, TransformersBackend) else 1 << 20  # vLLM: one call
        self._sets: dict[str, tuple[Task, list[TaskItem]]] = {}
        self.curve: list[dict[str, Any]] = []
        """Per evaluation, oldest first: `{"round": r, "heldout_acc": x, "heldout_acc_<task>": y, ...}`."""
        self.results: dict[str, dict[str, Any]] = {}
        """The latest evaluation's summary per task (`greedy_pass_at_1`: verdicts, digests); not checkpointed."""

    def due(self, r: int) -> bool:
        """Whether round `r` (0: before any update) is evaluated and has not been yet."""
        if self.every <= 0 or any(point["round"] == r for point in self.curve):
            return False
        return r == 0 or r % self.every == 0 or r == self.last

    def items(self, name: str) -> tuple[Task, list[TaskItem]]:
        """Task `name` and its held-out items, drawn at the first evaluation."""
        if name not in self._sets:
            task = get_task(name)
            self._sets[name] = task, heldout_items(task, self.n, self.seed)
        return self._sets[name]

    def run(self, r: int) -> dict[str, Any]:
        """Evaluates the served weights after round `r` on every held-out set; the record's keys."""
        t0 = time.perf_counter()
        out: dict[str, Any] = {}
        devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
        with torch.random.fork_rng(devices=devices):  # training's RNG streams stay where they were
            for name in self.tasks:
                task, items = self.items(name)
                result = greedy_pass_at_1(self.backend, self.tokenizer, task, items,
                                          max_new_tokens=self.max_new_tokens, batch_size=self.batch_size)
                self.results[name] = result
                out[acc_key(name, self.own)] = result["accuracy"]
                if name == self.own:
                    out["heldout_items"] = result["items"]
        self.curve.append({"round": r, **out})
        if len(self.curve) > MAX_CURVE_POINTS:
            del self.curve[1]
        out["time_eval"] = time.perf_counter() - t0
        log.info("held-out accuracy after round %d: %s (%.1f s)", r,
                 ", ".join(f"{name} {out[acc_key(name, self.own)]:.3f}" for name in self.tasks), out["time_eval"])
        return out

    def state(self) -> dict[str, Any]:
        """For the checkpoint's `state.json`: the curve so far."""
        return {"curve": [dict(point) for point in self.curve]}

    def load_state(self, state: dict[str, Any]) -> None:
        self.curve = [dict(point) for point in state.get("curve", [])]
