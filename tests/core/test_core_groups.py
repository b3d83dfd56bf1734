"""Group advantages, and that filtered samples still count in the group statistics."""

from __future__ import annotations

import pytest
import torch

from ftis_swarm.config import FTISConfig
from ftis_swarm.core.ftis import ftis_loss
from ftis_swarm.core.groups import group_advantages


def test_hand_values_with_bessel_std():
    adv = group_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0]))
    std = (4 * 0.25 / 3) ** 0.5  # unbiased: sum of squares 1.0 over n-1 = 3
    expected = torch.tensor([0.5, -0.5, -0.5, 0.5]) / (std + 1e-4)
    torch.testing.assert_close(adv, expected)


def test_equal_rewards_give_zero_and_batched_shape():
    r = torch.tensor([[1.0, 1.0, 1.0], [0.0, 0.5, 1.0]])
    adv = group_advantages(r)
    assert adv.shape == (2, 3)
    assert torch.equal(adv[0], torch.zeros(3))
    assert adv[1].tolist() == pytest.approx([-0.5 / (0.5 + 1e-4), 0.0, 0.5 / (0.5 + 1e-4)], rel=1e-5)


def test_integer_rewards_and_single_completion():
    assert group_advantages(torch.tensor([0, 1])).dtype == torch.float32
    with pytest.raises(ValueError, match="at least 2"):
        group_advantages(torch.tensor([1.0]))


def test_filtered_samples_stay_in_group_statistics():
    """The filter zeroes A after the group's mean and std: the kept samples keep their full-group A."""
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0])
    adv = group_advantages(rewards)  # [1.5, -0.5, -0.5, -0.5] / (std + 1e-4)
    logp = torch.full((4, 1), -1.0)
    off = torch.ones(4, dtype=torch.bool)
    loss, m = ftis_loss(logp.clone(), logp, logp, adv, torch.ones(4, 1), off, FTISConfig(mode="filter"))
    assert m["frac_filtered"] == 0.75  # the three A <= 0 samples
    # Recomputing A over the kept sample alone would give 0 (and a loss of 0); the method keeps 1.5/std.
    std = rewards.std(unbiased=True).item()
    assert loss.item() == pytest.approx(-(0.75 / (std + 1e-4)) / 4, rel=1e-5)
    assert loss.item() != 0.0
