"""The real learner against poisoned groups: NaN and infinite values, a NaN gradient, a forward
pass that raises, refused groups, a forger, and several epochs reading `logp_old`."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
from learner_samples import changed, params_snapshot, rebuilt, sample_group, shift_logp
from transformers import AutoModelForCausalLM

from ftis_swarm.config import FTISConfig, LearnerConfig
from ftis_swarm.core.ftis import ftis_loss
from ftis_swarm.learner.batch import ScoredGroup, build_batch
from ftis_swarm.learner.learner import Learner

PROMPT_A = [151644, 872, 198, 18, 10, 19, 28]
PROMPT_B = [151644, 872, 198, 22, 9, 15, 10, 16, 17, 28]


def two_learners(tiny_dir, **kw):
    cfg = LearnerConfig(**kw)
    return [Learner(AutoModelForCausalLM.from_pretrained(tiny_dir), cfg=cfg, pad_id=0) for _ in range(2)]


def same_weights(a, b) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.model.parameters(), b.model.parameters()))


def finite(learner) -> bool:
    return all(torch.isfinite(p).all() for p in learner.model.parameters())


def honest_items(model):
    own = sample_group(model, PROMPT_A, G=4, length=5, seed=1)
    peer = sample_group(model, PROMPT_B, G=4, length=5, seed=2, sender="peer-a")
    return [ScoredGroup.vertical(own, [1, 0, 0, 1], offpolicy=False, source=0, filterable=False),
            ScoredGroup.vertical(peer, [1, 0, 1, 0], offpolicy=True, source=1, filterable=True)]


def test_a_group_at_t_1e_300_leaves_weights_finite_and_as_if_its_advantages_were_zero(tiny_dir, tiny_model):
    poisoned = sample_group(tiny_model, PROMPT_B, G=4, length=4, seed=3, sender="peer-b")
    poisoned = rebuilt(poisoned, temperature=1e-300)
    items = honest_items(tiny_model) + [ScoredGroup.vertical(poisoned, [1, 0, 0, 0], offpolicy=True, source=2,
                                                             filterable=True)]
    a, b = two_learners(tiny_dir, lr=1e-2)
    batch = build_batch(items, pad_id=0, micro_batch=8)
    ref = copy.deepcopy(batch)
    ref.advantages[8:] = 0.0  # the poisoned group's samples
    m = a.update_batch(batch)
    b.update_batch(ref)
    assert torch.isnan(a.old_logprobs(batch)[8:][batch.mask[8:].bool()]).all()  # the attack is real
    assert finite(a) and a.policy_version == 1
    assert same_weights(a, b)
    assert m["frac_nonfinite"] == pytest.approx(4 / 12) and m["frac_nonfinite@2"] == 1.0
    assert m["used@2"] == 0.0 and m["used@1"] > 0
    assert a.peer_report["peer-b"]["nonfinite"] == 1
    assert all(math.isfinite(v) for v in m.values())


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_one_non_finite_log_prob_costs_only_its_sample(tiny_dir, tiny_model, value):
    items = honest_items(tiny_model)
    a, b = two_learners(tiny_dir, lr=1e-2, ftis=FTISConfig(mode="nois"))  # no filter: only the rule stops it
    batch = build_batch(items, pad_id=0, micro_batch=8)
    ref = copy.deepcopy(batch)
    row = 4  # the peer's first sample, A > 0
    assert batch.advantages[row] > 0
    batch.logp_gen[row, 2] = value
    ref.advantages[row] = 0.0
    m = a.update_batch(batch)
    b.update_batch(ref)
    assert finite(a) and same_weights(a, b)
    assert m["frac_nonfinite"] == pytest.approx(1 / 8)
    assert m["sequences_with_gradient"] == 7


def test_a_step_with_a_nan_gradient_is_skipped(tiny_dir, tiny_model):
    learner = Learner(tiny_model, cfg=LearnerConfig(lr=1e-2), pad_id=0)
    learner.update(honest_items(tiny_model))  # Adam now has state
    before = params_snapshot(tiny_model)
    state_before = copy.deepcopy(learner.optimizer.state_dict())
    param = next(p for p in tiny_model.parameters() if p.requires_grad)
    handle = param.register_hook(lambda grad: grad * math.nan)  # a fault in the backward pass
    m = learner.update(honest_items(tiny_model))
    handle.remove()
    assert m["updates_skipped_nonfinite"] == 1.0
    assert not changed(before, tiny_model) and learner.policy_version == 1
    assert learner.optimizer.state_dict()["state"][0]["step"] == state_before["state"][0]["step"]
    assert finite(learner)
    m = learner.update(honest_items(tiny_model))  # the next update steps again
    assert m["updates_skipped_nonfinite"] == 0.0 and learner.policy_version == 2


def test_a_forward_pass_that_raises_costs_only_its_group(tiny_dir, tiny_model):
    items = honest_items(tiny_model)
    bad = sample_group(tiny_model, PROMPT_A, G=2, length=3, seed=4, sender="peer-c")
    vocab = tiny_model.get_input_embeddings().num_embeddings
    bad = rebuilt(bad, completion_ids=[np.array([5, vocab + 7, 9])] * 2)
    items.append(ScoredGroup.vertical(bad, [1, 0], offpolicy=True, source=3, filterable=True))
    learner = Learner(tiny_model, cfg=LearnerConfig(lr=1e-2, micro_batch=16), pad_id=0)
    m = learner.update_batch(build_batch(items, pad_id=0, micro_batch=16))  # one micro-batch holds every row
    assert m["withheld_learn_error"] == 2.0 and m["sequences"] == 8.0
    assert learner.peer_report["peer-c"]["learn_error"] == 1
    assert learner.policy_version == 1 and finite(learner)
    # through `update`, admission refuses the same group before any forward pass
    learner2 = Learner(tiny_model, cfg=LearnerConfig(lr=1e-2), pad_id=0)
    m2 = learner2.update(items)
    assert m2["sequences"] == 8.0 and learner2.peer_report["peer-c"]["out_of_vocab"] == 1


def test_admission_refuses_other_tokenizers_and_temperatures(tiny_model):
    items = honest_items(tiny_model)
    other = sample_group(tiny_model, PROMPT_B, G=2, length=3, seed=5, sender="peer-d", tokenizer_fp="0" * 32)
    cold = rebuilt(other, tokenizer_fp="f" * 32, temperature=0.01)
    items += [ScoredGroup.vertical(g, [1, 0], offpolicy=True, source=4, filterable=True) for g in (other, cold)]
    learner = Learner(tiny_model, cfg=LearnerConfig(), pad_id=0, tokenizer_fp="f" * 32)
    m = learner.update(items)
    assert m["sequences"] == 8.0
    assert learner.peer_report["peer-d"] == {"tokenizer": 1, "temperature": 1}


def test_a_minus_3_forger_is_flagged_and_withheld_while_an_honest_peer_is_used(tiny_model):
    learner = Learner(tiny_model, cfg=LearnerConfig(lr=1e-3), pad_id=0)
    honest = sample_group(tiny_model, PROMPT_B, G=4, length=8, seed=6, sender="honest")
    forged = shift_logp(sample_group(tiny_model, PROMPT_A, G=4, length=8, seed=7, sender="forger"), -3.0)
    items = [ScoredGroup.vertical(honest, [1, 0, 0, 1], offpolicy=True, source=1, filterable=True),
             ScoredGroup.vertical(forged, [1, 0, 0, 1], offpolicy=True, source=2, filterable=True)]
    m = learner.update(items)
    assert m["withheld_forgery"] == 4.0 and "used@2" not in m  # none of its rows is in the batch
    assert m["used@1"] == 2.0 and m["sequences"] == 4.0
    assert learner.peer_report["forger"] == {"forgery": 1}
    assert learner.peer_report["honest"]["groups"] == 1
    assert learner.detector.stat("forger").flagged and not learner.detector.stat("honest").flagged
    assert m["forgery_mean@2"] == pytest.approx(2.0, abs=1e-3)  # every forged token at the cap C
    assert m["forgery_mean@1"] < 1.2


def test_several_epochs_read_the_weights_and_filter_from_logp_old(tiny_dir, tiny_model):
    """Three epochs against a hand-rolled loop whose loss gets logp_old fixed; if the learner
    re-decided weights or filter from the moving logp, the weights would differ."""
    near = shift_logp(sample_group(tiny_model, PROMPT_B, G=4, length=6, seed=8, sender="peer"), -0.4)
    items = [ScoredGroup.vertical(near, [1, 0, 0, 1], offpolicy=True, source=1, filterable=True)]
    cfg = LearnerConfig(lr=1e-3, epochs=3, ftis=FTISConfig(g=2.0), max_recent_excess_share=1.0)  # no aggregate cap
    learner = Learner(tiny_model, cfg=cfg, pad_id=0)
    learner.detector.observe("peer", 600.0, 600, overlap=600)  # standing: its weights e^0.4 are not capped at 1
    m = learner.update(items)
    assert m["loss_last_epoch"] != m["loss"]  # the policy did move between epochs
    assert m["frac_capped_unproven"] == 0.0

    ref_model = AutoModelForCausalLM.from_pretrained(tiny_dir).eval()
    ref = Learner(ref_model, cfg=cfg, pad_id=0)
    batch = build_batch(items, pad_id=0, micro_batch=8)
    logp_old = ref.old_logprobs(batch)
    opt = torch.optim.AdamW(ref_model.parameters(), lr=1e-3)
    losses = []
    for _ in range(3):
        opt.zero_grad()
        logp = torch.zeros_like(batch.logp_gen)
        for mb in batch.micro:
            logp = logp.index_put((mb.idx,), ref._logprobs(mb))
        loss, _ = ftis_loss(logp, logp_old, batch.logp_gen, batch.advantages, batch.mask, batch.offpolicy, cfg.ftis)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(ref_model.parameters()), 1.0)
        opt.step()
        losses.append(loss.item())
    for (n, a), (_, b) in zip(learner.model.named_parameters(), ref_model.named_parameters()):
        # AdamW turns float-rounding noise in near-zero gradients into steps of up to lr: the two
        # loops differ by 3e-5; weights re-decided from the moving logp differ by 1.4e-3
        torch.testing.assert_close(a, b, atol=2e-4, rtol=0, msg=n)
    assert m["loss_last_epoch"] == pytest.approx(losses[-1], rel=1e-4)  # re-decided: -0.913 against -0.763

