"""The compose testnet built and run for real: deploy/compose_check.sh, its figures asserted here.

Marked `docker` (and `slow`): it installs or finds an engine, builds the images and runs the testnet
for 25-40 minutes on 2 cores, more than CI's budget allows, so deploy/test.sh deselects it; run it
with `pytest -m docker tests/deploy` or `bash deploy/compose_check.sh` (docs/deploy.md).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
NODES = {"node-full", "node-lora", "node-slim"}


def test_the_compose_testnet_learns_is_scraped_resumes_and_leaves_nothing_behind():
    proc = subprocess.run(["bash", str(ROOT / "deploy" / "compose_check.sh")], capture_output=True, text=True,
                          timeout=3 * 3600)
    tail = (proc.stdout + proc.stderr)[-6000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert proc.returncode == 0 and summary["failed"] is None, tail
    assert set(summary["first_round_s"]) == NODES
    assert all(summary["rounds"][n] >= 1 and summary["peer_groups_used"][n] > 0 for n in NODES), summary
    assert summary["targets"] == {f"{n}:9100": "up" for n in NODES}
    assert {n for n, r in summary["resumed"].items() if r["next_round"] == r["checkpoint"] + 1} == NODES
    board = json.loads((ROOT / "deploy" / "grafana" / "dashboards" / "ftis-node.json").read_text())
    assert len(summary["query_series"]) == sum(len(p["targets"]) for p in board["panels"])
