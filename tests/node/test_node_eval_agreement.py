"""`ftis-node eval`, the experiment's held-out accuracy and a node's held-out curve are one evaluator
(`node.heldout.greedy_pass_at_1`): the same answers on the same weights and items, item by item; and the
experiment's recorded held-out set is still the one its config draws, through the node's keys."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from typer.testing import CliRunner

from ftis_swarm.cli.main import app
from ftis_swarm.config import NodeConfig
from ftis_swarm.lab.experiment.config import ExperimentConfig
from ftis_swarm.lab.experiment.heldout import heldout_accuracy, heldout_items
from ftis_swarm.lab.experiment.run import eval_items
from ftis_swarm.node.heldout import HeldoutEval
from ftis_swarm.rollout import GroupHeader, TransformersBackend
from ftis_swarm.tasks import get_task, items_digest

RECORDED = Path(__file__).resolve().parents[2] / "docs" / "experiment29-sampled8"

ITEMS = 6
TOKENS = 6
PENALTY = 5.0
"""A repetition penalty in the checkpoint's generation_config: `generate` would apply it, greedy must not."""


@pytest.fixture
def checkpoint(tiny_model_dir, tmp_path):
    """A trained-looking full-model checkpoint (`model/`): the tiny model, perturbed, with a penalising generation_config."""
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    gen = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.02)
    model.generation_config.repetition_penalty = PENALTY
    path = tmp_path / "ckpt" / "model"
    model.save_pretrained(path)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(path)
    return path


@pytest.mark.slow
def test_eval_and_experiment_heldout_give_the_same_answers(checkpoint, tmp_path):
    out = tmp_path / "eval.json"
    result = CliRunner().invoke(app, ["eval", "--model", str(checkpoint), "--task", "arith", "--limit", str(ITEMS),
                                      "--max-new-tokens", str(TOKENS), "--batch-size", "4", "--backend",
                                      "transformers", "--json", str(out)])
    assert result.exit_code == 0, result.output
    cli = json.loads(out.read_text())

    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(checkpoint)
    task = get_task("arith")
    items = heldout_items(task, ITEMS, seed=0)  # eval draws its items with seed 0
    backend = TransformersBackend(model=model, tokenizer=tok, header=GroupHeader("r", "s", "m"))
    exp = heldout_accuracy(model, tok, task, items, max_new_tokens=TOKENS, eos_ids=backend.eos_ids,
                           pad_id=backend.pad_id)

    assert cli["items"] == exp["items"] == ITEMS and cli["digest"] == exp["digest"]
    assert cli["verdicts"] == exp["verdicts"] and len(cli["verdicts"]) == ITEMS
    assert cli["answers_digest"] == exp["answers_digest"]  # the same text for every item
    assert cli["pass_at_1"] == exp["accuracy"]

    # a node with these weights: its curve's evaluation, through the backend it samples with (the model shared)
    cfg = NodeConfig(task="arith", eval_items=ITEMS, eval_max_new_tokens=TOKENS, rounds=3)
    node_eval = HeldoutEval(cfg, backend=backend, tokenizer=tok)
    assert node_eval.run(0)["heldout_acc"] == cli["pass_at_1"]
    node = node_eval.results["arith"]
    assert (node["digest"], node["verdicts"], node["answers_digest"]) == (cli["digest"], cli["verdicts"],
                                                                           cli["answers_digest"])

    # the checkpoint's penalty would have mattered: `generate` (what eval used before) answers otherwise
    prompts = [task.render_prompt(tok, it) for it in items]
    ours = backend.greedy(prompts, TOKENS)
    theirs = [model.generate(input_ids=torch.tensor([p]), max_new_tokens=TOKENS, do_sample=False, top_k=None,
                             top_p=None, temperature=None, eos_token_id=backend.eos_ids)[0, len(p):].tolist()
              for p in prompts]
    assert any(a != b[: len(a)] for a, b in zip(ours, theirs))


def test_the_experiments_recorded_heldout_set_is_drawn_again_through_the_node_keys():
    """docs/experiment29-sampled8: its config (held-out keys at the top level, from before they were the node's)
    draws the recorded set, whose digest every recorded evaluation carries."""
    cfg = ExperimentConfig.model_validate(json.loads((RECORDED / "config.json").read_text()))
    assert (cfg.node.eval_items, cfg.node.eval_seed, cfg.node.eval_max_new_tokens, cfg.node.eval_every) == \
        (None, 0, 16, 0)
    items = eval_items(cfg, get_task(cfg.node.task))
    start = json.loads((RECORDED / "start_eval.json").read_text())["result"]
    run = json.loads((RECORDED / "runs" / "solo_seed0.json").read_text())["result"]
    recorded = {start[name]["digest"] for name in ("A", "B")} | {ev[name]["digest"] for ev in run["evals"]
                                                                  for name in ("A", "B")}
    assert recorded == {items_digest(items)} and len(items) == start["A"]["items"] == 95


@pytest.mark.slow
def test_the_recorded_greedy_answers_of_smollm2_reproduce_through_the_nodes_evaluator():
    """Learner A's start evaluation in docs/experiment29-sampled8 (SmolLM2-135M, 95 items, 16 tokens), made by the
    experiment's evaluator before it moved into the product: the same answer texts, item by item (about a minute)."""
    from ftis_swarm.models import load_model

    cfg = ExperimentConfig.model_validate(json.loads((RECORDED / "config.json").read_text()))
    recorded = json.loads((RECORDED / "start_eval.json").read_text())["result"]["A"]
    model, tok = load_model(cfg.learners[0]["model"])
    backend = TransformersBackend(model=model, tokenizer=tok, header=GroupHeader("r", "s", "m"))
    node_eval = HeldoutEval(cfg.learner_node(0).model_copy(update={"rounds": 1}), backend=backend, tokenizer=tok)
    node_eval.run(0)
    got = node_eval.results[cfg.node.task]
    assert (got["digest"], got["verdicts"], got["answers_digest"]) == (recorded["digest"], recorded["verdicts"],
                                                                       recorded["answers_digest"])
