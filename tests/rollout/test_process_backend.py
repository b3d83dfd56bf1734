"""The generator in a process of its own: samples like the in-process backend, follows weights refreshed in
shared memory, raises what the child raised, and a dead child is an error, not a hang."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest
import torch

from ftis_swarm.config import LearnerConfig, LoRAConfig, SamplingConfig
from ftis_swarm.learner.learner import apply_lora
from ftis_swarm.rollout import PromptRequest, RolloutInputError, TransformersBackend
from ftis_swarm.rollout.process_backend import GeneratorProcessError, ProcessBackend
from ftis_swarm.rollout.weight_sync import InMemorySync, model_copy
from tests.rollout.conftest import HEADER, PROMPTS, reference_logprobs

SAMPLING = SamplingConfig(group_size=3, max_new_tokens=6, seed=11)


def _same_groups(a, b, atol=1e-5) -> None:
    assert len(a) == len(b)
    for ga, gb in zip(a, b, strict=True):
        assert ga.policy_version == gb.policy_version and ga.sender == gb.sender and ga.item_id == gb.item_id
        assert all((x == y).all() for x, y in zip(ga.completion_ids, gb.completion_ids, strict=True))
        assert all(np.allclose(x, y, rtol=0, atol=atol) for x, y in zip(ga.logp_gen, gb.logp_gen, strict=True))


def _moved(model: torch.nn.Module) -> None:
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(torch.randn_like(p) * 0.3)


@pytest.fixture
def learner_and_generator(tiny_model, tiny_tokenizer):
    torch.set_num_threads(1)  # the child's count: the reference samples with the same
    twin = model_copy(tiny_model)
    generator = ProcessBackend(model=twin, tokenizer=tiny_tokenizer, header=HEADER, threads=1)
    yield tiny_model, twin, generator
    generator.close()


def test_it_samples_like_the_in_process_backend_refuses_like_it_and_follows_a_refresh(learner_and_generator, tiny_tokenizer):
    learner, twin, generator = learner_and_generator
    reference = TransformersBackend(model=learner, tokenizer=tiny_tokenizer, header=HEADER)
    assert generator.pid != os.getpid() and generator.context_len == reference.context_len
    assert generator.tokenizer_fp == reference.tokenizer_fp
    with pytest.raises(RolloutInputError, match="outside the model's vocabulary"):  # raised here, as the child did
        generator.generate([PromptRequest("arith", "arith/v1/0/9", [10**8])], 3, SAMPLING)
    assert generator.generate_calls == 0  # refused before a seed was drawn; the child lives on
    _same_groups(generator.generate(PROMPTS, 3, SAMPLING), reference.generate(PROMPTS, 3, SAMPLING))
    assert generator.generate_calls == reference.generate_calls == 1  # the next call's seed moves on in both

    torch.manual_seed(0)
    _moved(learner)
    stale = generator.generate(PROMPTS, 3, SAMPLING)  # the child still holds the old weights
    InMemorySync(learner, twin).sync()  # in place, in this process: the child maps the same pages
    generator.bump_policy_version()
    fresh = generator.generate(PROMPTS, 3, SAMPLING)
    assert fresh[0].policy_version == 1 and stale[0].policy_version == 0
    for g, h in zip(stale, fresh):  # the child sampled from the refreshed weights: the learner's log-probs
        assert np.allclose(np.concatenate(reference_logprobs(learner, h)), np.concatenate(h.logp_gen), atol=1e-4)
        assert not np.allclose(np.concatenate(reference_logprobs(learner, g)), np.concatenate(g.logp_gen), atol=1e-2)

    # a resumed node restores the call count: the next call draws the seed the uninterrupted one drew
    generator.restore_generate_calls(2)
    _same_groups(generator.generate(PROMPTS, 3, SAMPLING), fresh, atol=0)
    reference.bump_policy_version()
    assert generator.greedy([PROMPTS[0].prompt_ids], 4) == reference.greedy([PROMPTS[0].prompt_ids], 4)


def test_a_lora_copy_is_shared_and_follows_the_adapter(tiny_model, tiny_tokenizer):
    torch.set_num_threads(1)
    learner = apply_lora(tiny_model, LearnerConfig(lora=LoRAConfig(rank=4)))
    twin = model_copy(learner)
    generator = ProcessBackend(model=twin, tokenizer=tiny_tokenizer, header=HEADER, threads=1)
    try:
        before = generator.generate(PROMPTS, 3, SAMPLING)
        torch.manual_seed(1)
        _moved(learner)  # the adapter alone is trainable
        InMemorySync(learner, twin).sync()
        generator.restore_generate_calls(0)
        after = generator.generate(PROMPTS, 3, SAMPLING)
        for g, h in zip(before, after):  # sampled from the moved adapter: the learner's log-probs now
            assert np.allclose(np.concatenate(reference_logprobs(learner, h)), np.concatenate(h.logp_gen), atol=1e-4)
            assert not np.allclose(np.concatenate(reference_logprobs(learner, g)), np.concatenate(g.logp_gen),
                                   atol=1e-2)
    finally:
        generator.close()


def test_a_dead_generator_is_an_error_not_a_hang(learner_and_generator):
    _, _, generator = learner_and_generator
    pid = generator.pid
    os.kill(pid, signal.SIGINT)  # ignored: the node's Ctrl-C ends its round, then closes the generator
    time.sleep(0.5)
    assert len(generator.generate(PROMPTS[:1], 3, SAMPLING)) == 1
    os.kill(pid, signal.SIGKILL)
    t0 = time.monotonic()
    with pytest.raises(GeneratorProcessError, match=f"generator process {pid} exited"):
        generator.generate(PROMPTS, 3, SAMPLING)
    assert time.monotonic() - t0 < 10
    generator.close()
    with pytest.raises(GeneratorProcessError, match="closed"):
        generator.generate(PROMPTS, 3, SAMPLING)


def test_the_child_exits_when_its_parent_closes_the_pipe(learner_and_generator):
    _, _, generator = learner_and_generator
    proc = generator._proc
    generator._conn.close()  # what a SIGKILLed node leaves: the pipe's end closed by the kernel
    proc.join(10)
    assert proc.exitcode == 0
