"""One rank of a sharded learner under torchrun, for the equivalence tests.

    torchrun --nproc-per-node 2 tests/learner/dist_worker.py CASES.pt OUT.pt

CASES.pt holds a list of cases `{"name", "model_dir", "cfg" (LearnerConfig JSON), "items"}`
with optional `save_dir` (save_weights there), `ckpt_save` (a CheckpointManager root to save
round 1 into) and `ckpt_load` (a root whose latest checkpoint is loaded instead of updating).
For each case every rank builds the same model (`learner_samples.build_learner_model`) and a
`ShardedLearner` on it; rank 0 makes the calls a node makes (the others `follow()`); then
every rank gathers the full gradient, and rank 0 writes per case the update's metrics (or the
loaded optimiser state), the full fp32 gradient by name and the dtypes it saw, to OUT.pt.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "helpers"))

from learner_samples import build_learner_model  # noqa: E402

from ftis_swarm.config import LearnerConfig  # noqa: E402
from ftis_swarm.learner.checkpoint import CheckpointManager  # noqa: E402
from ftis_swarm.learner.distributed import ShardedLearner, init_ranks  # noqa: E402


def main(cases_path: str, out_path: str) -> None:
    ranks = init_ranks()
    out = {}
    for case in torch.load(cases_path, weights_only=False):
        cfg = LearnerConfig.model_validate_json(case["cfg"])
        learner = ShardedLearner(build_learner_model(case["model_dir"], cfg), cfg=cfg, pad_id=0, ranks=ranks)
        result: dict = {}
        if ranks.leader:  # the calls a node's rank 0 makes; the other ranks follow them
            if case.get("ckpt_load"):
                manager = CheckpointManager(Path(case["ckpt_load"]))
                manager.load(manager.latest(), learner)
                result["optimizer_state"] = learner.optimizer_state()
            else:
                result["metrics"] = learner.update(case["items"])
            if case.get("save_dir"):
                learner.save_weights(Path(case["save_dir"]))
            if case.get("ckpt_save"):
                CheckpointManager(Path(case["ckpt_save"])).save(round_idx=1, learner=learner, state={})
            learner.stop()
        else:
            learner.follow()
        result["grads"] = {n.removeprefix("model."): p.grad.full_tensor() for n, p in learner.root.named_parameters()
                           if p.grad is not None}
        if ranks.leader:
            out[case["name"]] = {
                **result,
                "trainable_dtypes": sorted({str(p.dtype) for p in learner.params}),
                "frozen_dtypes": sorted({str(p.dtype) for p in learner.root.parameters() if not p.requires_grad}),
                "local_shard_numel": sum(p.to_local().numel() for p in learner.root.parameters()),
                "full_numel": sum(p.numel() for p in learner.root.parameters()),
            }
    if ranks.leader:
        torch.save(out, out_path)
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:3])
