"""The F-TIS loss against hand-worked values for every mode and both filter rules."""

from __future__ import annotations

import math

import pytest
import torch

from ftis_swarm.config import FTISConfig
from ftis_swarm.core.ftis import METRIC_KEYS, ftis_loss, sample_kl

LN3, LN05, LN15 = math.log(3.0), math.log(0.5), math.log(1.5)


def hand_batch():
    """Three samples, two tokens each; logp == logp_old (one step), so R = 1.

    s0 off-policy, x = [ln 3, ln 0.5], A = +1
    s1 off-policy, x = [0, (padding)],  A = -1
    s2 own,        x = [ln 1.5, 0],    A = +0.5
    """
    logp_old = torch.tensor([[-1.0, -2.0], [-0.5, -0.7], [-1.5, -0.2]])
    x = torch.tensor([[LN3, LN05], [0.0, 0.0], [LN15, 0.0]])
    logp_gen = logp_old - x
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
    adv = torch.tensor([1.0, -1.0, 0.5])
    off = torch.tensor([True, True, False])
    return logp_old, logp_gen, mask, adv, off


# Hand-worked per-sequence token means of w (s0, s1, s2):
W_ONE = (1.0, 1.0, 1.0)
W_VIS = ((3.0 + 0.5) / 2, 1.0, (1.5 + 1.0) / 2)
W_TIS = ((2.0 + 0.5) / 2, 1.0, (1.5 + 1.0) / 2)
KL_S0_RLOGR = (3 * LN3 - 3 + 1) + (0.5 * LN05 - 0.5 + 1)
KL_S0_K3 = (3 - 1 - LN3) + (0.5 - 1 - LN05)


def expected_loss(wbar, adv_kept):
    return sum(-a * w for a, w in zip(adv_kept, wbar)) / 3


@pytest.mark.parametrize(
    "mode, wbar, kept",
    [
        ("nois", W_ONE, (1.0, -1.0, 0.5)),
        ("vis", W_VIS, (1.0, -1.0, 0.5)),
        ("tis", W_TIS, (1.0, -1.0, 0.5)),
        # "or" rule, g = 50: s1 (off-policy, A <= 0) is filtered; s2 is own and passes.
        ("filter", W_ONE, (1.0, 0.0, 0.5)),
        ("fvis", W_VIS, (1.0, 0.0, 0.5)),
        ("ftis", W_TIS, (1.0, 0.0, 0.5)),
    ],
)
def test_loss_value_and_gradient_per_mode(mode, wbar, kept):
    logp_old, logp_gen, mask, adv, off = hand_batch()
    logp = logp_old.clone().requires_grad_(True)
    loss, metrics = ftis_loss(logp, logp_old, logp_gen, adv, mask, off, FTISConfig(mode=mode))
    assert loss.item() == pytest.approx(expected_loss(wbar, kept), abs=1e-6)
    loss.backward()
    # R = 1 is inside the clip range: d pg / d logp = -A~ and each token weighs m*w/(N*|a_i|).
    x = logp_old - logp_gen
    w = {"nois": torch.ones_like(x), "filter": torch.ones_like(x), "vis": x.exp(), "fvis": x.exp()}.get(
        mode, x.exp().clamp(max=2.0)
    )
    expected_grad = -torch.tensor(kept)[:, None] * mask * w / mask.sum(1, keepdim=True) / 3
    torch.testing.assert_close(logp.grad, expected_grad, atol=1e-6, rtol=1e-6)
    assert metrics["frac_filtered"] == pytest.approx(0.0 if mode in ("nois", "vis", "tis") else 1 / 3)


def test_kl_filter_or_rule_drops_positive_advantage_with_large_kl():
    logp_old, logp_gen, mask, adv, off = hand_batch()
    cfg = FTISConfig(mode="ftis", g=1.0)  # s0's KL is 1.449 > 1
    loss, metrics = ftis_loss(logp_old.clone(), logp_old, logp_gen, adv, mask, off, cfg)
    assert loss.item() == pytest.approx(expected_loss(W_TIS, (0.0, 0.0, 0.5)), abs=1e-6)
    assert metrics["frac_filtered"] == pytest.approx(2 / 3)
    assert metrics["frac_kl_over_g"] == pytest.approx(1 / 2)


def test_kl_filter_and_rule_needs_both_conditions():
    logp_old, logp_gen, mask, adv, off = hand_batch()
    # s0: A > 0 and kl > g -> kept; s1: A < 0 but kl = 0 -> kept.
    cfg = FTISConfig(mode="ftis", g=1.0, filter_rule="and")
    loss, metrics = ftis_loss(logp_old.clone(), logp_old, logp_gen, adv, mask, off, cfg)
    assert loss.item() == pytest.approx(expected_loss(W_TIS, (1.0, -1.0, 0.5)), abs=1e-6)
    assert metrics["frac_filtered"] == 0.0
    # Make s1 far off-policy: now A < 0 and kl > g, so it is filtered.
    logp_gen2 = logp_gen.clone()
    logp_gen2[1, 0] = logp_old[1, 0] - 3.0  # x = 3: kl = 3e^3 - e^3 + 1 = 41.2
    loss2, metrics2 = ftis_loss(logp_old.clone(), logp_old, logp_gen2, adv, mask, off, cfg)
    assert metrics2["frac_filtered"] == pytest.approx(1 / 3)
    assert loss2.item() == pytest.approx(expected_loss((1.25, 2.0, 1.25), (1.0, 0.0, 0.5)), abs=1e-6)


def test_filter_scope_all_also_filters_own_samples():
    logp_old, logp_gen, mask, adv, off = hand_batch()
    adv = torch.tensor([1.0, -1.0, -0.5])  # s2 (own) now has A <= 0
    _, m_off = ftis_loss(logp_old.clone(), logp_old, logp_gen, adv, mask, off, FTISConfig())
    _, m_all = ftis_loss(logp_old.clone(), logp_old, logp_gen, adv, mask, off, FTISConfig(filter_scope="all"))
    assert m_off["frac_filtered"] == pytest.approx(1 / 3)
    assert m_all["frac_filtered"] == pytest.approx(2 / 3)


def test_sample_kl_estimators_hand_values():
    logp_old, logp_gen, mask, _, _ = hand_batch()
    kl = sample_kl(logp_old, logp_gen, mask, "rlogr")
    k3 = sample_kl(logp_old, logp_gen, mask, "k3")
    assert kl[0].item() == pytest.approx(KL_S0_RLOGR, abs=1e-5)
    assert k3[0].item() == pytest.approx(KL_S0_K3, abs=1e-5)
    assert kl[1].item() == 0.0 and k3[1].item() == 0.0
    # s2: only the first token differs (x = ln 1.5)
    assert kl[2].item() == pytest.approx(1.5 * LN15 - 0.5, abs=1e-5)
    with pytest.raises(ValueError, match="estimator"):
        sample_kl(logp_old, logp_gen, mask, "k2")


def test_sample_kl_clamps_rounding_negatives_to_zero():
    # fp32 values whose k3 term r - 1 - x rounds below zero (found by search; exact in fp64 it is >= 0)
    logp = torch.tensor([[-0.3960914611816406, -0.06697726249694824]])
    logp_gen = torch.tensor([[-0.39609184861183167, -0.06697732210159302]])
    x = logp - logp_gen
    raw = torch.exp(x) - 1.0 - x  # (1, 2) the unclamped terms
    assert (raw < 0).all()  # the inputs do exercise the clamp
    assert sample_kl(logp, logp_gen, torch.ones(1, 2), "k3").item() == 0.0
    # rlogr's term r*x - r + 1 did not round below zero for any x searched on CPU; the clamp
    # still holds it at >= 0 and leaves positive terms alone
    big = sample_kl(torch.tensor([[-1.0]]), torch.tensor([[-1.5]]), torch.ones(1, 1), "rlogr")
    assert big.item() == pytest.approx(math.exp(0.5) * 0.5 - math.exp(0.5) + 1, rel=1e-6)


def test_metrics_hand_values():
    logp_old, logp_gen, mask, adv, off = hand_batch()
    _, m = ftis_loss(logp_old.clone(), logp_old, logp_gen, adv, mask, off, FTISConfig(),
                     source=torch.tensor([7, 9, 0]))
    w_tokens = [2.0, 0.5, 1.0, 1.5, 1.0]  # masked tokens' truncated weights
    assert set(METRIC_KEYS) <= set(m)
    assert m["frac_nonpositive_adv"] == pytest.approx(1 / 3)
    assert m["frac_truncated"] == pytest.approx(1 / 5)  # only exp(ln 3) > C
    assert m["mean_weight"] == pytest.approx(sum(w_tokens) / 5)
    assert m["ess"] == pytest.approx(sum(w_tokens) ** 2 / (5 * sum(w * w for w in w_tokens)))
    assert m["kl_mean"] == pytest.approx(KL_S0_RLOGR / 2, abs=1e-5)  # off-policy: s0 and s1 (kl 0)
    assert m["kl_p95"] == pytest.approx(0.95 * KL_S0_RLOGR, abs=1e-5)  # linear interpolation of [0, kl0]
    # per source: source 7 is s0 alone, source 0 is the own sample
    assert m["mean_weight@7"] == pytest.approx(1.25)
    assert m["frac_filtered@9"] == 1.0
    assert m["kl_mean@0"] == 0.0 and m["frac_kl_over_g@0"] == 0.0
    assert m["frac_truncated@7"] == pytest.approx(0.5)
    assert all(isinstance(v, float) for v in m.values())


def test_non_truncating_modes_report_zero_truncation():
    logp_old, logp_gen, mask, adv, off = hand_batch()
    _, m = ftis_loss(logp_old.clone(), logp_old, logp_gen, adv, mask, off, FTISConfig(mode="vis"))
    assert m["frac_truncated"] == 0.0
    assert m["mean_weight"] == pytest.approx((3 + 0.5 + 1 + 1.5 + 1) / 5)


def test_ppo_clip_stops_gradient_only_where_it_should():
    logp_old = torch.tensor([[-1.0], [-1.0]])
    logp = (logp_old + 0.5).requires_grad_(True)  # R = e^0.5 = 1.65 > 1 + eps
    adv = torch.tensor([1.0, -1.0])
    loss, _ = ftis_loss(logp, logp_old, logp_old, adv, torch.ones(2, 1), torch.tensor([False, False]),
                        FTISConfig(mode="nois"))
    loss.backward()
    assert logp.grad[0, 0].item() == 0.0  # A > 0, ratio above 1 + eps: clipped
    assert logp.grad[1, 0].item() == pytest.approx(math.exp(0.5) / 2, rel=1e-5)  # A < 0: unclipped R*A
    assert loss.item() == pytest.approx((-1.2 + math.exp(0.5)) / 2, rel=1e-5)


def test_gradient_flows_through_logp_only():
    logp_old, logp_gen, mask, adv, off = hand_batch()
    logp = logp_old.clone().requires_grad_(True)
    leaves = [t.clone().requires_grad_(True) for t in (logp_old, logp_gen, adv)]
    loss, _ = ftis_loss(logp, leaves[0], leaves[1], leaves[2], mask, off, FTISConfig(mode="vis"))
    loss.backward()
    assert logp.grad is not None and logp.grad.abs().sum() > 0
    assert all(t.grad is None for t in leaves)


@pytest.mark.parametrize("mode", ["nois", "vis", "tis", "filter", "fvis", "ftis"])
@pytest.mark.parametrize("sign", [50.0, -50.0])
def test_extreme_log_ratios_stay_finite(mode, sign):
    logp_old = torch.full((2, 3), -1.0)
    logp_gen = logp_old - sign  # x = +-50, clamped to +-20
    logp = (logp_old + sign / 50).requires_grad_(True)
    loss, m = ftis_loss(logp, logp_old, logp_gen, torch.tensor([1.0, -1.0]), torch.ones(2, 3),
                        torch.tensor([True, True]), FTISConfig(mode=mode))
    loss.backward()
    assert math.isfinite(loss.item())
    assert torch.isfinite(logp.grad).all()
    assert all(math.isfinite(v) for v in m.values())
    if sign > 0:
        assert m["kl_mean"] > 50  # clamped x = 20 still reads as far off-policy


@pytest.mark.parametrize("mode, capped_w", [("ftis", (1.0, 0.5)), ("vis", (1.0, 0.5)), ("nois", (1.0, 1.0))])
def test_unproven_samples_are_capped_at_weight_one_in_every_mode(mode, capped_w):
    """s0 (x = [ln 3, ln 0.5]) unproven: its weights become min(weight(x), 1); the others keep theirs."""
    logp_old, logp_gen, mask, adv, off = hand_batch()
    logp = logp_old.clone().requires_grad_(True)
    unproven = torch.tensor([True, False, False])
    loss, m = ftis_loss(logp, logp_old, logp_gen, adv, mask, off, FTISConfig(mode=mode), unproven=unproven,
                        source=torch.tensor([7, 9, 0]))
    free, _ = ftis_loss(logp_old.clone(), logp_old, logp_gen, adv, mask, off, FTISConfig(mode=mode))
    wbar = {"ftis": W_TIS, "vis": W_VIS, "nois": W_ONE}[mode]
    kept = (1.0, -1.0 if mode in ("vis", "nois") else 0.0, 0.5)
    assert loss.item() == pytest.approx(expected_loss((sum(capped_w) / 2, *wbar[1:]), kept), abs=1e-6)
    lowered = 0 if mode == "nois" else 1  # exp(ln 3) was 2 (ftis) or 3 (vis): lowered to 1; 0.5 stays
    assert m["frac_capped_unproven"] == pytest.approx(lowered / 5)
    assert m["frac_capped_unproven@7"] == pytest.approx(lowered / 2) and m["frac_capped_unproven@0"] == 0.0
    assert (loss.item() != pytest.approx(free.item())) == bool(lowered)
