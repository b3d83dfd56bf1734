"""The forgery detector: the Hoeffding bound's numbers, its window, and honest samplers against forgers."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from ftis_swarm.learner.forgery import ForgeryDetector, hoeffding_bound

C, DELTA = 2.0, 1e-6


def test_bound_values():
    assert hoeffding_bound(28, C=C, delta=DELTA) == pytest.approx(1 + 2 * math.sqrt(math.log(1e6) / 56))
    assert hoeffding_bound(27, C=C, delta=DELTA) > C > hoeffding_bound(28, C=C, delta=DELTA)
    assert hoeffding_bound(0, C=C, delta=DELTA) == math.inf


def test_a_forger_at_the_cap_is_flagged_at_its_28th_token_in_one_block():
    det = ForgeryDetector(C=C, delta=DELTA, window=4096)
    assert not det.observe("p", 27 * C, 27).flagged
    assert ForgeryDetector(C=C, delta=DELTA, window=4096).observe("p", 28 * C, 28).flagged
    # one token a block: 35 checks' worth of delta split over the blocks, so the 35th token
    flags = [det.observe("q", C, 1).flagged for _ in range(40)]
    assert flags.index(True) == 34 and all(flags[34:])


def test_a_turncoat_is_caught_by_the_newest_blocks():
    """2,000 honest tokens, then forged groups: the window's mean stays under its bound for
    dozens of groups, the newest two blocks' do not."""
    det = ForgeryDetector(C=C, delta=DELTA, window=4096)
    for _ in range(25):
        assert not det.observe("p", 0.6 * 80, 80).flagged
    first = det.observe("p", 1.5 * 80, 80)
    second = det.observe("p", 1.5 * 80, 80)
    assert not first.flagged and second.flagged and second.tokens == 160
    whole = (25 * 0.6 * 80 + 2 * 1.5 * 80) / (27 * 80)
    assert whole < hoeffding_bound(27 * 80, C=C, delta=DELTA)  # the whole window would not have flagged it


def test_the_window_forgets_old_blocks_and_keeps_at_least_the_newest():
    det = ForgeryDetector(C=C, delta=DELTA, window=100)
    det.observe("p", 2.0 * 60, 60)  # a forged block
    assert det.stat("p").flagged
    det.observe("p", 0.5 * 60, 60)
    assert det.stat("p").tokens == 120  # the older block still needed to hold 100 tokens
    det.observe("p", 0.5 * 60, 60)
    stat = det.stat("p")
    assert stat.tokens == 120 and stat.mean == pytest.approx(0.5) and not stat.flagged
    det.observe("p", 1.0 * 500, 500)  # one block over the window is kept whole
    assert det.stat("p").tokens == 500
    again = ForgeryDetector(C=C, delta=DELTA, window=100)
    again.load_state(det.state())
    assert again.stat("p") == det.stat("p")


def test_non_finite_or_empty_blocks_are_ignored():
    det = ForgeryDetector(C=C, delta=DELTA, window=100)
    det.observe("p", math.nan, 10)
    det.observe("p", 1.0, 0)
    assert det.stat("p").tokens == 0 and not det.stat("p").flagged


def sampled_values(rng, *, V: int, tokens: int, spread: float, shift: float = 0.0) -> np.ndarray:
    """min(pi_theta/pi_gen, C) at tokens drawn from pi_gen, the two random distributions over V
    ids a `spread` apart in logits; `shift` lowers the claimed log-prob (a forger: -3)."""
    out = []
    for _ in range(tokens):
        z_gen = rng.normal(0, 2.0, V)
        z_theta = z_gen + rng.normal(0, spread, V)
        p_gen, p_theta = np.exp(z_gen - z_gen.max()), np.exp(z_theta - z_theta.max())
        p_gen, p_theta = p_gen / p_gen.sum(), p_theta / p_theta.sum()
        a = rng.choice(V, p=p_gen)
        x = math.log(p_theta[a]) - (math.log(p_gen[a]) + shift)
        out.append(min(math.exp(x), C))
    return np.asarray(out)


@pytest.mark.parametrize("spread", [0.1, 0.5, 1.0])
def test_honest_samplers_are_never_flagged_and_a_minus_3_forger_at_once(spread):
    rng = np.random.default_rng(int(spread * 10))
    det = ForgeryDetector(C=C, delta=DELTA, window=4096)
    honest = sampled_values(rng, V=50, tokens=3000, spread=spread)
    assert honest.mean() <= 1.0 + 3 * honest.std() / math.sqrt(honest.size)
    for block in np.split(honest, 100):  # 100 checks of 30 tokens
        assert not det.observe("honest", float(block.sum()), block.size).flagged
    forged = sampled_values(rng, V=50, tokens=64, spread=spread, shift=-3.0)
    flags = [det.observe("forger", float(b.sum()), b.size).flagged for b in np.split(forged, 8)]
    assert any(flags[:8]), forged.mean()  # within 8 groups of 8 tokens


def test_standing_takes_a_few_hundred_honest_tokens_and_is_lost_by_forging():
    det = ForgeryDetector(C=C, delta=DELTA, window=4096, margin=0.25)
    assert not det.has_standing("p") and det.upper_bound("p") == math.inf
    det.observe("p", 1.0 * 440, 440)  # mean 1, one block: needs n > ln(1e6) / 2 * (2 / 0.25)^2 = 442
    assert not det.has_standing("p")
    det = ForgeryDetector(C=C, delta=DELTA, window=4096, margin=0.25)
    det.observe("p", 1.0 * 445, 445)
    assert det.has_standing("p") and det.upper_bound("p") == pytest.approx(1 + 2 * math.sqrt(math.log(1e6) / 890))
    lower = ForgeryDetector(C=C, delta=DELTA, window=4096, margin=0.25)
    lower.observe("q", 0.7 * 95, 95)  # a heterogeneous honest peer (mean 0.7) gets there sooner
    assert lower.has_standing("q")
    # forging after standing at weight 1.3, 20 tokens an update: never flagged, but the bound passes 1 + m
    for _ in range(3):
        det.observe("p", 1.3 * 20, 20)
    assert not det.stat("p").flagged and not det.has_standing("p")
    again = ForgeryDetector(C=C, delta=DELTA, window=4096, margin=0.25)
    again.load_state(json.loads(json.dumps(lower.state())))
    assert again.has_standing("q") and again.upper_bound("q") == lower.upper_bound("q")
