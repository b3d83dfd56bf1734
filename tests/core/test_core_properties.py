"""Property tests of the core: truncation bounds, and nois on-policy == plain GRPO."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ftis_swarm.config import FTISConfig
from ftis_swarm.core.ftis import ftis_loss, truncated_weights
from ftis_swarm.core.groups import group_advantages

floats = st.floats(min_value=-60, max_value=60, allow_nan=False, width=32)


@settings(max_examples=200, deadline=None)
@given(st.lists(floats, min_size=1, max_size=40), st.floats(0.5, 10), st.sampled_from(["tis", "ftis"]))
def test_truncated_weights_never_exceed_C(xs, C, mode):
    x = torch.tensor(xs).clamp(-20, 20)
    w = truncated_weights(x, FTISConfig(mode=mode, C=C))
    assert (w <= C + 1e-6).all() and (w > 0).all()


def plain_grpo_loss(logp, logp_old, adv, mask, eps=0.2):
    """GRPO as in tiny-grpo: the PPO-clipped surrogate, token mean per sequence, then batch mean."""
    ratio = (logp - logp_old).exp()
    surr = torch.minimum(ratio * adv[:, None], ratio.clamp(1 - eps, 1 + eps) * adv[:, None])
    return (-(surr * mask).sum(1) / mask.sum(1)).mean()


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 6), st.integers(1, 7), st.integers(0, 2**31 - 1), st.sampled_from(["nois", "ftis"]))
def test_on_policy_equals_plain_grpo(G, T, seed, mode):
    """With logp_gen == logp_old and own samples, nois is GRPO; ftis too (w = 1, nothing filtered)."""
    gen = torch.Generator().manual_seed(seed)
    rewards = torch.randint(0, 2, (G,), generator=gen).float()
    adv = group_advantages(rewards)
    logp_old = -torch.rand(G, T, generator=gen) * 3
    mask = (torch.rand(G, T, generator=gen) > 0.3).float()
    mask[:, 0] = 1.0
    drift = torch.randn(G, T, generator=gen) * 0.3
    a = (logp_old + drift).requires_grad_(True)
    b = (logp_old + drift).requires_grad_(True)
    loss, _ = ftis_loss(a, logp_old, logp_old, adv, mask, torch.zeros(G, dtype=torch.bool), FTISConfig(mode=mode))
    ref = plain_grpo_loss(b, logp_old, adv, mask)
    loss.backward()
    ref.backward()
    torch.testing.assert_close(loss, ref, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(a.grad, b.grad, atol=1e-6, rtol=1e-5)
