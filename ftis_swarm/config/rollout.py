"""How rollouts are sampled: `SamplingConfig`."""

from __future__ import annotations

from typing import Optional

from pydantic import Field

from ftis_swarm.config.base import Strict
from ftis_swarm.config.wire import T_MIN


class SamplingConfig(Strict):
    """How rollouts are sampled. Top-p and top-k stay off: the sampled distribution is softmax(z/T)."""

    temperature: float = Field(1.0, ge=T_MIN, le=10)
    """Peers refuse groups sampled below `T_MIN` = 0.05."""
    max_new_tokens: int = Field(64, ge=1, le=32768)
    """Most tokens per completion. Left unset, `ftis-node join` takes the task's own default
    (64 for arith, 512 for GSM8K, 1024 for MATH-500: docs/tasks.md)."""
    group_size: int = Field(8, ge=2, le=4096)
    """G, the completions per prompt in a vertical group."""
    seed: Optional[int] = None
    """Seed of generation (with the backend's count of calls, so no two calls repeat); a node
    leaves it unset and samples with its own `seed`, which makes a resumed node's samples
    those of an uninterrupted run."""
