"""The sampling loop: exact draws, EOS and budgets, cache kinds, model mode."""

from __future__ import annotations

import math

import torch

from ftis_swarm.rollout.sampler import draw, left_pad, sample_rows

EOS_SET = list(range(0, 22000))
"""Treating 14% of the vocabulary as EOS makes a random-init model stop after a few tokens."""


def test_draw_matches_the_distribution_and_never_picks_zero_probability() -> None:
    probs = torch.tensor([0.5, 0.0, 0.2, 0.3, 0.0])
    logp = probs.log().expand(40000, 5).contiguous()  # (N, 5)
    picks = draw(logp, torch.Generator().manual_seed(0))
    freq = torch.bincount(picks, minlength=5).double() / picks.numel()
    assert freq[1] == 0 and freq[4] == 0
    # three standard errors of a binomial at N = 40000 are below 0.0075
    assert torch.allclose(freq, probs.double(), atol=0.0075), freq


def test_left_pad_puts_tokens_right_and_masks_the_rest() -> None:
    ids, mask = left_pad([[5, 6, 7], [9]], pad_id=0, device=torch.device("cpu"))
    assert ids.tolist() == [[5, 6, 7], [0, 0, 9]]
    assert mask.tolist() == [[1, 1, 1], [0, 0, 1]]


def test_rows_stop_at_eos_with_it_included_and_at_their_budget(tiny_model) -> None:
    rows = [[151644, 872, 198], [9707], [785, 3974, 13876, 38835]] * 8
    budgets = [6, 3, 9] * 8
    res = sample_rows(
        tiny_model, rows, budgets=budgets, temperature=1.0, eos_ids=EOS_SET, pad_id=151643,
        generator=torch.Generator().manual_seed(3),
    )
    eos = set(EOS_SET)
    early, full = 0, 0
    for ids, lps, budget in zip(res.token_ids, res.logprobs, budgets):
        assert 1 <= len(ids) <= budget and len(lps) == len(ids)
        assert not any(t in eos for t in ids[:-1])  # nothing sampled after an EOS
        if len(ids) < budget:
            assert ids[-1] in eos  # stopped early: only an EOS stops a row early
            early += 1
        full += len(ids) == budget and ids[-1] not in eos
        assert all(lp < 0 for lp in lps)
    assert early > 0 and full > 0
    assert len({len(ids) for ids in res.token_ids}) > 2


def test_static_and_dynamic_cache_sample_the_same_tokens(tiny_model) -> None:
    rows = [[151644, 872, 198], [9707], [785, 3974, 13876, 38835]]
    out = [
        sample_rows(
            tiny_model, rows, budgets=[8, 8, 8], temperature=0.7, eos_ids=[151645], pad_id=151643,
            generator=torch.Generator().manual_seed(11), static_cache=static,
        )
        for static in (True, False)
    ]
    assert out[0].token_ids == out[1].token_ids
    gap = max(abs(a - b) for ra, rb in zip(out[0].logprobs, out[1].logprobs) for a, b in zip(ra, rb))
    assert gap < 1e-5


def test_training_mode_is_restored_and_no_grad_is_kept(tiny_model) -> None:
    tiny_model.train()
    sample_rows(tiny_model, [[1, 2, 3]], budgets=[2], temperature=1.0, eos_ids=[151645], pad_id=151643)
    assert tiny_model.training
    assert all(p.grad is None for p in tiny_model.parameters())


def test_log_probs_are_of_the_tempered_distribution(tiny_model) -> None:
    """At T -> small the sampled token's log-prob approaches 0 (the distribution turns greedy)."""
    res = sample_rows(
        tiny_model, [[9707, 11]], budgets=[4], temperature=0.01, eos_ids=[151645], pad_id=151643,
        generator=torch.Generator().manual_seed(0),
    )
    with torch.no_grad():
        greedy = tiny_model(torch.tensor([[9707, 11]])).logits[0, -1].argmax().item()
    assert res.token_ids[0][0] == greedy
    assert math.exp(res.logprobs[0][0]) > 0.5
