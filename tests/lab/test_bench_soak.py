"""`bench soak`'s parts: the fitted growth after the warm-up, and what /proc says of a process."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ftis_swarm.lab.bench.soak import fitted_growth, warm_up_end
from ftis_swarm.metrics.procstat import open_fds, status_mb, with_children


def test_fitted_growth_ignores_the_warm_up_and_measures_a_steady_leak():
    times = [float(t) for t in range(100)]
    warm_then_flat = [50.0 + t if t < 30 else 80.0 for t in range(100)]  # grows while warming up, then stays
    flat = fitted_growth(times, warm_then_flat, since=30.0)
    assert flat.growth == pytest.approx(0.0) and flat.first == pytest.approx(80.0) and flat.peak == 80.0
    leak = [100.0 + 0.5 * t for t in range(100)]  # half a unit a second, for the whole run
    steady = fitted_growth(times, leak, since=30.0)
    assert steady.first == pytest.approx(115.0) and steady.last == pytest.approx(149.5)
    assert steady.growth == pytest.approx(34.5 / 115.0)
    noisy = [80.0 + (3.0 if t % 2 else -3.0) for t in range(100)]  # jitter is not growth
    assert abs(fitted_growth(times, noisy, since=30.0).growth) < 0.01
    with pytest.raises(ValueError, match="too few"):
        fitted_growth(times, leak, since=99.5)


def test_warm_up_waits_for_every_nodes_first_optimiser_step():
    def node(start: float, first_update: float | None) -> list[dict]:
        return [{"time": start + t, "policy_version": int(first_update is not None and start + t >= first_update)}
                for t in range(0, 400, 2)]
    # one TTL after the earliest first round when every node updated before that
    assert warm_up_end([node(10.0, 20.0), node(12.0, 30.0)], ttl=30.0) == 40.0
    # the latest first update when later (AdamW's state appears then); a node that never updates does not count
    assert warm_up_end([node(10.0, 258.0), node(12.0, 100.0), node(11.0, None)], ttl=30.0) == 258.0
    assert warm_up_end([node(10.0, None), node(11.0, None)], ttl=30.0) == 40.0


def test_proc_figures_of_a_child_process():
    child = subprocess.Popen([sys.executable, "-c", "import time; fs = [open('/dev/null') for _ in range(40)]; "
                                                    "time.sleep(30)"])
    try:
        deadline = 100
        while open_fds(child.pid) < 40 and deadline:
            deadline -= 1
            subprocess.run(["sleep", "0.1"])
        assert open_fds(child.pid) >= 40  # stdin/out/err and the 40 files it opened
        assert 1.0 < status_mb(child.pid, "VmRSS") <= status_mb(child.pid, "VmHWM")
        named = with_children({"me": os.getpid()})
        assert named["me"] == os.getpid() and child.pid in {pid for name, pid in named.items() if name.startswith("me/")}
    finally:
        child.kill()
        child.wait()
    assert open_fds(child.pid) == 0 and status_mb(child.pid, "VmRSS") == 0.0


def test_bench_soak_refuses_bad_flags():
    proc = subprocess.run([sys.executable, "-m", "ftis_swarm.cli", "bench", "soak", "--rounds", "1"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.strip() == "error: --rounds must be at least 2 (got 1)"

