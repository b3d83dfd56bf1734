"""Group-relative advantages (GRPO), computed over the whole group.

Filtered samples still count here: the filter zeroes a sample's advantage after the group's
mean and std are taken (docs/method.md, Advantage).
"""

from __future__ import annotations

import torch

STD_EPS = 1e-4


def group_advantages(rewards: torch.Tensor) -> torch.Tensor:
    """`A_i = (r_i - mean(r)) / (std(r) + 1e-4)` along the last axis; 0 where all rewards are equal.

    `rewards`: `[..., G]` with `G >= 2`; returns the same shape, float32 or the input's float dtype.
    """
    if rewards.shape[-1] < 2:
        raise ValueError(f"a group needs at least 2 completions, got G={rewards.shape[-1]}")
    r = rewards if rewards.is_floating_point() else rewards.float()  # (..., G)
    mean = r.mean(dim=-1, keepdim=True)  # (..., 1)
    std = r.std(dim=-1, keepdim=True, unbiased=True)  # (..., 1)
    adv = (r - mean) / (std + STD_EPS)  # (..., G)
    all_equal = (r == r[..., :1]).all(dim=-1, keepdim=True)  # (..., 1)
    return torch.where(all_equal, torch.zeros_like(adv), adv)  # (..., G)
