"""`ftis-node eval` and the experiment's held-out accuracy decode and score alike: the same answers, item by item."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from typer.testing import CliRunner

from ftis_swarm.lab.experiment.heldout import heldout_accuracy, heldout_items
from ftis_swarm.cli.main import app
from ftis_swarm.rollout import GroupHeader, TransformersBackend
from ftis_swarm.tasks import get_task

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

    # the checkpoint's penalty would have mattered: `generate` (what eval used before) answers otherwise
    prompts = [task.render_prompt(tok, it) for it in items]
    ours = backend.greedy(prompts, TOKENS)
    theirs = [model.generate(input_ids=torch.tensor([p]), max_new_tokens=TOKENS, do_sample=False, top_k=None,
                             top_p=None, temperature=None, eos_token_id=backend.eos_ids)[0, len(p):].tolist()
              for p in prompts]
    assert any(a != b[: len(a)] for a, b in zip(ours, theirs))
