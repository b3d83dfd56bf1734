"""A round's own groups: which prompts a node draws, how it renders them, how it samples them.

One schedule for every caller (the daemon, the experiment, and generation ahead
(`max_staleness` >= 1), which generates round r + 1 while round r learns): round `r` of a node with seed `s`
draws `prompts_per_round` train items seeded by `(s, r)`, renders each with this node's
chat template, and samples one vertical group per prompt with the sampling seed `s`
unless the config sets one (the backend seeds its k-th generate call from it, so two
backends that made the same calls draw the same completions). A resumed node, and an
experiment learner built from the same `NodeConfig`, draw what the node would have drawn.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any, Sequence

from ftis_swarm.config import NodeConfig, SamplingConfig
from ftis_swarm.rollout import GroupHeader, PromptRequest
from ftis_swarm.rollout.base import RolloutInputError
from ftis_swarm.tasks import Task, TaskItem
from ftis_swarm.wire import Group

log = logging.getLogger(__name__)

PROMPT_SEED_STRIDE = 1_000_003
"""Round r of seed s draws its prompts with seed `s * PROMPT_SEED_STRIDE + r`."""


def round_items(task: Task, cfg: NodeConfig, r: int) -> list[TaskItem]:
    """The train items a node with `cfg` draws in round `r` (the same on every machine and after a resume)."""
    return task.sample(cfg.prompts_per_round, seed=cfg.seed * PROMPT_SEED_STRIDE + r, split="train")


def render_prompts(task: Task, tokenizer: Any, items: Sequence[TaskItem]) -> list[PromptRequest]:
    """Each item's prompt through this node's chat template, as token ids."""
    return [PromptRequest(task_id=it.task_id, item_id=it.item_id, prompt_ids=list(task.render_prompt(tokenizer, it)))
            for it in items]


def group_header(cfg: NodeConfig, sender: str, task_digest: str = "") -> GroupHeader:
    """What the backend stamps on this node's groups: run id, sender, model (and adapter rank), task digest, and
    whether they carry alignment data (`publish_alignment`)."""
    model_id = cfg.model + (f"+lora-r{cfg.learner.lora.rank}" if cfg.learner.lora else "")
    return GroupHeader(run_id=cfg.swarm.run_id, sender=sender, model_id=model_id[:256], task_digest=task_digest,
                       alignment=cfg.publish_alignment)


def node_sampling(cfg: NodeConfig) -> SamplingConfig:
    """`cfg.sampling`, seeded by the node's seed where it sets none."""
    if cfg.sampling.seed is not None:
        return cfg.sampling
    return cfg.sampling.model_copy(update={"seed": cfg.seed})


def generate_groups(backend: Any, prompts: Sequence[PromptRequest], G: int, sampling: SamplingConfig,
                    counts: Counter, *, r: int) -> list[Group]:
    """One group of `G` per prompt; a prompt the backend refuses is counted (`prompt_rejected`) and left out.

    All prompts go in one call; only when the backend refuses it are they tried one by one.
    """
    try:
        return backend.generate(list(prompts), G, sampling)
    except RolloutInputError as exc:
        log.warning("round %d: %s; generating the other prompts", r, exc)
    kept: list[Group] = []
    for prompt in prompts:
        try:
            kept.extend(backend.generate([prompt], G, sampling))
        except RolloutInputError:
            counts["prompt_rejected"] += 1
    return kept


def generate_own(backend: Any, task: Task, tokenizer: Any, cfg: NodeConfig, r: int, counts: Counter) -> list[Group]:
    """Round `r`'s own groups of a node with `cfg`, from the policy version `backend` serves."""
    prompts = render_prompts(task, tokenizer, round_items(task, cfg, r))
    return generate_groups(backend, prompts, cfg.sampling.group_size, node_sampling(cfg), counts, r=r)
