"""Shared pieces of the backends: seeds per call, budgets, the EOS set, prompt checks."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from ftis_swarm.rollout import PromptRequest, RolloutInputError
from ftis_swarm.rollout.base import call_seed, check_prompts, completion_budget, eos_token_ids


def test_call_seeds_are_reproducible_and_distinct() -> None:
    seeds = [call_seed(7, k) for k in range(1000)]
    assert seeds == [call_seed(7, k) for k in range(1000)]
    assert len(set(seeds)) == 1000
    assert not set(seeds) & {call_seed(8, k) for k in range(1000)}
    assert call_seed(None, 3) is None


def test_budget_is_cut_where_the_context_ends_and_never_below_one() -> None:
    assert completion_budget(10, 64, 2048) == 64
    assert completion_budget(2040, 64, 2048) == 8
    assert completion_budget(2047, 64, 2048) == 1


def test_eos_set_joins_tokenizer_and_configs() -> None:
    tok = SimpleNamespace(eos_token_id=151645)
    gen = SimpleNamespace(eos_token_id=[151645, 151643])
    assert eos_token_ids(tok, SimpleNamespace(eos_token_id=None), gen) == [151643, 151645]
    with pytest.raises(ValueError, match="no EOS token"):
        eos_token_ids(SimpleNamespace(eos_token_id=None))


def test_prompt_checks_name_the_item() -> None:
    ok = PromptRequest("t", "ok", [1, 2, 3])
    check_prompts([ok], context_len=4, vocab_size=10)
    for bad, words in (
        (PromptRequest("t", "long", [1, 2, 3, 4]), "t/long has 4 tokens, but the model's context is 4"),
        (PromptRequest("t", "neg", [1, -1]), "token id -1 outside"),
        (PromptRequest("t", "big", [10]), "token id 10 outside the model's vocabulary of 10"),
    ):
        with pytest.raises(RolloutInputError, match=words):
            check_prompts([ok, bad], context_len=4, vocab_size=10)


def test_importing_the_rollout_package_and_its_factory_leaves_vllm_unimported() -> None:
    """`make_backend` imports the vLLM backend lazily: a CPU node never pays for (or needs) vllm."""
    import subprocess
    import sys

    code = ("import sys\nimport ftis_swarm.rollout, ftis_swarm.rollout.factory, ftis_swarm.ops.evaluate\n"
            "print(sorted(m for m in sys.modules if m == 'vllm' or m.startswith(('vllm.', 'ftis_swarm.rollout.vllm'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
