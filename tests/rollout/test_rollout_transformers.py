"""The transformers backend: groups, log-prob parity with the learner, updates, adapters, bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ftis_swarm.config import FTISConfig, SamplingConfig
from ftis_swarm.core.ftis import ftis_loss
from ftis_swarm.core.logprobs import token_logprobs
from ftis_swarm.models import ModelNotFoundError
from ftis_swarm.rollout import PromptRequest, RolloutInputError, TransformersBackend, make_backend
from ftis_swarm.wire import tokenizer_fingerprint

EOS_SET = list(range(0, 22000))


def backend_for(model, tokenizer, kit, **kw) -> TransformersBackend:
    return TransformersBackend(model=model, tokenizer=tokenizer, header=kit.header, **kw)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_match_the_learner_recomputation(tiny_model, tiny_tokenizer, kit, temperature) -> None:
    backend = backend_for(tiny_model, tiny_tokenizer, kit)
    backend.eos_ids = EOS_SET  # variable lengths inside a group
    groups = backend.generate(kit.prompts, 4, SamplingConfig(temperature=temperature, max_new_tokens=12, seed=5))
    assert len({n for g in groups for n in g.completion_lengths}) > 1
    assert kit.gap(tiny_model, groups) < 1e-4
    # and the recomputation at another temperature does not match: T is really applied
    other = groups[0].__class__.build(**{**_fields(groups[0]), "temperature": 1.7 - temperature})
    assert kit.gap(tiny_model, [other]) > 1e-2


def _fields(g) -> dict:
    return dict(
        run_id=g.run_id, sender=g.sender, model_id=g.model_id, policy_version=g.policy_version,
        created_at=g.created_at, tokenizer_fp=g.tokenizer_fp, task_id=g.task_id, item_id=g.item_id,
        prompt_ids=g.prompt_ids, temperature=g.temperature, completion_ids=g.completion_ids, logp_gen=g.logp_gen,
    )


def test_groups_carry_the_header_prompt_and_version(tiny_model, tiny_tokenizer, kit) -> None:
    backend = backend_for(tiny_model, tiny_tokenizer, kit)
    groups = backend.generate(kit.prompts, 3, SamplingConfig(temperature=0.7, max_new_tokens=5, seed=1))
    assert [g.item_id for g in groups] == [p.item_id for p in kit.prompts]
    for g, p in zip(groups, kit.prompts):
        assert (g.run_id, g.sender, g.model_id) == ("test-run", "peer-a", "tiny-qwen2")
        assert g.G == 3 and g.policy_version == 0 and g.temperature == pytest.approx(0.7)
        assert g.prompt_ids.tolist() == p.prompt_ids
        assert g.tokenizer_fp == tokenizer_fingerprint(tiny_tokenizer)
        assert all(c.dtype == np.uint32 for c in g.completion_ids)
        assert all(lp.dtype == np.float32 and (lp < 0).all() for lp in g.logp_gen)
        assert g.completion_lengths == [5, 5, 5]  # no EOS from a random model: the budget stops it


def test_seeded_sampling_reproduces_and_calls_differ(tiny_dir, kit) -> None:
    cfg = SamplingConfig(temperature=1.0, max_new_tokens=6, seed=42)
    runs = []
    for _ in range(2):
        backend = TransformersBackend.from_pretrained(str(tiny_dir), header=kit.header)
        runs.append([backend.generate(kit.prompts[:2], 2, cfg) for _ in range(2)])
    ids = [[[c.tolist() for g in call for c in g.completion_ids] for call in run] for run in runs]
    assert ids[0] == ids[1]  # same seed, same call sequence: same samples
    assert ids[0][0] != ids[0][1]  # the second call does not repeat the first
    other = TransformersBackend.from_pretrained(str(tiny_dir), header=kit.header)
    other_ids = [c.tolist() for g in other.generate(kit.prompts[:2], 2, cfg.model_copy(update={"seed": 43}))
                 for c in g.completion_ids]
    assert other_ids != ids[0][0]


def test_batches_split_by_whole_groups_keep_parity(tiny_model, tiny_tokenizer, kit) -> None:
    backend = backend_for(tiny_model, tiny_tokenizer, kit, max_batch_rows=4, static_cache=False)
    groups = backend.generate(kit.prompts, 3, SamplingConfig(temperature=0.7, max_new_tokens=4, seed=2))
    assert [g.G for g in groups] == [3, 3, 3]
    assert kit.gap(tiny_model, groups) < 1e-4


def test_in_place_learner_step_is_served_after_a_version_bump(tiny_model, tiny_tokenizer, kit) -> None:
    """The node's CPU mode: learner and backend share one model object; no copy, no reload."""
    backend = backend_for(tiny_model, tiny_tokenizer, kit)
    cfg = SamplingConfig(temperature=1.0, max_new_tokens=6, seed=0)
    before = backend.generate(kit.prompts[:1], 4, cfg)[0]
    # one F-TIS step on the group, as the learner would take it
    prompt = before.prompt_ids.tolist()
    ids = torch.tensor([prompt + c.tolist() for c in before.completion_ids])  # (4, L)
    mask = torch.zeros(ids.shape[0], ids.shape[1] - 1)
    mask[:, len(prompt) - 1 :] = 1
    logp_gen = torch.zeros_like(mask)
    logp_gen[:, len(prompt) - 1 :] = torch.from_numpy(np.stack(before.logp_gen))
    tiny_model.train()
    logp = token_logprobs(tiny_model, ids, temperature=1.0)
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5])
    own = torch.zeros(4, dtype=torch.bool)
    loss, _ = ftis_loss(logp, logp.detach(), logp_gen, adv, mask, own, FTISConfig())
    loss.backward()
    with torch.no_grad():
        for p in tiny_model.parameters():
            if p.grad is not None:
                p.sub_(0.05 * p.grad.sign())
    tiny_model.zero_grad()
    tiny_model.eval()
    assert backend.bump_policy_version() == 1
    after = backend.generate(kit.prompts[:1], 4, cfg)[0]
    assert after.policy_version == 1
    stale = kit.gap(tiny_model, [before])  # the old log-probs no longer describe the model
    assert stale > 1e-2
    assert kit.gap(tiny_model, [after]) < 1e-4


def test_load_weights_serves_a_new_checkpoint(tiny_model, tiny_tokenizer, kit, tmp_path) -> None:
    backend = backend_for(tiny_model, tiny_tokenizer, kit)
    new = kit.perturbed(tiny_model)
    new.save_pretrained(tmp_path / "step1")  # tied embeddings: no lm_head.weight in the file
    reference = kit.perturbed(tiny_model)  # an independent copy of the same new weights
    backend.load_weights(str(tmp_path / "step1"))
    assert backend.policy_version == 1
    groups = backend.generate(kit.prompts, 2, SamplingConfig(temperature=0.7, max_new_tokens=5, seed=0))
    assert groups[0].policy_version == 1
    assert kit.gap(reference, groups) < 1e-4
    with pytest.raises(FileNotFoundError, match="no .safetensors"):
        backend.load_weights(str(tmp_path))


def test_load_weights_refuses_a_checkpoint_of_another_shape(tiny_model, tiny_tokenizer, kit, tmp_path) -> None:
    from ftis_swarm.models.tiny import build_tiny_qwen2

    other = build_tiny_qwen2(tmp_path / "other", num_layers=3)
    backend = backend_for(tiny_model, tiny_tokenizer, kit)
    before = {k: v.clone() for k, v in tiny_model.state_dict().items()}
    with pytest.raises(ValueError, match="unexpected tensor model.layers.2"):
        backend.load_weights(str(other))
    assert backend.policy_version == 0
    assert all(torch.equal(v, tiny_model.state_dict()[k]) for k, v in before.items())  # nothing half-loaded
    wide = build_tiny_qwen2(tmp_path / "wide", hidden_size=128, num_heads=4)
    with pytest.raises(ValueError, match="has shape"):
        backend.load_weights(str(wide))


def test_adapter_swaps_take_effect(tiny_model, tiny_tokenizer, kit, tmp_path) -> None:
    backend = backend_for(tiny_model, tiny_tokenizer, kit)
    cfg = SamplingConfig(temperature=1.0, max_new_tokens=5, seed=9)
    ref_a = kit.lora(tiny_model, tmp_path / "a", seed=1)
    ref_b = kit.lora(tiny_model, tmp_path / "b", seed=2)
    base = kit.perturbed(tiny_model, scale=0.0)  # a copy: peft injects the adapter into the served model
    backend.set_adapter(str(tmp_path / "a"))
    with_a = backend.generate(kit.prompts, 2, cfg)
    assert kit.gap(ref_a, with_a) < 1e-4 and kit.gap(base, with_a) > 1e-2
    backend.set_adapter(str(tmp_path / "b"))
    with_b = backend.generate(kit.prompts, 2, cfg)
    assert backend.policy_version == 2 and with_b[0].policy_version == 2
    assert kit.gap(ref_b, with_b) < 1e-4 and kit.gap(ref_a, with_b) > 1e-2
    assert len(backend.model.peft_config) == 1  # the old adapter was dropped, not stacked
    with pytest.raises(RuntimeError, match="set_adapter"):
        backend.load_weights(str(tmp_path / "a"))


def test_prompt_too_long_is_one_sentence_naming_the_item(tiny_model, tiny_tokenizer, kit) -> None:
    backend = backend_for(tiny_model, tiny_tokenizer, kit)
    context = tiny_model.config.max_position_embeddings
    long = PromptRequest("gsm8k", "gsm8k/test/3", [11] * context)
    with pytest.raises(RolloutInputError) as err:
        backend.generate([kit.prompts[0], long], 2, SamplingConfig(max_new_tokens=4))
    msg = str(err.value)
    assert "gsm8k/test/3" in msg and str(context) in msg and "\n" not in msg
    assert backend.policy_version == 0
    for bad, words in (([], "empty"), ([5, 151936], "vocabulary")):
        with pytest.raises(RolloutInputError, match=words):
            backend.generate([PromptRequest("t", "i", bad)], 2, SamplingConfig(max_new_tokens=4))


def test_completions_stop_where_the_context_ends(tiny_model, tiny_tokenizer, kit) -> None:
    backend = backend_for(tiny_model, tiny_tokenizer, kit)
    context = tiny_model.config.max_position_embeddings
    near = PromptRequest("t", "near-end", [11] * (context - 2))
    (group,) = backend.generate([near], 2, SamplingConfig(max_new_tokens=8, seed=0))
    assert group.completion_lengths == [2, 2]


def test_make_backend_picks_transformers_on_cpu_and_refuses_bad_input(tiny_dir, kit) -> None:
    backend = make_backend("auto", str(tiny_dir), header=kit.header)
    assert isinstance(backend, TransformersBackend)
    assert next(backend.model.parameters()).device.type == "cpu"
    with pytest.raises(ValueError, match="auto, transformers or vllm"):
        make_backend("tgi", str(tiny_dir), header=kit.header)
    with pytest.raises(ModelNotFoundError, match="unknown model 'gpt-17'"):
        make_backend("transformers", "gpt-17", header=kit.header)


def test_greedy_is_argmax_in_batches_cut_at_eos_and_the_context(tiny_model, tiny_tokenizer, kit) -> None:
    """`greedy` (the evaluation's decoder) matches one-prompt-at-a-time argmax whatever the batching, keeps EOS,
    ignores a generation_config penalty, and leaves room in the context as `generate` does."""
    backend = backend_for(tiny_model, tiny_tokenizer, kit, max_batch_rows=2)  # three prompts: two batches
    backend.eos_ids = EOS_SET
    prompts = [p.prompt_ids for p in kit.prompts]
    tiny_model.generation_config.repetition_penalty = 5.0  # `generate` would apply it; greedy must not
    got = backend.greedy(prompts, 8)
    tiny_model.generation_config.repetition_penalty = 1.0
    eos = set(EOS_SET)
    for prompt, ids in zip(prompts, got):
        ref = tiny_model.generate(input_ids=torch.tensor([prompt]), max_new_tokens=8, do_sample=False, top_k=None,
                                  top_p=None, temperature=None, eos_token_id=EOS_SET)[0, len(prompt):].tolist()
        assert ids == ref[: len(ids)] and 1 <= len(ids) <= 8
        assert len(ids) == 8 or ids[-1] in eos  # only an EOS ends an answer early, and it is kept
    assert any(len(ids) < 8 for ids in got)
    backend.eos_ids = [151645]
    tiny_model.config.max_position_embeddings = 64  # what the backend reads as the context, kept short here
    (near_end,) = backend.greedy([[11] * 61], 8)
    assert len(near_end) == 3  # cut where the context ends, as a sampled completion is
