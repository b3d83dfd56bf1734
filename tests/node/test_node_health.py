"""A node whose updates keep failing stops publishing and says so: log, metrics, exit status (node/health.py)."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch

from ftis_swarm.config import load_node_config
from ftis_swarm.metrics import read_jsonl
from ftis_swarm.node.health import EXIT_UNHEALTHY, UpdateHealth, update_failure


def test_what_counts_as_a_failed_update():
    fine = {"loss": 0.1, "grad_norm": 0.5, "updates_skipped_nonfinite": 0.0, "frac_nonfinite@0": 0.0}
    assert update_failure(fine, own_groups=2, own_learn_errors=0) == ""
    no_signal = {"loss": 0.0, "grad_norm": 0.0, "sequences_with_gradient": 0.0, "frac_nonfinite@0": 0.0}
    assert update_failure(no_signal, own_groups=2, own_learn_errors=0) == ""  # GRPO takes no step either
    assert update_failure({}, own_groups=2, own_learn_errors=0, error=RuntimeError("x")) == "raised"
    assert update_failure({**fine, "updates_skipped_nonfinite": 1.0}, own_groups=2, own_learn_errors=0) == "nonfinite_step"
    assert update_failure({**fine, "grad_norm": math.inf}, own_groups=2, own_learn_errors=0) == "nonfinite_loss"
    assert update_failure({**fine, "frac_nonfinite@0": 0.25}, own_groups=2, own_learn_errors=0) == "nonfinite_own"
    assert update_failure(fine, own_groups=2, own_learn_errors=1) == "own_forward_failed"
    # a peer's non-finite samples (another source) are the peer's fault, not this node's
    assert update_failure({**fine, "frac_nonfinite@1": 1.0, "frac_nonfinite": 0.5}, own_groups=2,
                          own_learn_errors=0) == ""
    assert update_failure({}, own_groups=0, own_learn_errors=0, error=RuntimeError("x")) == ""


def test_the_count_resets_on_success_and_survives_a_checkpoint():
    health = UpdateHealth(3)
    keys = [health.note(r, reason) for r, reason in enumerate(["raised", "nonfinite_own", "", "raised"], 1)]
    assert [k["failed_updates_in_a_row"] for k in keys] == [1, 2, 0, 1]
    assert [k["update_failed"] for k in keys] == [1, 1, 0, 1] and not health.stopped
    again = UpdateHealth(3)
    again.load_state(health.state())
    assert again.note(5, "raised")["failed_updates_in_a_row"] == 2
    last = again.note(6, "nonfinite_step")
    assert again.stopped and last["stopped_unhealthy"] == 1 and again.total == 5
    assert "the last 3 updates failed in a row" in again.explain() and "nonfinite_step" in again.explain()


class InjectedFault(Exception):
    """Not one of the errors the learner contains per group: `learner.update` raises it."""


@pytest.mark.net
def test_a_node_whose_learner_fails_three_rounds_in_a_row_stops(tmp_path, tiny_model_dir, caplog):
    from ftis_swarm.node.daemon import Node

    cfg = load_node_config(None, {
        "model": str(tiny_model_dir), "run_dir": str(tmp_path / "run"), "rounds": 8, "prompts_per_round": 2,
        "sampling.group_size": 3, "sampling.max_new_tokens": 4, "round_deadline": 0.2, "checkpoint_every": 1,
        "swarm.transport.host": "127.0.0.1", "threads": 1})
    node = Node(cfg)
    # The fault is in the learner's forward pass only (the decoder called without a KV cache; sampling
    # always passes one): round by round, a torch error (contained per group: the node's own groups are
    # withheld), none, or an error the learner does not contain.
    plan = {1: RuntimeError, 2: RuntimeError, 3: None, 4: InjectedFault, 5: RuntimeError, 6: InjectedFault}
    current = {"round": 1}

    def fault(module, args, kwargs):
        kind = plan.get(current["round"])
        if kind is not None and kwargs.get("past_key_values") is None:
            raise kind("injected fault in the learner's forward pass")

    node.parts.model.get_decoder().register_forward_pre_hook(fault, with_kwargs=True)
    results = node.run(on_round=lambda res: current.update(round=res.round + 1))

    rows = [r for r in read_jsonl(cfg.run_dir / "metrics.jsonl") if r["round"]]  # round 0: the held-out evaluation
    assert [r["round"] for r in rows] == [res.round for res in results] == [1, 2, 3, 4, 5, 6]
    assert [r["failed_updates_in_a_row"] for r in rows] == [1, 2, 0, 1, 2, 3]
    assert [r["update_failed"] for r in rows] == [1, 1, 0, 1, 1, 1]
    assert [r.get("stopped_unhealthy", 0) for r in rows] == [0, 0, 0, 0, 0, 1]
    assert rows[0]["withheld_learn_error"] == 6  # both own groups (2 x G = 3 sequences) left out
    assert node.health.stopped and node.health.last_reason == "raised"
    assert sorted(p.name for p in (cfg.run_dir / "checkpoints").iterdir()) == ["ckpt-00000005"]  # not round 6's
    log = caplog.text
    assert "round 1: the update failed (own_forward_failed); 1 of 3 in a row" in log
    assert "round 4: the update raised" in log and "InjectedFault" in log
    assert "stopping: the last 3 updates failed in a row" in log


@pytest.mark.slow
@pytest.mark.net
def test_join_on_a_model_that_makes_nans_exits_with_status_3(tmp_path, tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    broken = tmp_path / "nan-model"
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    with torch.no_grad():
        model.get_decoder().layers[0].mlp.down_proj.weight[0, 0] = float("nan")  # every logit NaN
    model.save_pretrained(broken)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(broken)
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "ftis_swarm.cli", "join", "--model", str(broken), "--run-dir", str(run),
           "--rounds", "10", "--prompts-per-round", "2", "-G", "3", "--max-new-tokens", "4", "--round-deadline",
           "0.2", "--host", "127.0.0.1", "--threads", "1", "--no-table", "--set", "max_failed_updates=2"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == EXIT_UNHEALTHY, done.stderr[-3000:]
    last = [ln for ln in done.stderr.splitlines() if ln.strip()][-1]
    assert last.startswith("error: the node stopped at round 2: the last 2 updates failed in a row")
    assert "last reason: nonfinite_own" in last and "Traceback" not in done.stderr
    lines = list(read_jsonl(run / "metrics.jsonl"))
    assert [r["round"] for r in lines] == [0, 1, 2]  # round 0: the held-out evaluation (of NaN weights: 0)
    assert lines[0]["heldout_acc"] == 0.0
    rows = lines[1:]
    assert [r["failed_updates_in_a_row"] for r in rows] == [1, 2] and rows[-1]["stopped_unhealthy"] == 1
    assert rows[0]["frac_nonfinite@self"] == 1.0 and rows[0]["own_groups"] == 2
    assert "stopping: the last 2 updates failed" in (run / "node.log").read_text()
