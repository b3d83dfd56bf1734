"""Standing that deflation cannot buy (docs/method.md, "Standing and credit that deflation cannot buy"), through
the real learner on a tiny model: evidence of overlap, a strike after standing, the aggregate bound on the weight
above 1 of recent standing, and the detector's checkpoint state, old and new."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from learner_samples import rebuilt, sample_group, shift_logp

import ftis_swarm.learner.learner as learner_module
from ftis_swarm.config import LearnerConfig
from ftis_swarm.learner.batch import ScoredGroup, build_batch
from ftis_swarm.learner.forgery import ForgeryDetector
from ftis_swarm.learner.learner import Learner

PROMPT = [151644, 872, 198, 18, 10, 19, 28]
C, DELTA = 2.0, 1e-6
BOUND_ONLY = LearnerConfig(standing_overlap=0.0, standing_overlap_block=0.0)
"""Standing by the upper bound alone: the rule before the amendment."""


@pytest.fixture(scope="module")
def honest(tiny_dir):
    """24 groups of 4 x 8 tokens sampled from the tiny model itself: every ratio is 1 (a close sampler)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    return [sample_group(model, PROMPT, G=4, length=8, seed=s, sender="honest") for s in range(24)]


def peer_item(group, rewards=(0, 0, 0, 0), source=1):
    return ScoredGroup.vertical(group, list(rewards), offpolicy=True, source=source, filterable=True)


def deflated(group):
    """The same completions claiming probability 1 on every token (`logp_gen = 0`)."""
    return rebuilt(group, logp_gen=[np.zeros_like(lp) for lp in group.logp_gen])


def updates_to_standing(learner, groups, sender) -> int | None:
    """Tokens the learner's detector saw from `sender` when it first had standing (None: never)."""
    for g in groups:
        learner.update([peer_item(rebuilt(g, sender=sender))])  # equal rewards: nothing is learned
        if learner.detector.has_standing(sender):
            return learner.detector.tokens(sender)
    return None


def test_a_deflating_identity_never_earns_standing(tiny_model, honest):
    """Its ratios are pi_theta(a) itself, about 1/V for the tiny model: the bound alone gave it standing in its third
    update, at 24 tokens (issue 40: about 20); none of its tokens lies in [1/C, C], so with the overlap tests it never
    has standing."""
    short = [rebuilt(g, completion_ids=[c[:2] for c in g.completion_ids], logp_gen=[lp[:2] for lp in g.logp_gen])
             for g in honest]  # two-token answers, as issue 40's
    groups = [deflated(g) for g in short] * 2
    old = Learner(tiny_model, cfg=BOUND_ONLY, pad_id=0)
    assert updates_to_standing(old, groups, "deflator") == 24  # 8 tokens an update: the attack is real
    new = Learner(tiny_model, cfg=LearnerConfig(), pad_id=0)
    assert updates_to_standing(new, groups, "deflator") is None
    assert new.detector.overlap_fraction("deflator") == 0.0 and new.detector.tokens("deflator") == 384
    m = new.update([peer_item(rebuilt(groups[0], sender="deflator"))])
    assert m["overlap@1"] == 0.0 and m["peers_without_standing"] == 1.0


def test_an_honest_close_sampler_earns_standing_in_as_many_tokens_as_before(tiny_model, honest):
    before = updates_to_standing(Learner(tiny_model, cfg=BOUND_ONLY, pad_id=0), honest, "p")
    learner = Learner(tiny_model, cfg=LearnerConfig(), pad_id=0)
    now = updates_to_standing(learner, honest, "p")
    assert before is not None and now == before and 400 <= now <= 640  # about ln(B/delta) / 2 * (C / m)^2
    assert learner.detector.overlap_fraction("p") == 1.0  # its own model: every ratio is 1
    assert learner.detector.standing_age("p") == 0  # earned in this update: age 0, 1 in the next


def strike_of(model, learner, sender):
    """Issue 40's strike on this learner: the right answers' log-probs lowered until x = 0.8 (weight C), the wrong
    ones claiming probability 1; rewards [1, 1, 0, 0]."""
    g = rebuilt(sample_group(model, PROMPT, G=4, length=2, seed=99), sender=sender)
    lp_old = learner.old_logprobs(build_batch([peer_item(g)], pad_id=0, micro_batch=8))  # (4, 2)
    forged = [lp_old[i].numpy() - 0.8 if i < 2 else np.zeros(2, dtype=np.float32) for i in range(4)]
    return peer_item(rebuilt(g, logp_gen=forged), rewards=(1, 1, 0, 0))


@pytest.mark.parametrize("overlap, share", [(0.0, 1.0), (0.0, 0.1), (None, 0.1)])
def test_a_strike_after_earned_standing_ends_it_in_the_update_it_starts(tiny_model, honest, overlap, share):
    """Without the overlap tests (0), with or without the aggregate cap; with the config's (None)."""
    tests = {} if overlap is None else {"standing_overlap": overlap, "standing_overlap_block": overlap}
    cfg = LearnerConfig(lr=1e-12, max_recent_excess_share=share, **tests)
    learner = Learner(tiny_model, cfg=cfg, pad_id=0)
    assert updates_to_standing(learner, honest, "turncoat") is not None
    m = learner.update([strike_of(tiny_model, learner, "turncoat")])
    assert m["overlap@1"] == 0.0  # ratios e^0.8 > C and about 1/V < 1/C
    if overlap == 0.0:  # the bound alone: the window's honest mean hides the strike
        assert m["peers_with_standing"] == 1.0 and learner.detector.has_standing("turncoat")
        # alone in the update, it trains at C; with its standing one update old, the aggregate cap leaves its two
        # samples' excess k (w - 1) with 2k = share (2 + 2k): k = 1/9 at a share of 0.1
        k = 1.0 if share == 1.0 else share / (1 - share)
        assert m["max_weight_used@1"] == pytest.approx(1 + k * (C - 1), rel=1e-5)
        assert m["frac_recent_excess_scaled"] == (0.0 if share == 1.0 else 0.5)
    else:
        assert m["peers_with_standing"] == 0.0 and m["used@1"] == 2.0
        assert m["max_weight_used@1"] == pytest.approx(1.0) and m["frac_capped_unproven@1"] == 0.5
        assert not learner.detector.has_standing("turncoat") and learner.detector.standing_age("turncoat") is None
        assert m["withheld_forgery"] == 0.0  # ended standing, not flagged: no charge on a test that has false alarms


def captured_terms(monkeypatch):
    """Every `SampleTerms` the learner decides, as it decided it."""
    seen = []

    def spy(*args, **kwargs):
        seen.append(sample_terms(*args, **kwargs))
        return seen[-1]

    sample_terms = learner_module.sample_terms
    monkeypatch.setattr(learner_module, "sample_terms", spy)
    return seen


def mean_token_weights(terms, mask):
    m = mask.bool()  # (N, T)
    return (terms.w * m).sum(dim=-1) / m.sum(dim=-1)  # (N,)


@pytest.mark.parametrize("share", [0.05, 0.5])
def test_the_aggregate_cap_on_recent_standing_holds_exactly(tiny_model, monkeypatch, share):
    """Two peers whose standing is one update old send groups at weight e^0.4 against this node's own group: their
    excess over 1 makes up at most `share` of the update's gradient weight, exactly when the cap binds."""
    cfg = LearnerConfig(lr=1e-12, max_recent_excess_share=share)
    learner = Learner(tiny_model, cfg=cfg, pad_id=0)
    own = ScoredGroup.vertical(sample_group(tiny_model, PROMPT, G=4, length=6, seed=1), [1, 0, 0, 1],
                               offpolicy=False, source=0, filterable=False)
    items = [own]
    for i, peer in enumerate(("peer-a", "peer-b"), start=1):
        learner.detector.observe(peer, 600.0, 600, overlap=600)  # standing, begun before this update
        g = shift_logp(sample_group(tiny_model, PROMPT, G=4, length=6, seed=10 + i, sender=peer), -0.4)
        items.append(peer_item(g, rewards=(1, 1, 0, 0), source=i))
    seen = captured_terms(monkeypatch)
    m = learner.update(items)
    batch = build_batch(items, pad_id=0, micro_batch=8)
    terms = seen[0]
    live = terms.adv_kept != 0  # (N,): own 4, two of each peer's
    peer = batch.filterable  # (N,)
    per_seq = mean_token_weights(terms, batch.mask)  # (N,)
    excess = ((terms.w - 1).clamp(min=0) * batch.mask).sum(dim=-1) / batch.mask.sum(dim=-1)  # (N,)
    total, recent_excess = float(per_seq[live].sum()), float(excess[live & peer].sum())
    uncapped_excess = 4 * (math.exp(0.4) - 1)  # before the cap: 4 live peer samples at e^0.4, a share of 0.197
    assert m["peers_with_recent_standing"] == 2.0 and m["frac_capped_unproven"] == 0.0
    if uncapped_excess / (8 + uncapped_excess) > share:  # 8 live samples: own 4, peers' 4
        assert recent_excess / total == pytest.approx(share, rel=1e-5)
        assert m["frac_recent_excess_scaled"] == pytest.approx(4 * 6 / (12 * 6))
    else:
        assert recent_excess == pytest.approx(uncapped_excess, rel=1e-4) and m["frac_recent_excess_scaled"] == 0.0
    assert torch.allclose(terms.w[:4], torch.ones(4, 6), atol=1e-4)  # own samples: untouched
    # once the standing is older than `recent_standing_updates`, the same update is not scaled
    old = Learner(tiny_model, cfg=cfg.model_copy(update={"recent_standing_updates": 0}), pad_id=0)
    for peer in ("peer-a", "peer-b"):
        old.detector.observe(peer, 600.0, 600, overlap=600)
    m_old = old.update(items)
    assert m_old["peers_with_recent_standing"] == 0.0 and m_old["frac_recent_excess_scaled"] == 0.0
    assert m_old["max_weight_used@1"] == pytest.approx(math.exp(0.4), rel=1e-4)


def test_old_checkpoint_state_loads_and_new_state_round_trips():
    """A checkpoint written before overlap was counted holds (sum, tokens) blocks: they load, count for the bound,
    and are no evidence of overlap; the first block that shows overlap gives standing back."""
    legacy = {"p": [[0.9 * 600, 600]], "q": [[0.5 * 10, 10], [0.7 * 600, 600]]}
    det = ForgeryDetector(C=C, delta=DELTA, window=4096, overlap=0.25, overlap_block=0.15)
    det.load_state(json.loads(json.dumps(legacy)))
    assert det.tokens("p") == 600 and det.upper_bound("p") < 1.25 and det.overlap_fraction("p") is None
    assert not det.has_standing("p") and det.standing_age("p") is None
    det.begin_update()
    det.observe("p", 0.9 * 50, 50, overlap=30)
    assert det.has_standing("p") and det.overlap_fraction("p") == 0.6 and det.standing_age("p") == 0
    bare = ForgeryDetector(C=C, delta=DELTA, window=4096)  # no overlap test: the old rule, the old standing
    bare.load_state(legacy)
    assert bare.has_standing("p") and bare.has_standing("q") and bare.standing_age("q") == 0
    det.begin_update()
    again = ForgeryDetector(C=C, delta=DELTA, window=4096, overlap=0.25, overlap_block=0.15)
    again.load_state(json.loads(json.dumps(det.state())))
    assert again.state() == det.state() and again.updates == 2 and again.standing_age("p") == 1
    assert again.has_standing("p") and not again.has_standing("q")


def test_the_newest_block_alone_ends_standing():
    """A block under q ends standing however long the honest window before it; the next honest block restores it,
    as a standing that begins again (its age restarts)."""
    det = ForgeryDetector(C=C, delta=DELTA, window=4096, overlap=0.25, overlap_block=0.15)
    for _ in range(20):
        det.begin_update()
        det.observe("p", 0.7 * 100, 100, overlap=50)
    assert det.has_standing("p") and det.standing_age("p") == 19  # earned with the first block (bound 1.24)
    det.begin_update()
    det.observe("p", 1.0 * 8, 8, overlap=1)  # 1/8 under the block's 0.15, the window still 0.49
    assert det.overlap_fraction("p") > 0.4 and not det.has_standing("p") and det.standing_age("p") is None
    det.begin_update()
    det.observe("p", 0.7 * 100, 100, overlap=50)
    assert det.has_standing("p") and det.standing_age("p") == 0
    with pytest.raises(ValueError, match="overlap"):
        ForgeryDetector(C=C, delta=DELTA, window=10, overlap_block=1.5)
    det.observe("p", 1.0, 4, overlap=5)  # more overlap than tokens: not evidence, ignored
    assert det.tokens("p") == 2108
