"""The GPU check script's CPU dry run: it imports, and its steps pass on a tiny model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "gpu" / "check_gpu.py"


@pytest.mark.slow
def test_gpu_check_dry_run_passes_on_cpu(tmp_path) -> None:
    out = tmp_path / "gpu.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "cpu", "--prompts", "2", "--group-size", "2",
         "--max-new-tokens", "6", "--skip-vllm", "--json", str(out)],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    checks = json.loads(out.read_text())["checks"]
    assert all(c["ok"] for c in checks.values())
    assert checks["build"]["size"] == "tiny"
    assert checks["transformers.throughput"]["tokens"] == 2 * 2 * 6
    assert checks["transformers.parity_same_device"]["max_abs_diff"] < 1e-4
    assert checks["learner.step"]["grad_norm"] > 0
    assert checks["transformers.serves_stepped_weights"]["stale_max_abs_diff"] > 1e-3
    assert checks["vllm"]["status"] == "skipped"

