"""`bench hostile --phase have-flood` through the real CLI at a tiny size: its figures and its refusals."""

from __future__ import annotations

import json
import subprocess
import sys

from ftis_swarm.lab.bench.have_flood import FloodRun, HaveFloodBench, format_have_flood
from ftis_swarm.swarm.fetch.holders import MAX_GROUPS_PER_HOLDER, MAX_HELD_GROUPS

CLI = [sys.executable, "-m", "ftis_swarm.cli", "bench", "hostile", "--phase", "have-flood"]


def test_a_small_have_flood_fills_the_book_to_its_bounds_and_reports_both_runs(tmp_path):
    out = tmp_path / "have_flood.json"
    ids, holders = 6000, 10  # 600 ids an identity: past its cap; 5,120 kept of them and 512 honest: past the bound
    proc = subprocess.run(CLI + ["--have-ids", str(ids), "--have-holders", str(holders), "--json", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    fig = json.loads(out.read_text())
    assert (fig["phase"], fig["flood_ids"], fig["flood_holders"], fig["polls"]) == ("have-flood", ids, holders, 2)
    base, flood = fig["runs"]
    assert (base["name"], base["haves"], base["ids"]) == ("no flood", 8, 8 * 64)
    assert (base["groups"], base["honest_known"], base["over_cap"]) == (512, 512, 0)
    assert flood["haves"] == 8 + holders * 10 and flood["ids"] == ids + 8 * 64  # 600 ids in 10 haves each
    assert flood["groups"] == MAX_HELD_GROUPS and flood["most_named"] == MAX_GROUPS_PER_HOLDER
    assert flood["over_cap"] == ids - holders * MAX_GROUPS_PER_HOLDER
    assert 0 < flood["honest_known"] <= flood["honest_named"] == 512
    assert flood["loop_s"] > 0 and base["loop_s"] > 0
    table = proc.stdout.splitlines()
    assert table[0].startswith(f"have flood: {ids:,} random group ids in haves of 64 from {holders} identities")
    assert [line.split()[0] for line in table[2:4]] == ["no", "flood"]


def test_the_table_gives_the_flood_against_the_baseline_and_the_deadline():
    def run(name: str, loop_s: float, ids: int) -> FloodRun:
        return FloodRun(name=name, haves=ids // 64, ids=ids, loop_s=loop_s, wall_s=loop_s, groups=min(ids, 4096),
                        most_named=64, over_cap=0, honest_known=512, honest_named=512)

    bench = HaveFloodBench(flood_ids=99_488, flood_holders=20, honest=8, deadline=2.0, polls=2, repeats=3,
                           runs=[run("no flood", 0.002, 512), run("flood", 0.5, 100_000)])
    flood = format_have_flood(bench).splitlines()[3].split()
    assert flood[4:8] == ["0.500", "250.0", "25.0%", "5.0"]  # loop s, against the base, of the deadline, us per id


def test_bad_have_flood_flags_are_refused_in_one_sentence():
    for flags in (["--have-ids", "0"], ["--have-holders", "1001"], ["--round-deadline", "0"]):
        proc = subprocess.run(CLI + flags, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2, (flags, proc.stderr)
        assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1, proc.stderr
