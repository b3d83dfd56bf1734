"""`score_groups`: what a learner accepts, rewards from its own verifier, and errors kept to one group.

Real arith and champ tasks, the real Qwen tokenizer; two faults are injected by subclassing
(an item lookup and a scoring call that raise), since no real task fails that way any more.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from learner_samples import rebuilt
from transformers import AutoTokenizer

from ftis_swarm.models.tiny import qwen_tokenizer_dir
from ftis_swarm.node.scoring import Admission, TaskCache, score_groups
from ftis_swarm.tasks import get_task
from ftis_swarm.tasks.arith import ArithTask
from ftis_swarm.wire import Group

FP = "f" * 32
ADMIT = Admission(tokenizer_fp=FP, accept_tasks=frozenset({"arith"}))


@pytest.fixture(scope="module")
def tok():
    return AutoTokenizer.from_pretrained(str(qwen_tokenizer_dir()))


@pytest.fixture(scope="module")
def arith():
    return get_task("arith")


def group(tok, item, replies, *, sender="peer", prompt_ids=None, task_id=None, item_id=None, fp=FP) -> Group:
    prompt = prompt_ids if prompt_ids is not None else get_task(item.task_id).render_prompt(tok, item)
    comps = [tok.encode(r, add_special_tokens=False) for r in replies]
    return Group.build(run_id="r", sender=sender, model_id="m", policy_version=0, created_at=0.0, tokenizer_fp=fp,
                       task_id=task_id or item.task_id, item_id=item_id or item.item_id, prompt_ids=prompt,
                       temperature=0.7, completion_ids=comps, logp_gen=[np.full(len(c), -1.0) for c in comps])


def test_rewards_come_from_this_nodes_verifier(tok, arith):
    item = arith.sample(1, seed=0)[0]  # What is 3 + 4?
    out = score_groups([group(tok, item, ["It is 7.", "8", "seven"])], tok, TaskCache(), admission=ADMIT)
    assert out.rejected == {} and out.rewards[0].tolist() == [1.0, 0.0, 0.0]
    assert out.correct[0].tolist() == [True, False, False]
    assert out.score_reasons == {"correct": 1, "wrong": 1, "no_answer": 1}


def test_each_refusal_has_its_reason_and_sender(tok, arith):
    train, other = arith.sample(2, seed=0)
    test_item = arith.sample(1, seed=0, split="test")[0]
    champ = get_task("champ").sample(1, seed=0, split="test")[0]
    prompt = arith.render_prompt(tok, train)
    half = dataclasses.replace(train, prompt=train.question)  # the question without the item's instruction
    assert train.question in train.prompt and half.prompt != train.prompt
    cases = {
        "tokenizer": group(tok, train, ["7", "8"], fp="0" * 32),
        "task_not_accepted": group(tok, train, ["7", "8"], task_id="gsm_symbolic"),
        "eval_task": group(tok, champ, ["7", "8"]),
        "unknown_task": group(tok, train, ["7", "8"], task_id="nope"),
        "unknown_item": group(tok, train, ["7", "8"], item_id=train.item_id.split(":")[0] + ":00000000"),
        "item_out_of_range": group(tok, train, ["7", "8"], item_id=f"arith/v1/s0/{10**7}"),
        "not_train_split": group(tok, test_item, ["7", "8"]),
        "prompt_mismatch": group(tok, train, ["7", "8"], prompt_ids=arith.render_prompt(tok, other)),
        "question_alone": group(tok, train, ["7", "8"], prompt_ids=arith.render_prompt(tok, half)),
        "prompt_too_long": group(tok, train, ["7", "8"], prompt_ids=prompt + [tok.encode(" x")[0]] * 257),
    }
    groups = [rebuilt(g, sender=name) for name, g in cases.items()]
    padded = group(tok, train, ["7", "8"], prompt_ids=prompt + [tok.encode(" x")[0]] * 200, sender="ok")
    out = score_groups(groups + [padded], tok, TaskCache(), admission=ADMIT)
    reason = {name: "prompt_mismatch" if name == "question_alone" else name for name in cases}
    assert out.rejected == {**{name: 1 for name in cases if name != "question_alone"}, "prompt_mismatch": 2}
    assert out.rejected_by_peer == {(name, reason[name]): 1 for name in cases}
    assert [g.sender for g in out.groups] == ["ok"]  # within the overhead of 256 tokens, prompt intact


def test_without_admission_limits_any_known_task_and_split_is_scored(tok, arith):
    test_item = arith.sample(1, seed=0, split="test")[0]
    out = score_groups([group(tok, test_item, ["1", "2"])], tok, TaskCache(),
                       admission=Admission(train_only=False, max_prompt_overhead=None))
    assert out.rejected == {} and len(out.groups) == 1


class FaultyArith(ArithTask):
    """arith whose lookup of seed 7 raises and whose scoring of the text 'boom' raises."""

    def item(self, item_id):
        if "/s7/" in item_id:
            raise IndexError("list index out of range")
        return super().item(item_id)

    def score(self, items, completions):
        if "boom" in completions:
            raise RuntimeError("verifier crashed")
        return super().score(items, completions)


class FaultyTokenizer:
    """The real tokenizer, except that decoding the id 151_800 raises."""

    def __init__(self, tok):
        self._tok = tok

    def __getattr__(self, name):
        return getattr(self._tok, name)

    def batch_decode(self, seqs, **kw):
        if any(151_800 in s for s in seqs):
            raise ValueError("cannot decode")
        return self._tok.batch_decode(seqs, **kw)


def test_an_error_in_one_group_rejects_that_group_only(tok, arith):
    tasks = TaskCache(factory=lambda name: FaultyArith())
    good, second = arith.sample(2, seed=0)
    seven = arith.sample(1, seed=7)[0]
    boom = group(tok, second, ["boom", "9"], sender="boom")
    undecodable = rebuilt(group(tok, good, ["7", "8"], sender="dec"), completion_ids=[[151_800], [22]],
                          logp_gen=[[-1.0], [-1.0]])
    groups = [group(tok, good, ["7", "8"], sender="a"), group(tok, seven, ["1", "2"], sender="lookup"), boom,
              undecodable, group(tok, good, ["6", "7"], sender="b")]
    out = score_groups(groups, FaultyTokenizer(tok), tasks, admission=ADMIT)
    assert out.rejected == {"item_error": 1, "score_error": 1, "decode_error": 1}
    assert set(out.rejected_by_peer) == {("lookup", "item_error"), ("boom", "score_error"), ("dec", "decode_error")}
    assert [g.sender for g in out.groups] == ["a", "b"]
    assert [r.tolist() for r in out.rewards] == [[1.0, 0.0], [0.0, 1.0]]

