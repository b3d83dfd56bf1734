"""`ftis-node bench reach`: its refusals of bad flags and its table (the NAT run itself: tests/swarm/test_swarm_nat.py)."""

from __future__ import annotations

import subprocess
import sys

from ftis_swarm.lab.bench.reach import ReachArm, ReachBench, format_reach

CLI = [sys.executable, "-m", "ftis_swarm.cli", "bench", "reach"]


def test_bench_reach_refuses_bad_flags_in_one_sentence() -> None:
    for flags in (["--rounds", "0"], ["--groups", "17"], ["--size", "10"], ["--round-deadline", "0"]):
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
