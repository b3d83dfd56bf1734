"""The forgery evidence pooled per origin: a strike split over identities of one origin is seen, honest
identities sharing an origin keep standing, relayed peers are judged alone, and the pools survive a resume."""

from __future__ import annotations

import json

import pytest

from ftis_swarm.learner.forgery import UNPOOLED, ForgeryDetector, hoeffding_bound
from ftis_swarm.swarm.origins import RELAYED

C, DELTA, WINDOW = 2.0, 1e-6, 4096
ORIGINS = {"h1": "10.0.0.0/24", "h2": "10.0.0.0/24", **{f"s{i}": "10.9.9.0/24" for i in range(4)},
           "r1": RELAYED, "r2": RELAYED}


def detector(origins: dict[str, str] | None = ORIGINS) -> ForgeryDetector:
    return ForgeryDetector(C=C, delta=DELTA, window=WINDOW, margin=0.25, overlap=0.25, overlap_block=0.15,
                           origin_of=None if origins is None else origins.get)


def honest(det: ForgeryDetector, peers: list[str], updates: int = 12, n: int = 96) -> None:
    """`updates` updates with one honest block each (mean 0.7, overlap 0.45) from every peer of `peers`."""
    for _ in range(updates):
        det.begin_update()
        for p in peers:
            det.observe(p, 0.7 * n, n, overlap=int(0.45 * n))


def strike(det: ForgeryDetector, peers: list[str], n: int = 25) -> list[bool]:
    """One update in which each of `peers` sends a strike block: mean 1.8, a fifth overlapping (over
    `overlap_block`); returns each block's own flag."""
    det.begin_update()
    return [det.observe(p, 1.8 * n, n, overlap=n // 5).flagged for p in peers]


def test_the_relayed_origin_is_the_swarms():
    assert UNPOOLED == {RELAYED}


def test_two_honest_identities_on_one_origin_keep_standing():
    det = detector()
    honest(det, ["h1", "h2"])
    assert det.has_standing("h1") and det.has_standing("h2")
    assert det.pool_of("h1") == "10.0.0.0/24" and sorted(det.members("10.0.0.0/24")) == ["h1", "h2"]
    pool = det.pool_stat("10.0.0.0/24")
    assert not pool.flagged and pool.mean == pytest.approx(0.7)
    assert pool.tokens == det.tokens("h1") + det.tokens("h2")  # one block an update, both identities' tokens in it


def test_a_strike_split_over_four_identities_of_one_origin_ends_all_their_standing():
    peers = [f"s{i}" for i in range(4)]
    alone = detector(None)  # the same evidence, each identity judged alone
    pooled = detector()
    for det in (alone, pooled):
        honest(det, peers)
        assert all(det.has_standing(p) for p in peers)
    assert strike(alone, peers) == [False] * 4 and strike(pooled, peers) == [False] * 4  # each under its bound
    assert all(alone.has_standing(p) for p in peers)  # alone, each keeps standing: weights up to C
    pool = pooled.pool_stat("10.9.9.0/24")
    assert pool.flagged and pool.tokens == 100 and pool.mean == pytest.approx(1.8)
    assert pool.mean > hoeffding_bound(100, C=C, delta=DELTA / len(pooled._pools["10.9.9.0/24"]))
    assert not any(pooled.has_standing(p) for p in peers)
    assert all(pooled.standing_age(p) is None for p in peers)
    # the honest origin next to it is untouched
    honest(pooled, ["h1", "h2"])
    assert pooled.has_standing("h1") and pooled.has_standing("h2")


def test_a_pooled_flag_takes_the_standing_of_every_identity_of_the_origin_until_it_clears():
    det = detector({**ORIGINS, "f1": "10.0.0.0/24", "f2": "10.0.0.0/24"})
    honest(det, ["h1", "h2", "f1", "f2"])
    det.begin_update()  # two identities at the cap, 27 tokens each: each under its own bound (28), the pool's 54 not
    assert [det.observe(p, C * 27, 27, overlap=0).flagged for p in ("f1", "f2")] == [False, False]
    assert det.pool_stat("10.0.0.0/24").flagged
    assert not any(det.has_standing(p) for p in ("h1", "h2", "f1", "f2"))  # the honest ones too: the same origin
    honest(det, ["h1", "h2"], updates=1)  # the next update honest: the flagged suffix is diluted, standing is back
    assert det.has_standing("h1") and det.has_standing("h2") and det.standing_age("h1") == 0
    assert not det.has_standing("f1")  # its own newest block still fails the overlap


def test_relayed_peers_are_judged_alone():
    det = detector()
    honest(det, ["r1", "r2"])
    det.begin_update()
    det.observe("r2", C * 27, 27, overlap=0)
    det.observe("r1", C * 27, 27, overlap=0)
    assert not det.stat("r1").flagged and not det.stat("r2").flagged  # 54 tokens at C together: alone, each unseen
    assert det.pool_of("r1") is None and det.pool_of("r2") is None and not det._pools
    honest(det, ["r1"], updates=1)
    assert det.has_standing("r1")  # a forger behind the same relay costs r1 nothing


def test_a_peer_the_transport_forgets_keeps_its_pool():
    origins = dict(ORIGINS)
    det = detector(origins)
    honest(det, ["h1", "h2"])
    del origins["h1"]  # disconnected: no origin known now
    assert det.pool_of("h1") == "10.0.0.0/24"
    det.begin_update()
    det.observe("h2", C * 40, 40, overlap=0)
    assert det.pool_stat("10.0.0.0/24").flagged and not det.has_standing("h1")


def test_the_pools_survive_a_resume_bit_exact():
    det = detector()
    honest(det, ["h1", "h2", "s0", "s1"], updates=4)
    strike(det, ["s0", "s1"], n=40)
    saved = json.loads(json.dumps(det.state()))
    again = detector()
    again.load_state(saved)
    assert again.state() == det.state()
    for d in (det, again):  # the same next update: within it, blocks join the origin's newest block
        d.begin_update()
        d.observe("h1", 0.61 * 50, 50, overlap=20)
        d.observe("s1", 0.5 * 30, 30, overlap=9)
    assert again.state() == det.state()
    assert {p: again.has_standing(p) for p in ORIGINS} == {p: det.has_standing(p) for p in ORIGINS}
    legacy = detector()  # a checkpoint written before pooling: no pools, every peer's own window kept
    legacy.load_state({k: v for k, v in saved.items() if k not in ("pools", "pooled_at", "origins")})
    assert legacy.stat("s0") == det.stat("s0") and not legacy._pools


def test_the_learner_pools_its_peers_by_origin(tiny_model, tiny_dir):
    """Through the real learner: two identities of one origin, groups the tiny model sampled itself (every ratio 1);
    the pool holds both identities' tokens, one block an update, and flags nothing."""
    from learner_samples import rebuilt, sample_group
    from transformers import AutoModelForCausalLM

    from ftis_swarm.config import LearnerConfig
    from ftis_swarm.learner.batch import ScoredGroup
    from ftis_swarm.learner.learner import Learner

    sampler = AutoModelForCausalLM.from_pretrained(tiny_dir)
    prompt = [151644, 872, 198, 18, 10, 19, 28]
    learner = Learner(tiny_model, cfg=LearnerConfig(), pad_id=0)
    learner.detector.origin_of = ORIGINS.get
    for seed in range(2):
        g = sample_group(sampler, prompt, G=4, length=8, seed=seed, sender="x")
        items = [ScoredGroup.vertical(rebuilt(g, sender=p), [0, 0, 0, 0], offpolicy=True, source=1, filterable=True)
                 for p in ("h1", "h2")]
        metrics = learner.update(items)
        assert metrics["origins_flagged"] == 0.0
    det = learner.detector
    assert det.pool_of("h1") == "10.0.0.0/24" and len(det._pools["10.0.0.0/24"]) == 2
    assert det.pool_stat("10.0.0.0/24").tokens == det.tokens("h1") + det.tokens("h2") == 2 * 2 * 32
    assert det.pool_stat("10.0.0.0/24").mean == pytest.approx(1.0, abs=1e-3)
