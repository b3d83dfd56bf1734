"""A node over several processes (torchrun): rank 0 is the node, the other ranks are learner shards.

Only rank 0 joins the swarm, holds the node's one identity, generates, gathers, scores and
checkpoints: it is the `Node` of `daemon.py`, built with `ranks`. Every other rank builds the
same model and `ShardedLearner` (`components.build_learner`) and then only follows rank 0's
learner calls (an update with the round's batch, a weight save for the rollout copy, a
checkpoint's save or load) until rank 0 stops it. Followers ignore SIGINT and SIGTERM: a stop
is rank 0's to decide, and its last checkpoint needs every rank.

Checkpoints hold full tensors keyed by name (`learner/state.py`), so the same command
resumes with any process count, one included.
"""

from __future__ import annotations

import logging
import os
import signal

from ftis_swarm.config import NodeConfig
from ftis_swarm.learner.distributed import Ranks, init_ranks
from ftis_swarm.node.components import build_learner

log = logging.getLogger(__name__)


def launched_with_ranks() -> bool:
    """True in a process torchrun started as one of several (WORLD_SIZE > 1)."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def join_ranks() -> Ranks:
    """This process's place among torchrun's (NCCL on CUDA, gloo on CPU)."""
    return init_ranks()


def run_follower(cfg: NodeConfig, ranks: Ranks) -> None:
    """On ranks > 0: the learner shard, following rank 0 until it stops."""
    import torch
    import torch.distributed as dist

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, _: log.info("rank %d ignores signal %d: rank 0 decides", ranks.rank, signum))
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    _, _, learner = build_learner(cfg, device=str(ranks.device), ranks=ranks)
    log.info("rank %d of %d: following rank 0", ranks.rank, ranks.world)
    try:
        learner.follow()
    finally:
        dist.destroy_process_group()
    log.info("rank %d: released by rank 0", ranks.rank)
