"""The learner's F-TIS update on groups sampled from a real tiny Qwen2 model."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from learner_samples import changed, params_snapshot, sample_group, shift_logp

from ftis_swarm.config import FTISConfig, LearnerConfig, LoRAConfig
from ftis_swarm.core.logprobs import token_logprobs
from ftis_swarm.learner.batch import MixedGroupError, ScoredGroup, build_batch
from ftis_swarm.learner.learner import Learner, apply_lora

PROMPT_A = [151644, 872, 198, 18, 10, 19, 28]
PROMPT_B = [151644, 872, 198, 22, 9, 15, 10, 16, 17, 28]


def learner_for(model, **kw):
    return Learner(apply_lora(model, LearnerConfig(**kw)), cfg=LearnerConfig(**kw), pad_id=0)


def test_logp_old_matches_a_direct_forward_per_sequence(tiny_model):
    g1 = sample_group(tiny_model, PROMPT_A, G=3, length=5, temperature=0.7, seed=1)
    g2 = sample_group(tiny_model, PROMPT_B, G=2, length=8, temperature=1.0, seed=2)
    learner = learner_for(tiny_model, micro_batch=2)
    items = [ScoredGroup.vertical(g1, [1, 0, 0], offpolicy=False, source=0),
             ScoredGroup.vertical(g2, [0, 1], offpolicy=True, source=1)]
    batch = build_batch(items, pad_id=0, micro_batch=2)
    assert {mb.temperature for mb in batch.micro} == {0.7, 1.0}
    old = learner.old_logprobs(batch)
    row = 0
    for g in (g1, g2):
        for comp, lp_gen in zip(g.completion_ids, g.logp_gen):
            ids = torch.tensor([g.prompt_ids.tolist() + comp.tolist()])
            ref = token_logprobs(tiny_model, ids, temperature=g.temperature)[0, len(g.prompt_ids) - 1:]
            torch.testing.assert_close(old[row, : len(comp)], ref, atol=1e-5, rtol=0)
            # sampled from this very model: the generator's log-probs agree too
            torch.testing.assert_close(old[row, : len(comp)], torch.from_numpy(lp_gen), atol=1e-5, rtol=0)
            assert old[row, len(comp):].abs().sum() == 0
            row += 1


def test_update_changes_parameters_and_reports_metrics(tiny_model):
    g = sample_group(tiny_model, PROMPT_A, G=4, length=6, seed=3)
    learner = learner_for(tiny_model, lr=1e-3)
    before = params_snapshot(tiny_model)
    m = learner.update([ScoredGroup.vertical(g, [1, 0, 0, 1], offpolicy=False, source=0)])
    assert learner.policy_version == 1
    assert changed(before, tiny_model)
    assert m["sequences"] == 4 and m["tokens"] == 24 and m["reward_mean"] == 0.5
    # Own on-policy data: w = 1, nothing filtered; loss = -mean(A) = 0 at R = 1.
    assert m["mean_weight"] == pytest.approx(1.0, abs=1e-4)
    assert m["frac_filtered"] == 0.0 and m["offpolicy_used"] == 0.0
    assert m["loss"] == pytest.approx(0.0, abs=1e-6)
    assert m["grad_norm"] > 0


def test_filtered_peer_samples_do_not_move_the_model(tiny_model):
    g = sample_group(tiny_model, PROMPT_A, G=4, length=6, seed=4, sender="peer")
    far = shift_logp(g, -30.0)  # the peer's policy is far from ours: KL >> g on every sample
    learner = learner_for(tiny_model, lr=1e-2)
    before = params_snapshot(tiny_model)
    m = learner.update([ScoredGroup.vertical(far, [1, 0, 0, 1], offpolicy=True, source=1)])
    assert m["frac_filtered"] == 1.0 and m["frac_kl_over_g"] == 1.0 and m["offpolicy_used"] == 0.0
    assert not changed(before, tiny_model)
    # Under nois the same data is used and the model moves.
    learner2 = Learner(tiny_model, cfg=LearnerConfig(lr=1e-2, ftis=FTISConfig(mode="nois")), pad_id=0)
    m2 = learner2.update([ScoredGroup.vertical(far, [1, 0, 0, 1], offpolicy=True, source=1)])
    assert m2["frac_filtered"] == 0.0 and changed(before, tiny_model)


def test_close_peer_samples_with_positive_advantage_are_used(tiny_model):
    g = sample_group(tiny_model, PROMPT_B, G=4, length=6, seed=5, sender="peer")
    near = shift_logp(g, -0.05)  # a slightly different generator: small KL, w = e^0.05
    learner = learner_for(tiny_model, lr=1e-3)
    before = params_snapshot(tiny_model)
    learner.detector.observe("peer", 600.0, 600, overlap=600)  # 600 honest tokens at mean 1: standing (bound 1.21)
    m = learner.update([ScoredGroup.vertical(near, [1, 0, 0, 0], offpolicy=True, source=7)])
    assert m["offpolicy_used"] == 1.0  # only the A > 0 sample passes the "or" filter
    assert m["frac_filtered@7"] == 0.75
    assert m["mean_weight"] == pytest.approx(np.exp(0.05), rel=1e-3)
    assert m["frac_capped_unproven"] == 0.0 and m["peers_with_standing"] == 1.0
    assert changed(before, tiny_model)
    assert learner.peer_earned == {"peer": 0.25}  # one sample of four carried signal past the filter


def test_credit_is_in_proportion_to_the_weight_a_kept_sample_carried(tiny_model):
    """docs/method.md, "Credit": log-probs that claim more probability than the sampler had lower every
    weight, and the credit with it; a weight above 1 earns no more than 1."""
    g = sample_group(tiny_model, PROMPT_B, G=4, length=6, seed=5, sender="peer")
    earned = {}
    for delta in (-0.05, 0.3, 1.0):  # w = e^0.05 (over 1: capped at 1 for credit), about e^-0.3, about e^-1
        learner = learner_for(tiny_model, lr=1e-12)
        m = learner.update([ScoredGroup.vertical(shift_logp(g, delta), [1, 0, 0, 0], offpolicy=True, source=7)])
        assert m["offpolicy_used"] == 1.0  # the first sample, the only one with A > 0
        earned[delta] = learner.peer_earned["peer"]
    lp = np.asarray(g.logp_gen[0], dtype=np.float64)  # the learner's own log-probs of the sample (same model)
    expected = {d: float(np.mean(np.minimum(np.exp(lp - np.minimum(lp + d, 0.0)), 1.0))) / 4 for d in earned}
    assert earned[-0.05] == pytest.approx(0.25)  # weight over 1: one sample's full worth, no more
    assert earned == pytest.approx(expected, rel=1e-3)
    assert earned[1.0] < 0.12 < earned[0.3] < earned[-0.05]


def test_a_peer_without_standing_is_trained_at_weight_one(tiny_model):
    g = sample_group(tiny_model, PROMPT_B, G=4, length=6, seed=5, sender="peer")
    near = shift_logp(g, -0.05)  # w = e^0.05 > 1 on every token: all capped at 1
    learner = learner_for(tiny_model, lr=1e-3)
    m = learner.update([ScoredGroup.vertical(near, [1, 0, 0, 0], offpolicy=True, source=7)])
    assert m["mean_weight"] == pytest.approx(1.0, abs=1e-6) and m["max_weight_used@7"] == pytest.approx(1.0)
    assert m["frac_capped_unproven"] == 1.0 and m["frac_capped_unproven@7"] == 1.0
    assert m["peers_without_standing"] == 1.0 and m["peers_with_standing"] == 0.0
    assert learner.detector.tokens("peer") == 24  # the detector still saw the uncapped values
    assert learner.detector.stat("peer").mean == pytest.approx(np.exp(0.05), rel=1e-3)


def test_mixed_generators_are_rejected(tiny_model):
    g = sample_group(tiny_model, PROMPT_A, G=2, length=3, seed=6)
    mixed = ScoredGroup(group=g, rewards=np.array([1.0, 0.0]), offpolicy=np.array([False, True]),
                        source=np.array([0, 1]), generators=("a@1", "b@3"))
    with pytest.raises(MixedGroupError, match="mixes generators"):
        learner_for(tiny_model).update([mixed])
    assert learner_for(tiny_model).update([mixed], allow_mixed=True)["sequences"] == 2


def test_lora_trains_only_the_adapter(tiny_model):
    cfg = LearnerConfig(lr=1e-2, lora=LoRAConfig(rank=4, alpha=8, target_modules=["q_proj", "v_proj"]))
    learner = Learner(apply_lora(tiny_model, cfg), cfg=cfg, pad_id=0)
    g = sample_group(learner.model, PROMPT_A, G=4, length=5, seed=7)
    before = params_snapshot(learner.model)
    learner.update([ScoredGroup.vertical(g, [1, 0, 1, 0], offpolicy=False, source=0)])
    moved = changed(before, learner.model)
    assert moved and all("lora_" in n for n in moved)
    assert any("lora_B" in n for n in moved)


def test_several_epochs_keep_logp_old_fixed(tiny_model):
    g = sample_group(tiny_model, PROMPT_A, G=4, length=6, seed=8)
    learner = learner_for(tiny_model, lr=5e-3, epochs=3)
    m = learner.update([ScoredGroup.vertical(g, [1, 0, 0, 1], offpolicy=False, source=0)])
    assert m["loss"] == pytest.approx(0.0, abs=1e-6)
    assert m["loss_last_epoch"] < -1e-4  # later epochs see R != 1 against the fixed logp_old
    assert learner.policy_version == 1


def test_rows_without_advantage_skip_the_gradient_pass_but_not_the_mean(tiny_model, tiny_dir):
    """Zero-advantage rows add nothing, yet N still counts them: the step equals the full-batch step."""
    from transformers import AutoModelForCausalLM

    g_signal = sample_group(tiny_model, PROMPT_A, G=4, length=5, seed=9)
    g_flat = sample_group(tiny_model, PROMPT_B, G=4, length=5, seed=10)  # all rewards equal: A = 0
    items = [ScoredGroup.vertical(g_signal, [1, 0, 0, 1], offpolicy=False, source=0),
             ScoredGroup.vertical(g_flat, [1, 1, 1, 1], offpolicy=False, source=0)]
    cfg = LearnerConfig(lr=1e-3, ftis=FTISConfig(mode="nois"))
    learner = Learner(tiny_model, cfg=cfg, pad_id=0)
    m = learner.update(items)
    assert m["sequences"] == 8 and m["sequences_with_gradient"] == 4

    # Reference: the full batch through the loss by hand, one plain AdamW step.
    ref_model = AutoModelForCausalLM.from_pretrained(tiny_dir).eval()
    opt = torch.optim.AdamW(ref_model.parameters(), lr=1e-3)
    batch = build_batch(items, pad_id=0, micro_batch=8)
    ref = Learner(ref_model, cfg=cfg, pad_id=0)
    logp = torch.zeros_like(batch.logp_gen)
    for mb in batch.micro:
        logp = logp.index_put((mb.idx,), ref._logprobs(mb))
    from ftis_swarm.core.ftis import ftis_loss
    loss, _ = ftis_loss(logp, logp.detach(), batch.logp_gen, batch.advantages, batch.mask, batch.offpolicy, cfg.ftis)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(list(ref_model.parameters()), 1.0)
    opt.step()
    for (n, a), (_, b) in zip(learner.model.named_parameters(), ref_model.named_parameters()):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5, msg=n)


def test_a_batch_with_nothing_to_learn_takes_no_step(tiny_model):
    learner = learner_for(tiny_model, lr=1e-2)
    g = sample_group(tiny_model, PROMPT_A, G=4, length=5, seed=11)
    learner.update([ScoredGroup.vertical(g, [1, 0, 0, 1], offpolicy=False, source=0)])  # Adam now has momentum
    before = params_snapshot(tiny_model)
    m = learner.update([ScoredGroup.vertical(g, [0, 0, 0, 0], offpolicy=False, source=0)])
    assert m["sequences_with_gradient"] == 0 and m["loss"] == 0.0
    assert learner.policy_version == 1
    assert not changed(before, tiny_model)
