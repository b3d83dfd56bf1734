"""The limits the decoder enforces on every group that arrives (proto/group_v1.md): `WireConfig`, `T_MIN`."""

from __future__ import annotations

from pydantic import Field

from ftis_swarm.config.base import Strict

T_MIN = 0.05
"""Lowest sampling temperature a group may carry (proto/group_v1.md). A receiver divides its
logits by T; near zero (a peer sent T = 1e-300) they overflow and its log-probs are NaN.
0.05 is far from that and below any temperature RL samples at."""


class WireConfig(Strict):
    """Limits the decoder enforces on every group that arrives (proto/group_v1.md)."""

    max_group_size: int = Field(64, ge=2, le=4096)
    """Most completions per group (G)."""
    max_completion_tokens: int = Field(8192, ge=1)
    """Most tokens in one completion."""
    max_prompt_tokens: int = Field(8192, ge=1)
    """Most tokens in the prompt."""
    max_bytes: int = Field(1 << 20, ge=1024, le=4 << 20)
    """Most bytes in one encoded group (1 MiB by default; p2pd caps a message at 4 MiB)."""
