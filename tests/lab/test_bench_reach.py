"""`ftis-node bench reach`: its refusals of bad flags and its table (the NAT run itself: tests/swarm/test_swarm_nat.py)."""

from __future__ import annotations

import subprocess
import sys

from ftis_swarm.lab.bench.reach import ReachArm, ReachBench, format_reach, puzzle_seconds
from ftis_swarm.lab.bench.reach_bootstrap import BootstrapPhase, format_bootstrap_phase
from ftis_swarm.lab.bench.reach_punch import PunchBench, PunchRun, format_punch_phase
from ftis_swarm.lab.bench.reach_relay import RelayPart, RelayPhase, format_relay_phase

CLI = [sys.executable, "-m", "ftis_swarm.cli", "bench", "reach"]


def test_bench_reach_refuses_bad_flags_in_one_sentence() -> None:
    for flags in (["--rounds", "0"], ["--groups", "17"], ["--size", "10"], ["--round-deadline", "0"],
                  ["--phase", "moon"], ["--phase", "bootstrap", "--nodes", "2"], ["--phase", "punch", "--runs", "0"],
                  ["--phase", "punch", "--variant", "moon"]):
        proc = subprocess.run(CLI + flags, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2, (flags, proc.stderr)
        assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1, proc.stderr


def _arm(mode: str, home_share: float, boot_bytes: float) -> ReachArm:
    pairs = ["pub->home1", "pub->home2", "home1->pub", "home1->home2", "home2->pub", "home2->home1"]
    share = {p: (home_share if "pub" not in p else 1.0) for p in pairs}
    return ReachArm(mode=mode, share=share, p50_ms={"public->home": 50.0, "home->public": 60.0,
                                                    "home->home": 70.0 if home_share else None},
                    joined_s={"pub": 3.0, "home1": 4.0, "home2": 5.0}, relay_slot={"pub": False, "home1": mode != "client",
                                                                                     "home2": mode != "client"},
                    first_fetchable_s={"home1": 9.5 if home_share else None, "home2": None},
                    faults={"home1": {"fetch_failed": 2} if not home_share else {}, "home2": {}, "pub": {}},
                    modes={"pub": "public", "home1": mode, "home2": mode},
                    boot_bytes_per_round=boot_bytes, pub_bytes_per_round=1024.0)


def test_the_table_puts_each_arm_beside_the_client_baseline() -> None:
    text = format_reach(ReachBench(rounds=3, groups=2, size=32768, arms=[_arm("client", 0.0, 2048.0),
                                                                         _arm("relayed", 0.5, 5120.0)]))
    lines = text.splitlines()
    assert "home1->home2          0%       50%" in lines
    assert any(line.startswith("p50 home->home") and line.endswith("70ms") and " - " in line for line in lines)
    assert "home1 first        never      9.5s" in lines and "home2 first        never     never" in lines
    assert "relayed: bootstrap 5 KiB/round (2.50x the baseline's), P 1 KiB/round" in lines
    assert "client: faults home1 {'fetch_failed': 2}" in lines
    assert "homes direct         0/1       0/1" in lines


def test_the_punch_phase_counts_direct_home_pairs_per_variant_and_the_round_the_first_came() -> None:
    def run(variant: str, direct_after: list[bool], direct_kib: float) -> PunchRun:
        return PunchRun(variant=variant, direct_after=direct_after, share=1.0, direct_kib_per_round=direct_kib,
                        boot_kib_per_round=300.0 - direct_kib, connections={})
    lines = format_punch_phase(PunchBench(rounds=3, groups=2, size=32768, runs=[
        run("as-built", [False] * 3, 0.0), run("observers+drop", [False, True, True], 120.0),
        run("observers+drop", [True] * 3, 128.0)])).splitlines()
    assert "as-built             1     0/1          -   100%            0        300" in lines
    assert "observers+drop       1     1/1          1   100%          120        180" in lines
    assert "observers+drop       2     1/1          0   100%          128        172" in lines
    assert "observers+drop: direct         2/2 home pairs" in lines and "as-built: direct           0/1 home pairs" in lines


def test_the_bootstrap_phase_says_never_for_a_node_that_missed_a_peer_and_counts_the_last_round() -> None:
    text = format_bootstrap_phase(BootstrapPhase(
        nodes=3, rounds=4, joined_s=12.34, see_all_s=[1.5, None, 2.25], rounds_after_kill=[4, 3, 4],
        newcomer_joined_s={"through a live node": 9.0, "dead bootstrap first": 11.5},
        last_round_complete=[True, True, False, True, True]))
    lines = text.splitlines()
    assert "saw every other, s     1.50, never, 2.25  (from round 0's start; one swarm when none is never)" in lines
    assert "bootstrap SIGKILLed; rounds with every other node's groups, per node: [4, 3, 4] of 4" in lines
    assert "newcomer, dead bootstrap first   joined in 11.5 s" in lines
    assert lines[-1] == "round after they joined: 4 of 5 nodes had every other node's groups"


def test_the_relay_phase_puts_the_attacked_part_beside_the_baseline_and_the_cut_circuits() -> None:
    phase = RelayPhase(rounds=2, groups=2, size=32768, data_limit=1 << 20, max_circuits=4,
                       baseline=RelayPart({"home1->home2": 1.0, "home2->home1": 1.0}, 4096.0),
                       attacked=RelayPart({"home1->home2": 0.75, "home2->home1": 1.0}, 40960.0),
                       circuits=3, refused=2, errors={"ConnectionResetError": 2}, written=5 << 20,
                       per_stream=[1000, 3000, 2000], delivered_per_round=3072.0, round_s=1.5)
    lines = format_relay_phase(phase).splitlines()
    assert "home1->home2                  100%         75%" in lines
    assert "bootstrap KiB/round              4          40" in lines
    assert ("pusher: 3 circuits, 2 cut or refused, 5.0 MiB written; the sink read 0.0 MiB, 3 KiB per round of "
            "1.5 s (2 KiB/s); per stream max 3000 B, median 2000 B") in lines


def test_the_auto_arm_adds_the_control_home_and_every_node_s_mode() -> None:
    auto = _arm("relayed", 1.0, 4096.0)
    auto.mode, auto.modes = "auto", {"pub": "public", "home1": "relayed", "home2": "relayed", "home3": "public"}
    auto.share = {**auto.share, "home3->home1": 1.0}
    auto.joined_s, auto.relay_slot = {**auto.joined_s, "home3": 6.0}, {**auto.relay_slot, "home3": False}
    lines = format_reach(ReachBench(rounds=3, groups=2, size=32768, arms=[_arm("client", 0.0, 2048.0), auto])).splitlines()
    assert "home3->home1           -      100%" in lines
    assert "home3 mode             -    public" in lines and "home1 mode        client   relayed" in lines
    assert "home3 joined           -      6.0s" in lines


def test_the_puzzle_s_seconds_come_from_the_worker_s_log_lines(tmp_path) -> None:
    log = tmp_path / "relayed-home2.log"
    log.write_text("2026-12-03 14:16:19,903 INFO ftis_swarm.swarm.identity: created identity /tmp/x/identity.key\n"
                   "Traceback (most recent call last): not a logging line\n"
                   "2026-12-03 14:16:35,687 INFO ftis_swarm.swarm.puzzle: solved this identity's puzzle for run r "
                   "in 145 tries, 7.4 CPU s\n")
    assert abs(puzzle_seconds(log) - 15.784) < 1e-6
    with log.open("a") as more:  # an auto node's second identity: the one after its dial-back probe
        more.write("2026-12-03 14:16:40,000 INFO ftis_swarm.swarm.identity: created identity /tmp/y/identity.key\n"
                   "2026-12-03 14:16:42,500 INFO ftis_swarm.swarm.puzzle: solved this identity's puzzle for run r\n")
    assert abs(puzzle_seconds(log) - 18.284) < 1e-6
    log.write_text("2026-12-03 14:16:19,903 INFO ftis_swarm.swarm.identity: created identity /tmp/x/identity.key\n")
    assert puzzle_seconds(log) is None and puzzle_seconds(tmp_path / "missing.log") is None
