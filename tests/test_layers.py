"""The layering of STYLE.md, held by the import-linter contracts in pyproject.toml."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_hold():
    lint = Path(sys.executable).parent / "lint-imports"
    proc = subprocess.run([str(lint), "--config", str(ROOT / "pyproject.toml")], cwd=ROOT, capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "Contracts: 7 kept, 0 broken." in proc.stdout


def test_help_imports_no_heavy_package_and_is_fast():
    code = ("import sys, time; t = time.perf_counter(); sys.argv = ['ftis-node', '--help']\n"
            "from ftis_swarm.cli.main import app\n"
            "try:\n    app()\nexcept SystemExit:\n    pass\n"
            "heavy = [m for m in ('torch', 'transformers', 'hivemind', 'vllm', 'numpy') if m in sys.modules]\n"
            "print('HEAVY', heavy, time.perf_counter() - t)")

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout

    line = next(ln for ln in out.splitlines() if ln.startswith("HEAVY"))
    assert line.startswith("HEAVY []"), line
    assert "join" in out and "bootstrap" in out and "testnet" in out
