"""`bench hostile`'s crowd phases (`lab/bench/crowd_phases.py`): a crowd of identities, each its own p2pd on its own
origin, against the tiny preset's 3 real nodes; the table's figures are counted from what each node took."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from record_peers import PUZZLE

from ftis_swarm.cli.lab.bench_swarm import CROWD_PHASES
from ftis_swarm.lab.bench.crowd_phases import (
    PHASES,
    _copy,
    crowd_hosts,
    format_crowd_phases,
    recovered_by,
    run_crowd_phases,
)
from ftis_swarm.wire import Group

ROUNDS = 3


def _group() -> Group:
    return Group.build(run_id="r", sender="honest", model_id="m", policy_version=0, created_at=1.0, tokenizer_fp="fp",
                       task_id="arith", item_id="arith/v1/s0/1", prompt_ids=[1, 2], temperature=1.0,
                       completion_ids=[[3, 4], [5]], logp_gen=[[-1.0, -2.0], [-0.5]])


def test_copies_differ_from_the_original_by_the_sender_and_a_near_copy_by_one_ulp():
    g = _group()
    exact, near = _copy(g, "copier", near=False), _copy(g, "copier", near=True)
    assert exact.sender == near.sender == "copier" and exact.group_id != g.group_id
    assert all(np.array_equal(a, b) for a, b in zip(exact.logp_gen, g.logp_gen))
    assert all(np.array_equal(a, b) for a, b in zip(near.completion_ids, g.completion_ids))
    assert near.logp_gen[0][0] == np.nextafter(np.float32(-1.0), np.float32(-np.inf)) != g.logp_gen[0][0]
    assert np.array_equal(near.logp_gen[0][1:], g.logp_gen[0][1:]) and np.array_equal(near.logp_gen[1], g.logp_gen[1])
    assert g.logp_gen[0][0] == np.float32(-1.0)  # the original untouched


def test_the_crowd_has_one_origin_per_identity():
    hosts = crowd_hosts(20)
    assert hosts[0] == "127.0.10.1" and hosts[-1] == "127.0.29.1"
    assert len({h.rsplit(".", 1)[0] for h in hosts}) == 20
    with pytest.raises(ValueError):
        crowd_hosts(201)


def test_a_phase_that_is_not_one_is_refused_in_one_sentence():
    assert CROWD_PHASES == PHASES
    out = subprocess.run([sys.executable, "-m", "ftis_swarm.cli", "bench", "hostile", "--phase", "credit,bogus"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "--phase must be" in out.stderr + out.stdout


@pytest.mark.slow
@pytest.mark.net
def test_a_credit_crowd_of_4_origins_against_the_tiny_testnet(tmp_path):
    bench = run_crowd_phases(phases=("credit",), crowd=4, rounds=ROUNDS, per_worker=2, workdir=tmp_path,
                             puzzle=PUZZLE)
    text = format_crowd_phases(bench)
    base, credit = bench.phases
    assert (base.phase, credit.phase) == ("baseline", "credit"), text
    assert base.crowd_published == 0 and credit.crowd_published + credit.crowd_failed == 4 * ROUNDS, text
    for i in range(3):
        metrics = [json.loads(line) for line in (tmp_path / f"node{i}" / "metrics.jsonl").read_text().splitlines()]
        rounds = [m for m in metrics if m.get("round", 0) >= 1 and "peer_groups" in m]
        assert len(rounds) == 2 * ROUNDS, text
        # every group a node took is an honest node's or the crowd's, as its own metric counts them
        for ph, rows in ((base, rounds[:ROUNDS]), (credit, rounds[ROUNDS:])):
            n = ph.nodes[i]
            assert n.rounds == ROUNDS and n.peer_groups == sum(int(m["peer_groups"]) for m in rows), text
            assert n.honest_groups + n.crowd_groups == n.peer_groups, text
            assert 0.0 <= n.crowd_share <= 1.0 and n.crowd_tokens <= n.peer_tokens, text
            assert 0 <= n.empty_rounds <= n.offered_rounds <= ROUNDS and n.p2pd_mb > 0, text
        assert base.nodes[i].crowd_groups == 0 and base.nodes[i].honest_bans == 0, text
    assert sum(n.crowd_groups for n in credit.nodes) > 0, text  # the crowd's groups reached updates
    assert sum(n.honest_groups for n in base.nodes) > 0, text
    assert "  credit     0" in text and "crowd share" in text


def test_recovery_is_the_round_from_which_honest_groups_stay_near_the_baseline():
    # baseline 4 a round: 75% is 3; a mean over 3 rounds (fewer at the end)
    assert recovered_by([0, 0, 4, 4, 4, 4], 4.0) == 3
    assert recovered_by([0, 1, 4, 4, 4, 4], 4.0) == 2  # 1, 4, 4: a mean of 3
    assert recovered_by([4, 4, 4, 4], 4.0) == 1
    assert recovered_by([0, 4, 4, 4, 0, 0], 4.0) is None  # falls back below at the end
    assert recovered_by([0, 2, 3, 4, 3], 4.0) == 2  # means 3.0, 3.33, 3.5, 3.0 from round 2
    assert recovered_by([], 4.0) is None
