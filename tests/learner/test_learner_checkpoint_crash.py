"""SIGKILL a process that writes checkpoints, at random moments: the last complete one always loads."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pytest
import torch
from transformers import AutoModelForCausalLM

from ftis_swarm.config import LearnerConfig
from ftis_swarm.learner.checkpoint import CheckpointManager
from ftis_swarm.learner.learner import Learner

pytestmark = pytest.mark.slow

WRITER = r"""
import sys, torch
from transformers import AutoModelForCausalLM
from ftis_swarm.config import LearnerConfig
from ftis_swarm.learner.checkpoint import CheckpointManager
from ftis_swarm.learner.learner import Learner
model = AutoModelForCausalLM.from_pretrained(sys.argv[1])
learner = Learner(model, cfg=LearnerConfig(), pad_id=0)
mgr = CheckpointManager(sys.argv[2])  # keeps one: the default
start = int(sys.argv[3])
print("ready", flush=True)
for r in range(start, start + 10_000):
    with torch.no_grad():
        model.model.norm.weight.fill_(float(r))  # the round is readable from the weights
    learner.policy_version = r
    mgr.save(round_idx=r, learner=learner, state={"consumed": [f"g{r}"]})
"""


def test_sigkill_at_any_moment_leaves_a_loadable_checkpoint(tmp_path, tiny_dir):
    rng = random.Random(0)
    root = tmp_path / "ckpt"
    start = 1
    kills = 0
    while kills < 4:
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(tiny_dir), str(root), str(start)],
                                stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.05, 1.5))  # lands anywhere in a save: weights, optimizer, rename, marker
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        mgr = CheckpointManager(root)  # a fresh start: cleans temporary directories
        latest = mgr.latest()
        if latest is None:
            continue
        kills += 1
        learner = Learner(AutoModelForCausalLM.from_pretrained(tiny_dir), cfg=LearnerConfig(), pad_id=0)
        state = mgr.load(latest, learner)
        r = state["round"]
        assert latest.name == f"ckpt-{r:08d}" and learner.policy_version == r
        assert state["consumed"] == [f"g{r}"]
        assert torch.all(learner.model.model.norm.weight == float(r))
        assert not list(root.glob(".tmp-*"))
        start = r + 1
