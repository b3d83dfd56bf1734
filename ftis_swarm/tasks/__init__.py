"""Tasks and rewards: problems with stable ids, prompts, and binary rewards recomputed locally.

The learner never trusts a reward from the wire (docs/method.md, Advantage): it looks the item up by the
id a peer sent (`task.item`) and scores the decoded completion itself (`task.score`).

    from ftis_swarm.tasks import get_task
    task = get_task("arith")
    items = task.sample(4, seed=0)                   # split="train" | "test"
    ids = task.render_prompt(tokenizer, items[0])    # chat template + generation prompt
    scores = task.score(items, completions)          # [Score(reward, correct, reason)]

Files (one file a task, each holding its source, prompt, answer extraction and reward):

- evaluation.py    `items_digest`, `evaluation_summary`: what a greedy evaluation reports (`ftis-node eval`
                   and the experiment's held-out accuracy), item by item
- registry.py      `get_task`, `list_tasks`, `task_class`, `has_train_split`, `check_trainable`, `wire_name`: names
                   (and `jsonl:PATH`, `rg:NAME`, the `ftis_swarm.tasks` entry points) to task classes, on demand
- base.py          `TaskItem`, `Score`, reasons, errors, and the `Task` base: prompts, batched scoring
- generated.py     tasks generated from (seed, index): the id scheme, content-disjoint splits
- dataset.py       tasks over fixed rows: local JSONL (FTIS_DATA_DIR) or the HF hub, ids, sampling
- answers.py       pulling the final answer out of a completion (`\\boxed{}`, `#### N`, last number)
- verifier.py      the worker-process pool with a hard timeout per answer (math-verify needs
                   `signal.alarm`, hence processes; a hung or dead worker is replaced)
- mathcheck.py     the check a worker runs: math-verify on one extracted answer
- arith.py         the embedded default: small sums; answer = the reply's last number
- arith_mix.py     arith's variant with +, - and *: every held-out question usable once (the experiment's task)
- gsm_symbolic.py  GSM-style problems from reasoning-gym templates, offline; `\\boxed{}`
- gsm8k.py         GSM8K (local JSONL or hub); `\\boxed{}` or `#### N`
- math500.py       MATH-500 (local JSONL or hub), evaluation only; `\\boxed{}`
- champ.py         CHAMP (offline package), out-of-distribution evaluation only; `\\boxed{}`
- jsonl.py         `jsonl:PATH`: an operator's dataset file, with a verifier of the project's or a `module:function`
- rg.py            `rg:NAME`: a reasoning-gym family, scored by its own `score_answer`

Imports below it: `ftis_swarm.config` and `ftis_swarm.errors` only (today just errors), and
neither torch nor transformers (`render_prompt` takes any tokenizer with `apply_chat_template`
or `encode`). docs/tasks.md documents each task's prompt, answer form, reward and id scheme, and the measured figures.
"""

from ftis_swarm.tasks.base import (
    REASONS,
    EvaluationTaskError,
    ItemOutOfRangeError,
    MalformedItemIdError,
    Score,
    Task,
    TaskItem,
    UnknownItemError,
    UnknownSplitError,
    UnknownTaskError,
    reason_counts,
)
from ftis_swarm.tasks.evaluation import evaluation_summary, items_digest
from ftis_swarm.tasks.registry import (
    ENTRY_POINT_GROUP,
    check_trainable,
    get_task,
    has_train_split,
    list_tasks,
    task_class,
    wire_name,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "REASONS",
    "EvaluationTaskError",
    "ItemOutOfRangeError",
    "MalformedItemIdError",
    "Score",
    "Task",
    "TaskItem",
    "UnknownItemError",
    "UnknownSplitError",
    "UnknownTaskError",
    "check_trainable",
    "evaluation_summary",
    "get_task",
    "has_train_split",
    "items_digest",
    "list_tasks",
    "reason_counts",
    "task_class",
    "wire_name",
]
