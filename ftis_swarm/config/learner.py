"""The learner and its loss: `LearnerConfig`, `FTISConfig`, `LoRAConfig`, and `LOSS_MODES` (what each loss mode
does; the config, the CLI help and the experiment read it from here)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Optional

from pydantic import Field, model_validator

from ftis_swarm.config.base import Strict

LossMode = Literal["nois", "vis", "tis", "filter", "fvis", "ftis"]
"""The loss modes of docs/method.md; what each does is in `LOSS_MODES`."""


@dataclass(frozen=True)
class ModeSpec:
    """What a loss mode does: its per-token importance weight, and whether it filters peers' samples."""

    weight: Literal["one", "exp", "truncated"]
    """`one`: 1; `exp`: exp(x); `truncated`: min(exp(x), C), with x = logp_old - logp_gen."""
    filters: bool
    summary: str


LOSS_MODES: dict[str, ModeSpec] = {
    "nois": ModeSpec("one", False, "weight 1, nothing filtered (plain GRPO on every sample)"),
    "vis": ModeSpec("exp", False, "weight exp(x), untruncated, nothing filtered"),
    "tis": ModeSpec("truncated", False, "weight min(exp(x), C), nothing filtered"),
    "filter": ModeSpec("one", True, "weight 1, harmful peer samples filtered"),
    "fvis": ModeSpec("exp", True, "weight exp(x), harmful peer samples filtered"),
    "ftis": ModeSpec("truncated", True, "weight min(exp(x), C), harmful peer samples filtered (the default)"),
}
"""Mode -> what it does (docs/method.md, Modes); the one place the list of modes is spelled out."""
assert tuple(LOSS_MODES) == LossMode.__args__  # type: ignore[attr-defined]


class FTISConfig(Strict):
    """The F-TIS loss (docs/method.md). The paper's baselines are modes, not test-only flags."""

    mode: LossMode = "ftis"
    """Importance weight and filter, see `LOSS_MODES`: nois/filter weight 1, vis/fvis exp(x),
    tis/ftis min(exp(x), C); filter/fvis/ftis also drop harmful peer samples."""
    C: float = Field(2.0, gt=0)
    """Truncation cap of the importance weight."""
    g: float = Field(50.0, gt=0)
    """KL threshold of the filter, on the per-sample summed-over-tokens scale."""
    eps: float = Field(0.2, gt=0, lt=1)
    """PPO clip range of the ratio exp(logp - logp_old)."""
    filter_rule: Literal["or", "and"] = "or"
    """`or`: filtered when A <= 0 or kl > g (the method as stated); `and`: A < 0 and kl > g."""
    filter_scope: Literal["offpolicy", "all"] = "offpolicy"
    """Whom the filter applies to: off-policy samples only (own pass), or every sample."""
    kl_estimator: Literal["rlogr", "k3"] = "rlogr"
    """Per-token KL term: rlogr = r*x - r + 1 (proxy for KL(pi_theta||pi_gen)), k3 = r - 1 - x."""

    @property
    def weighted(self) -> bool:
        """The weight is exp(x) or its truncation (not 1)."""
        return LOSS_MODES[self.mode].weight != "one"

    @property
    def truncates(self) -> bool:
        return LOSS_MODES[self.mode].weight == "truncated"

    @property
    def filters(self) -> bool:
        return LOSS_MODES[self.mode].filters


class LoRAConfig(Strict):
    rank: int = Field(8, ge=1, le=1024)
    alpha: float = Field(16.0, gt=0)
    dropout: float = Field(0.0, ge=0, lt=1)
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )


FULL_LR = 1e-6
"""The paper's learning rate for a full fine-tune."""
LORA_LR = 1e-5
"""The default when a LoRA adapter is trained and no `lr` is given: ten times the full
fine-tune's, the ratio at which LoRA matched full fine-tuning in RL ("LoRA Without Regret",
Thinking Machines, 2025)."""


class LearnerConfig(Strict):
    lr: float = Field(FULL_LR, gt=0, le=1)
    """AdamW learning rate; 1e-6 for a full fine-tune, 1e-5 when `lora` is set and no lr is given."""
    weight_decay: float = Field(0.0, ge=0)
    betas: tuple[float, float] = (0.9, 0.999)
    grad_clip: float = Field(1.0, gt=0)
    dtype: Literal["fp32", "bf16"] = "fp32"
    epochs: int = Field(1, ge=1, le=64)
    """PPO epochs (optimiser steps) per batch; logp_old is fixed at the start of the update."""
    micro_batch: int = Field(8, ge=1)
    """Sequences per forward/backward; the gradient accumulates over the batch."""
    logprob_chunk: int = Field(512, ge=1)
    """Positions per chunk of the output head (no [B, T, V] logits tensor for the whole batch)."""
    activation_checkpointing: bool = False
    """Recompute each decoder layer's activations in the backward pass instead of keeping them:
    about a third more compute, and activation memory falls to each layer's input plus one layer's."""
    lora: Optional[LoRAConfig] = None
    """Train a LoRA adapter instead of the full model."""
    max_peer_groups: int = Field(64, ge=0)
    """Most peers' groups in one update."""
    max_groups_per_peer: int = Field(16, ge=0)
    """Most groups one peer may contribute to one update (the swarm gathers no more per peer either)."""
    max_peer_tokens: Optional[int] = Field(None, ge=1)
    """Most peers' completion tokens in one update; None: 4 x this node's own per round
    (prompts_per_round x group_size x max_new_tokens). Groups over it wait one round, then are dropped."""
    max_peer_tokens_per_peer: Optional[int] = Field(None, ge=1)
    """Most completion tokens one peer may put into one update; None: 2 x this node's own per round."""
    strangers_share: float = Field(0.25, ge=0, le=1)
    """The part of the peers' token and group budget reserved for, and capped to, peers without
    standing (drawn origin first, then identity, seeded by the node's peer id and round: peers/draw.py);
    peers with standing share the rest. The swarm fetches strangers' groups within the same share."""
    max_prompt_overhead: int = Field(256, ge=0)
    """Most prompt tokens a peer's group may hold beyond its item's own prompt text (chat template,
    system prompt); longer prompts are refused."""
    forgery_delta: float = Field(1e-6, gt=0, lt=1)
    """False-alarm probability of one check of the forgery detector (Hoeffding bound, docs/method.md)."""
    forgery_window: int = Field(4096, ge=1)
    """Tokens of a peer's most recent groups the forgery detector averages over."""
    standing_margin: float = Field(0.25, gt=0)
    """m: a peer has standing once the detector's upper bound on its mean truncated weight is
    below 1 + m (a few hundred tokens at 0.25); until then its samples' weights are capped at 1
    (docs/node.md, "Standing")."""
    standing_overlap: float = Field(0.25, ge=0, le=1)
    """q: standing also needs at least this fraction of a peer's tokens, over the detector's window, with
    an uncapped ratio `pi_theta / pi_gen` in [1/C, C]; log-probs that claim more than the sampler had
    (`logp_gen = 0`) fail it. Set from the pairs docs/benchmarks.md measures ("Overlap of honest peers":
    honest windows 0.35 to 0.61, deflators' 0 to 0.19). 0 and `standing_overlap_block` 0: no such test."""
    standing_overlap_block: float = Field(0.15, ge=0, le=1)
    """The same fraction over a peer's newest block alone (its tokens in one update), so that a strike
    ends standing in the update it starts; lower than q, as one block is noisier (docs/method.md)."""
    recent_standing_updates: int = Field(50, ge=0)
    """A peer's standing is recent for this many updates after it began (0: never recent)."""
    max_recent_excess_share: float = Field(0.1, ge=0, le=1)
    """The most of an update's gradient weight that the weight above 1 of peers with recent standing
    may make up together; their `w - 1` is scaled down by one factor so that it holds (1: no cap)."""
    truncated_completions: Literal["no_positive", "mask", "keep"] = "no_positive"
    """A completion that ends without EOS (it hit the token cap): `no_positive` keeps its reward in the group's
    mean and std but zeroes a positive advantage (a cut-off tail never trains upward); `mask` zeroes its
    advantage whatever its sign (TRL's `mask_truncated_completions`); `keep` trains it as any other
    (docs/method.md, "Known tricks")."""
    cross_tokenizer: bool = True
    """Learn from peers with another tokenizer whose groups carry alignment data, weighted per character-aligned
    chunk (docs/method.md, "Peers with another tokenizer"); false: refuse them (`tokenizer`), as any group of
    another fingerprint without alignment data is."""
    ftis: FTISConfig = Field(default_factory=FTISConfig)

    @model_validator(mode="before")
    @classmethod
    def _lora_lr(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("lora") is not None and data.get("lr") is None:
            return {**data, "lr": LORA_LR}
        return data
