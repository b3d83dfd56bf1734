"""What a peer's values can and cannot do to the loss: non-finite log-probs, the `filterable`
mask, zero-advantage counting, and the weight and filter reading `logp_old`, never `logp`."""

from __future__ import annotations

import math

import pytest
import torch

from ftis_swarm.config import FTISConfig
from ftis_swarm.core.ftis import ftis_loss, sample_terms

MODES = ["nois", "vis", "tis", "filter", "fvis", "ftis"]


def batch():
    """Four samples of three tokens; s3 has one padding position. R = 1 (logp == logp_old)."""
    logp_old = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -0.7, -1.1], [-1.5, -0.2, -0.9], [-0.4, -0.6, 0.0]])
    x = torch.tensor([[0.1, -0.2, 0.05], [0.0, 0.3, -0.1], [0.2, 0.0, 0.1], [-0.05, 0.1, 0.0]])
    mask = torch.tensor([[1.0, 1, 1], [1, 1, 1], [1, 1, 1], [1, 1, 0]])
    adv = torch.tensor([1.0, -0.5, 0.7, -1.2])
    off = torch.tensor([True, True, True, False])
    return logp_old, logp_old - x, mask, adv, off


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("poison", ["nan_gen", "inf_gen", "neg_inf_old", "nan_old"])
def test_a_non_finite_sample_is_filtered_and_poisons_nothing(mode, poison):
    logp_old, logp_gen, mask, adv, off = batch()
    cfg = FTISConfig(mode=mode)
    # reference: the same batch with s0's advantage zeroed
    ref_logp = logp_old.clone().requires_grad_(True)
    adv0 = adv.clone()
    adv0[0] = 0.0
    ref_loss, _ = ftis_loss(ref_logp, logp_old, logp_gen, adv0, mask, off, cfg)
    ref_loss.backward()

    bad_old, bad_gen = logp_old.clone(), logp_gen.clone()
    value = {"nan_gen": math.nan, "inf_gen": math.inf, "neg_inf_old": -math.inf, "nan_old": math.nan}[poison]
    (bad_gen if poison.endswith("gen") else bad_old)[0, 1] = value
    logp = bad_old.clone().requires_grad_(True)  # the moving log-probs are poisoned too
    loss, m = ftis_loss(logp, bad_old, bad_gen, adv, mask, off, cfg)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(logp.grad).all()
    assert loss.item() == pytest.approx(ref_loss.item(), abs=1e-7)
    torch.testing.assert_close(logp.grad, ref_logp.grad)
    assert logp.grad[0].abs().sum() == 0
    assert m["frac_nonfinite"] == pytest.approx(1 / 4)
    assert m["frac_filtered"] >= 1 / 4  # s0 had A = 1: the non-finite rule zeroed it
    assert all(math.isfinite(v) for v in m.values())


def test_non_finite_values_on_padding_do_not_count():
    logp_old, logp_gen, mask, adv, off = batch()
    logp_gen[3, 2] = math.nan  # s3's padding position
    logp_old[3, 2] = -math.inf
    loss, m = ftis_loss(logp_old.clone().nan_to_num(), logp_old, logp_gen, adv, mask, off, FTISConfig())
    assert m["frac_nonfinite"] == 0.0 and torch.isfinite(loss)


def test_stale_own_samples_are_weighted_but_not_filtered():
    logp_old, logp_gen, mask, adv, off = batch()
    # s1 is a stale own sample: off-policy (so weighted), not filterable; A < 0 would filter a peer's
    stale = torch.tensor([True, True, True, False])
    filterable = torch.tensor([True, False, True, False])
    t_peer = sample_terms(logp_old, logp_gen, adv, mask, stale, FTISConfig())
    t_own = sample_terms(logp_old, logp_gen, adv, mask, filterable, FTISConfig())
    assert t_peer.filtered.tolist() == [False, True, False, False]
    assert t_own.filtered.tolist() == [False, False, False, False]
    torch.testing.assert_close(t_own.w[1], torch.exp(torch.tensor([0.0, 0.3, -0.1])).clamp(max=2.0))
    _, m = ftis_loss(logp_old, logp_old, logp_gen, adv, mask, stale, FTISConfig(), filterable=filterable)
    assert m["frac_filtered"] == 0.0
    assert m["kl_mean"] > 0  # s1 still counts as off-policy in the KL metrics


def test_zero_advantage_samples_are_not_counted_as_filtered():
    logp_old, logp_gen, mask, _, off = batch()
    adv = torch.tensor([0.0, 0.0, 0.7, -1.2])  # s0, s1 off-policy without signal; s3 own, A < 0
    _, m = ftis_loss(logp_old, logp_old, logp_gen, adv, mask, off, FTISConfig())
    assert m["frac_filtered"] == 0.0  # the "or" rule zeroes s0 and s1, but their A was 0 already
    assert m["frac_zero_adv"] == pytest.approx(2 / 4)
    assert m["frac_nonpositive_adv"] == pytest.approx(3 / 4)


def test_weight_and_filter_read_logp_old_not_logp():
    """Under later PPO epochs `logp` has moved; the weights and the filter must not move with it."""
    logp_old, logp_gen, mask, adv, off = batch()
    cfg = FTISConfig(g=1.0)
    drift = torch.tensor([[1.5, 1.5, 1.5], [0.0, 0.0, 0.0], [0.05, 0.05, 0.05], [0.0, 0.0, 0.0]])
    # read from logp, s0's x would be ~1.5 a token (w truncated to C, kl ~3 > g: filtered); from logp_old it is not
    logp = (logp_old + drift).requires_grad_(True)
    loss, m = ftis_loss(logp, logp_old, logp_gen, adv, mask, off, cfg)
    loss.backward()
    terms = sample_terms(logp_old, logp_gen, adv, mask, off, cfg)
    assert not terms.filtered[0]
    x = logp_old - logp_gen
    w = x.exp().clamp(max=2.0) * mask  # (N, T) from logp_old
    ratio = drift.exp()
    kept = torch.tensor([1.0, 0.0, 0.7, -1.2])  # s1: off-policy, A < 0 -> filtered by the "or" rule
    # d/dlogp of -min(R A, clip(R) A): -R A where R is not clipped against A's sign, else 0
    clipped = ((kept > 0)[:, None] & (ratio > 1.2)) | ((kept < 0)[:, None] & (ratio < 0.8))
    expected = torch.where(clipped, 0.0, -ratio * kept[:, None]) * w / mask.sum(1, keepdim=True) / 4
    torch.testing.assert_close(logp.grad, expected, atol=1e-6, rtol=1e-5)
    assert logp.grad[0].abs().sum() == 0  # s0's ratio e^1.5 is clipped, A > 0
    assert logp.grad[2].abs().sum() > 0
    assert m["frac_filtered"] == pytest.approx(1 / 4)
