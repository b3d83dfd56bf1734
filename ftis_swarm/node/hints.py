"""The hint a round pointer carries, both ways: this node's own count of correct answers per group it
publishes, and a peer's signed count checked against this node's verifier.

A publisher has scored its own groups with the same task and verifier a reader uses, so it
can say, per group, how many of its G answers are correct (`records.PointedGroup.correct`,
signed with the pointer). A reader's selection spends its budget on the groups whose hint
says their rewards differ first (`records.GroupPointer.carries_signal`, `fetch.selection`):
a group whose answers are all right or all wrong has zero advantage and moves no weight in
any loss mode (docs/method.md, The hint).

A hint is a claim, checked once the reader scored the group itself (`contradicts`). An honest
verifier of the same task version differs from this node's only where an answer's check did
not settle on one side:

- this node's unsettled answers (`scoring.UNSETTLED`: timeout, verifier_error) score 0 here
  and may be correct there: the hint may count up to that many more;
- the publisher's unsettled answers score 0 there and may be correct here: the hint may count
  up to `UNDER_SLACK` fewer per group (this node cannot see them; a check that timed out there
  and settles here is rare, and the lie it allows, an all-correct group announced as mixed,
  buys one fetch of a group the per-peer caps bound).

A group of another task version or content never reaches the comparison: its item or digest is
refused before scoring (`unknown_item`, `task_digest`), as is a body whose sample count differs
from its pointer's (`pointer_mismatch`). Anything beyond is `hint_contradicted`, a signed fault
(peers/faults.py); a group without a hint (an older publisher) is checked for nothing.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any, Mapping, Optional, Sequence

from ftis_swarm.node.scoring import ScoredBatch, score_groups
from ftis_swarm.peers import faults
from ftis_swarm.wire import Group

log = logging.getLogger(__name__)

UNDER_SLACK = 1
"""Correct answers per group a hint may count fewer than this node's verifier: the publisher's own checks
that did not settle (module docstring)."""


def own_hints(learning: Any, groups: Sequence[Group]) -> list[Optional[int]]:
    """This node's count of correct answers for each of its own `groups` (None for one its scorer refuses),
    by the verifier it learns with (`learning.Learning`); the scores are kept for the round's update
    (`Learning.own_scores`), so no own group is verified twice."""
    scored = score_groups(groups, learning.tokenizer, learning.tasks, admission=learning.admission,
                          memo=learning.own_scores)
    counts = {g.group_id: int(c.sum()) for g, c in zip(scored.groups, scored.correct)}
    return [counts.get(g.group_id) for g in groups]


def contradicts(hint: int, *, correct: int, unsettled: int) -> bool:
    """Whether a signed `hint` (correct answers) is more than an honest verifier can differ from this node's
    `correct`, of which `unsettled` more answers scored 0 without a settled check (module docstring)."""
    return hint - correct > unsettled or correct - hint > UNDER_SLACK


def check_hints(scored: ScoredBatch, hints: Mapping[str, tuple[int, int]], *,
                me: str) -> tuple[Counter, Counter]:
    """`(faults, tally)` for the peers' groups this node scored whose publisher signed a hint.

    `faults`: (sender, `hint_contradicted`) -> groups, for the ledger; `tally`: the round record's
    `hints_checked` and `hints_contradicted`. Own groups (sender `me`) are not checked.
    """
    found: Counter = Counter()
    tally: Counter = Counter()  # the record's keys, not reasons
    for group, correct, unsettled in zip(scored.groups, scored.correct, scored.unsettled):
        hint = hints.get(group.group_id)
        if group.sender == me or hint is None:
            continue
        tally["hints_checked"] += 1
        if contradicts(hint[0], correct=int(correct.sum()), unsettled=unsettled):
            found[(group.sender, faults.HINT_CONTRADICTED)] += 1
            tally["hints_contradicted"] += 1
            log.warning("group %s from %s: its pointer hinted %d correct of %d, this node's verifier found %d "
                        "(%d unsettled)", group.group_id, group.sender, hint[0], hint[1], int(correct.sum()),
                        unsettled)
    return found, tally
