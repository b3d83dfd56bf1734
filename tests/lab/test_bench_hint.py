"""`ftis-node bench hint`: the selection with the pointers' hints against blind, on the same offers and budget."""

from __future__ import annotations

from typer.testing import CliRunner

from ftis_swarm.cli.main import app
from ftis_swarm.lab.bench.hint import run_hint_bench


def test_the_hint_doubles_the_useful_fraction_and_cuts_the_zero_signal_bytes_where_the_budget_binds():
    bench = run_hint_bench(rounds=4, publishers=4, groups=6, budget_groups=6, tokens=16, seed=1)
    hinted, blind = bench.hinted, bench.blind
    assert hinted.groups == blind.groups == 4 * 6 and hinted.samples == blind.samples == 4 * 6 * 4  # the same budget
    assert bench.offered_groups == 4 * 4 * 6 and bench.offered_mixed >= hinted.groups - hinted.zero_signal_groups
    assert hinted.useful_peer_frac >= 2 * blind.useful_peer_frac > 0
    assert hinted.zero_signal_bytes < blind.zero_signal_bytes


def test_a_budget_that_does_not_bind_is_refused_in_one_sentence():
    out = CliRunner().invoke(app, ["bench", "hint", "--publishers", "2", "--groups", "3", "--budget-groups", "6"])
    assert out.exit_code == 2 and "--budget-groups must be below the 6 groups offered a round" in out.output
