"""Rules for the known tricks (docs/method.md, "Known tricks"): tokens after the first EOS, completions
that hit the token cap, and publishers whose groups are cherry-picked by their own reward."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from learner_samples import sample_group
from transformers import AutoTokenizer

from ftis_swarm.config import LearnerConfig
from ftis_swarm.core.groups import group_advantages
from ftis_swarm.learner.batch import ScoredGroup, build_batch, truncated_advantages
from ftis_swarm.learner.learner import Learner
from ftis_swarm.models.tiny import qwen_tokenizer_dir
from ftis_swarm.node.scoring import Admission, TaskCache, ended, eos_tail, score_groups
from ftis_swarm.peers import faults
from ftis_swarm.peers.cherry import MIN_GROUPS, MixedShareCheck, mixed_probability
from ftis_swarm.tasks import get_task
from ftis_swarm.wire import Group

PROMPT = [151644, 872, 198, 22, 9, 15, 10, 16, 17, 28]
FP = "f" * 32


# --- completions that hit the token cap ------------------------------------------------------------

def test_a_capped_completion_gets_no_positive_advantage_and_keeps_its_place_in_the_group():
    rewards = torch.tensor([1.0, 0.0, 1.0, 0.0])
    ended_ = np.array([True, True, False, False])
    a = group_advantages(rewards)  # (4,) +-0.866
    assert truncated_advantages(a, ended_, "keep").tolist() == a.tolist()
    no_pos = truncated_advantages(a, ended_, "no_positive")
    assert no_pos.tolist() == [a[0].item(), a[1].item(), 0.0, a[3].item()]  # the capped wrong one still pushed down
    assert truncated_advantages(a, ended_, "mask").tolist() == [a[0].item(), a[1].item(), 0.0, 0.0]
    assert truncated_advantages(a, None, "mask").tolist() == a.tolist()  # no EOS facts: nothing changes


def test_the_learner_trains_no_capped_completion_upward(tiny_model):
    g = sample_group(tiny_model, PROMPT, G=4, length=6, seed=5, sender="self")
    item = ScoredGroup.vertical(g, [1, 0, 0, 1], offpolicy=False, source=0, filterable=False,
                                ended=[False, True, True, True])
    batch = build_batch([item], pad_id=0, micro_batch=8, truncated="no_positive")
    assert batch.advantages[0] == 0.0 and batch.advantages[3] > 0 and (batch.advantages[1:3] < 0).all()
    by_rule = {}
    for rule in ("no_positive", "keep"):
        learner = Learner(tiny_model, cfg=LearnerConfig(lr=1e-3, truncated_completions=rule), pad_id=0)
        by_rule[rule] = learner.update([item])["sequences_with_gradient"]
    assert by_rule == {"no_positive": 3.0, "keep": 4.0}


# --- tokens after the first EOS ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def tok():
    return AutoTokenizer.from_pretrained(str(qwen_tokenizer_dir()))


def arith_group(tok, completions: list[list[int]]) -> Group:
    item = get_task("arith").sample(1, seed=0)[0]  # What is 3 + 4?
    prompt = get_task("arith").render_prompt(tok, item)
    return Group.build(run_id="r", sender="peer", model_id="m", policy_version=0, created_at=0.0, tokenizer_fp=FP,
                       task_id=item.task_id, item_id=item.item_id, prompt_ids=prompt, temperature=0.7,
                       completion_ids=completions, logp_gen=[np.full(len(c), -1.0) for c in completions])


def test_tokens_after_the_first_eos_refuse_the_group_at_no_cost(tok):
    eos = tok.eos_token_id
    seven, eight = tok.encode("It is 7.", add_special_tokens=False), tok.encode("8", add_special_tokens=False)
    clean = arith_group(tok, [seven + [eos], eight])  # one ended, one capped
    tail = arith_group(tok, [eight + [eos] + seven, seven + [eos]])  # the verifier would read "7" after the EOS
    admit = Admission(tokenizer_fp=FP, accept_tasks=frozenset({"arith"}), eos_ids=frozenset({eos}))
    out = score_groups([clean, tail], tok, TaskCache(), admission=admit)
    assert out.groups == [clean] and out.rejected == {faults.EOS_TAIL: 1}
    assert out.rewards[0].tolist() == [1.0, 0.0]
    assert faults.cost_of(faults.EOS_TAIL) == 0.0
    assert eos_tail(tail, frozenset({eos})) and not eos_tail(clean, frozenset({eos}))
    assert ended(clean, frozenset({eos})).tolist() == [True, False]
    # without the EOS set (Admission's default) the tail is scored: the rule is the node's, not the verifier's
    loose = score_groups([tail], tok, TaskCache(), admission=Admission(tokenizer_fp=FP,
                                                                       accept_tasks=frozenset({"arith"})))
    assert loose.rewards[0].tolist() == [1.0, 1.0]


# --- cherry-picked groups --------------------------------------------------------------------------

def honest_groups(rng, n: int, G: int = 4) -> list[tuple[int, int]]:
    """n groups of items whose pass rates differ (uniform in [0, 1]): (samples, correct)."""
    return [(G, int(rng.binomial(G, rng.uniform()))) for _ in range(n)]


def cherry_groups(rng, n: int, p: float, G: int = 4) -> list[tuple[int, int]]:
    """Items re-sampled until the group is mixed, at a pass rate p."""
    out = []
    while len(out) < n:
        k = int(rng.binomial(G, p))
        if 0 < k < G:
            out.append((G, k))
    return out


def test_cherry_picked_groups_are_flagged_and_honest_ones_are_not():
    assert mixed_probability(0.5, 4) == pytest.approx(1 - 2 / 16) and mixed_probability(0.0, 4) == 0.0
    rng = np.random.default_rng(0)
    check = MixedShareCheck(window=128, z=4.0)
    for peer in range(200):
        for G, k in honest_groups(rng, 128):
            check.observe(f"honest-{peer}", G, k)
    for p in (0.1, 0.3, 0.5):
        for G, k in cherry_groups(rng, 128, p):
            check.observe(f"cherry-{p}", G, k)
    assert check.flagged_publishers() == ["cherry-0.1", "cherry-0.3", "cherry-0.5"]  # no honest one of 200
    for G, k in cherry_groups(rng, MIN_GROUPS - 1, 0.1):
        check.observe("new", G, k)
    assert not check.flagged("new")  # too few groups to judge


def test_the_cherry_check_remembers_a_bounded_number_of_publishers_and_resumes_from_its_state():
    rng = np.random.default_rng(1)
    check = MixedShareCheck(window=64, z=4.0, max_publishers=3)
    announced = [(f"p{i}", G, k) for i in range(5) for G, k in honest_groups(rng, 20)]
    announced += [("picker", G, k) for G, k in cherry_groups(rng, 64, 0.1)]
    assert check.note(announced) == ["picker"]
    assert list(check.state()) == ["p3", "p4", "picker"]  # the least recently heard forgotten first
    check.observe("p9", 4, 7)  # more correct than samples: a malformed hint is not kept
    assert "p9" not in check.state()
    resumed = MixedShareCheck(window=64, z=4.0, max_publishers=3)
    resumed.load_state(check.state())
    assert resumed.state() == check.state() and resumed.flagged("picker") and not resumed.flagged("p4")


def test_a_flagged_publisher_earns_no_credit_in_that_update_and_is_not_charged():
    from collections import Counter

    from ftis_swarm.peers.ledger import PeerLedger

    ledger = PeerLedger()
    ledger.withhold_credit(["picker"])
    ledger.settle_update({"picker": Counter(groups=2), "fair": Counter(groups=2)}, earned={"picker": 2.0, "fair": 2.0})
    assert ledger.score("picker") == 0.0 and ledger.score("fair") == 2.0
    assert ledger.tenure("picker") == 1 and ledger.allows("picker")  # no fault: tenure counts, no ban
    ledger.settle_update({"picker": Counter(groups=1)}, earned={"picker": 1.0})  # not flagged again: credit
    assert ledger.score("picker") == 1.0
