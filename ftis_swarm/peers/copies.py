"""What makes two peers' groups the same content, and how a copy is told from a coincidence.

A group's **content key** is a digest of its task id, item id and its completions' token ids
as a multiset (each completion's ids in order, the completions sorted): the samples a learner
would train. Log-probs, prompt ids, sender, policy version and times are left out, so a copy
re-signed by another identity, with its completions reordered, its prompt re-rendered or one
log-prob moved by one ulp, has the key of the original. The intake (`intake.py`) lets the first
group of a key it sees train and drops every later one: a copy never trains twice.

Honest peers can meet on one key by chance (a short item, a sharp policy; docs/method.md,
"Known tricks", has the measured rate). A copy carries the first's log-probs; a coincidence from another
policy carries its own. `logp_key` digests the log-probs rounded to `LOGP_QUANTUM`, so a copy
with ulp-moved log-probs (almost always) has the first's, and a coincidence between policies
that differ does not. Two honest nodes that run the same weights (a testnet's first round)
have equal log-probs too, so the telling is counted (`copied_group` against `same_content`),
never charged: neither costs its sender anything (docs/method.md, "Known tricks").
"""

from __future__ import annotations

import hashlib

import numpy as np

from ftis_swarm.wire import Group

LOGP_QUANTUM = 1e-3
"""Log-probs are compared after rounding to this (nats): far above an ulp, far below two policies' gaps."""


def content_key(group: Group) -> str:
    """Hex digest (32 digits) of the task, the item and the completions' token ids as a sorted multiset."""
    h = hashlib.sha256(f"{group.task_id}\n{group.item_id}\n".encode())
    for ids in sorted(np.asarray(c, dtype="<u4").tobytes() for c in group.completion_ids):
        h.update(len(ids).to_bytes(4, "little"))
        h.update(ids)
    return h.hexdigest()[:32]


def logp_key(group: Group) -> str:
    """Hex digest (16 digits) of the log-probs rounded to `LOGP_QUANTUM`, in the completions' sorted order."""
    pairs = sorted(zip((np.asarray(c, dtype="<u4").tobytes() for c in group.completion_ids), group.logp_gen),
                   key=lambda p: p[0])
    h = hashlib.sha256()
    for _, lp in pairs:
        q = np.round(np.asarray(lp, dtype=np.float64) / LOGP_QUANTUM)  # (T,)
        h.update(np.nan_to_num(q, nan=0.0, posinf=1e18, neginf=-1e18).astype("<i8").tobytes())
    return h.hexdigest()[:16]
