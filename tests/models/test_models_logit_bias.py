"""`smollm2-bias<sigma>` (models/logit_bias.py): a fixed seeded bias, digits/EOS/specials exempt, seen alike by
the rollout backend and the learner's log-probs. Built on the tiny Qwen2 (real Qwen tokenizer), so no conversion."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from ftis_swarm.config import SamplingConfig
from ftis_swarm.core.logprobs import token_logprobs
from ftis_swarm.models import ModelNotFoundError, check_model_name, load_model
from ftis_swarm.models.logit_bias import (
    EXEMPT_KEY,
    bias_name,
    bias_vector,
    build_biased,
    exempt_token_ids,
    parse_bias_name,
)
from ftis_swarm.rollout import GroupHeader, PromptRequest, TransformersBackend

SIGMA = 2.0


@pytest.fixture(scope="module")
def biased_dir(tiny_qwen: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tiny-bias2")
    build_biased(tiny_qwen, out, SIGMA)
    return out


def test_names_parse_and_refuse_out_of_range() -> None:
    assert parse_bias_name("smollm2-bias2") == 2.0 and parse_bias_name("SmolLM2-bias1.5") == 1.5
    assert parse_bias_name("smollm2-slim27") is None
    assert bias_name(2.0) == "smollm2-bias2" and bias_name(1.5) == "smollm2-bias1.5"
    check_model_name("smollm2-bias2.5")
    with pytest.raises(ModelNotFoundError, match=r"must be in \(0, 10\]"):
        check_model_name("smollm2-bias0")


def test_bias_is_deterministic_and_scaled() -> None:
    a, b = bias_vector(5000, 1.0, 0, [3, 7]), bias_vector(5000, 1.0, 0, [3, 7])
    assert torch.equal(a, b)
    assert torch.allclose(bias_vector(5000, 2.0, 0, [3, 7]), 2 * a)
    assert not torch.equal(bias_vector(5000, 1.0, 1, [3, 7]), a)  # the seed matters
    assert float(a[3]) == 0.0 and float(a[7]) == 0.0
    assert 0.9 < float(a.std()) < 1.1


def test_digits_eos_and_specials_are_exempt(tiny_qwen: Path, biased_dir: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_qwen)
    exempt = set(exempt_token_ids(tok))
    digit_ids = {tok.convert_tokens_to_ids(d) for d in "0123456789"}
    assert digit_ids <= exempt
    assert tok.eos_token_id in exempt and set(tok.all_special_ids) <= exempt
    assert tok.convert_tokens_to_ids("the") not in exempt
    assert len(exempt) < 2000  # digits and specials, not a share of the vocabulary

    plain, _ = load_model(str(tiny_qwen))
    biased, _ = load_model(str(biased_dir))
    ids = torch.tensor([[9707, 11, 18, 488]])
    with torch.no_grad():
        gap = biased(ids).logits[0, -1] - plain(ids).logits[0, -1]  # (V,)
    listed = torch.tensor(sorted(exempt))
    assert float(gap[listed].abs().max()) < 1e-5
    others = torch.ones_like(gap, dtype=torch.bool)
    others[listed] = False
    assert 1.8 < float(gap[others].std()) < 2.2
    import json
    assert json.loads((biased_dir / "config.json").read_text())[EXEMPT_KEY] == sorted(exempt)


def test_learner_logprobs_equal_generation_logprobs(biased_dir: Path, tiny_qwen: Path) -> None:
    model, tok = load_model(str(biased_dir))
    backend = TransformersBackend(model=model, tokenizer=tok, header=GroupHeader("r", "b", "tiny-bias2"))
    prompts = [PromptRequest("arith", "arith/v1/0/0", [151644, 872, 198, 18, 488, 19, 284]),
               PromptRequest("arith", "arith/v1/0/1", [9707, 11])]
    groups = backend.generate(prompts, 3, SamplingConfig(temperature=0.7, max_new_tokens=10, seed=3))
    plain, _ = load_model(str(tiny_qwen))
    gaps = {"biased": 0.0, "plain": 0.0}
    for g in groups:
        prompt = [int(t) for t in g.prompt_ids]
        for completion, logp_gen in zip(g.completion_ids, g.logp_gen):
            ids = torch.tensor([prompt + [int(t) for t in completion]])
            for name, m in (("biased", model), ("plain", plain)):
                with torch.no_grad():
                    lp = token_logprobs(m, ids, temperature=g.temperature)[0, len(prompt) - 1:]  # (n,)
                gaps[name] = max(gaps[name], float(np.abs(lp.numpy() - logp_gen).max()))
    assert gaps["biased"] < 1e-4  # the learner sees the logits the sampler sampled from
    assert gaps["plain"] > 0.5  # and they are not the unbiased model's


def test_the_vllm_backend_refuses_a_biased_model_in_one_sentence(biased_dir: Path) -> None:
    from ftis_swarm.errors import UserError
    from ftis_swarm.rollout.vllm_backend import VLLMBackend

    with pytest.raises(UserError, match="adds a logit bias in a forward hook that vLLM never runs"):
        VLLMBackend(str(biased_dir), header=GroupHeader("r", "b", "tiny-bias2"))
