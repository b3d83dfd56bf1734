"""What a greedy evaluation reports: one summary for `ftis-node eval` and the experiment's held-out accuracy.

Both score their answers here, so the two can be compared item by item, not only on the
mean: `verdicts` has one character per item and `answers_digest` hashes the answer texts.
"""

from __future__ import annotations

import hashlib
from typing import Any, Sequence

from ftis_swarm.tasks.base import Task, TaskItem


def items_digest(items: Sequence[TaskItem]) -> str:
    """16 hex digits identifying an evaluation set (a hash of the item ids, in order)."""
    return hashlib.sha256("\n".join(it.item_id for it in items).encode()).hexdigest()[:16]


def evaluation_summary(task: Task, items: Sequence[TaskItem], answers: Sequence[str]) -> dict[str, Any]:
    """`{correct, items, digest, reasons, verdicts, answers_digest}` of the answer texts to `items`.

    `verdicts`: "1" for a correct item, "0" otherwise, in item order; `reasons`: how many
    items got each scoring reason; `answers_digest`: 16 hex digits over the texts, in order.
    """
    scores = task.score(list(items), list(answers))
    reasons: dict[str, int] = {}
    for s in scores:
        reasons[s.reason] = reasons.get(s.reason, 0) + 1
    return {
        "correct": sum(1 for s in scores if s.correct),
        "items": len(items),
        "digest": items_digest(items),
        "reasons": reasons,
        "verdicts": "".join("1" if s.correct else "0" for s in scores),
        "answers_digest": hashlib.sha256("\x00".join(answers).encode()).hexdigest()[:16],
    }
