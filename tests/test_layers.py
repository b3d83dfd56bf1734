"""The layering of STYLE.md, held by the import-linter contracts in pyproject.toml (which name
every package of the product and of the lab), who imports hivemind (as docs/architecture.md
says), no import circle inside a package of the product or the lab, and imports in order
(ruff's isort rule, `[tool.ruff]` in pyproject.toml)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grimp
import tomllib

ROOT = Path(__file__).resolve().parents[1]
PRODUCT_PACKAGES = ("cli", "ops", "node", "rollout", "learner", "swarm", "peers", "wire", "tasks", "metrics",
                    "models", "core", "config")


def import_circles(package: str, inside: tuple[str, ...]) -> list[list[str]]:
    """For each direct import `a -> b` between modules of one of `inside` (subpackages of `package`)
    with a chain of imports back from `b` to `a`: that circle, `[a, b, ..., a]`. Imports made
    inside functions and under TYPE_CHECKING count: each is an arrow a reader has to follow."""
    graph = grimp.build_graph(package, cache_dir=None)
    circles = []
    for sub in inside:
        prefix = f"{package}.{sub}"
        modules = {m for m in graph.modules if m == prefix or m.startswith(prefix + ".")}
        for a in sorted(modules):
            for b in sorted(graph.find_modules_directly_imported_by(a) & modules):
                back = graph.find_shortest_chain(importer=b, imported=a)
                if back is not None:
                    circles.append([a, *back])
    return circles


def test_import_contracts_hold():
    lint = Path(sys.executable).parent / "lint-imports"
    proc = subprocess.run([str(lint), "--config", str(ROOT / "pyproject.toml")], cwd=ROOT, capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "Contracts: 8 kept, 0 broken." in proc.stdout


def test_imports_are_in_order():
    ruff = Path(sys.executable).parent / "ruff"
    proc = subprocess.run([str(ruff), "check", "--no-cache", "ftis_swarm", "tests", "deploy"], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 0, (proc.stdout[-3000:] + proc.stderr[-2000:]
                                  + "\nrun: .venv/bin/ruff check --fix ftis_swarm tests deploy")


def test_every_package_of_the_product_and_the_lab_is_a_layer_of_a_contract():
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    layered = {m.strip() for c in contracts if c["type"] == "layers" for layer in c["layers"] for m in layer.split("|")}
    packages = {f"ftis_swarm.{p.parent.name}" for p in (ROOT / "ftis_swarm").glob("*/__init__.py")}
    packages |= {f"ftis_swarm.lab.{p.parent.name}" for p in (ROOT / "ftis_swarm/lab").glob("*/__init__.py")}
    assert "ftis_swarm.lab.bench" in packages and "ftis_swarm.swarm" in packages
    assert sorted(packages - layered) == []


def test_hivemind_is_imported_by_the_swarm_the_hostile_peer_and_two_benches_alone():
    graph = grimp.build_graph("ftis_swarm", include_external_packages=True, cache_dir=None)
    importers = graph.find_modules_that_directly_import("hivemind")

    outside = {m for m in importers if not m.startswith(("ftis_swarm.swarm.", "ftis_swarm.lab.hostile."))}

    assert outside == {"ftis_swarm.lab.bench.have_flood", "ftis_swarm.lab.bench.storage_memory"}
    assert "ftis_swarm.swarm.client" in importers and "ftis_swarm.lab.hostile.peer" in importers


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


def test_no_package_of_the_product_has_an_import_circle():
    assert import_circles("ftis_swarm", PRODUCT_PACKAGES) == []


def test_the_lab_has_no_import_circle():
    assert import_circles("ftis_swarm", ("lab",)) == []


def test_the_circle_check_finds_a_circle(tmp_path, monkeypatch):
    pkg = tmp_path / "circled"
    (pkg / "inner").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "inner" / "__init__.py").write_text("")
    (pkg / "inner" / "a.py").write_text("from circled.inner import b\n")
    (pkg / "inner" / "b.py").write_text("def f():\n    from circled.inner.c import g\n")
    (pkg / "inner" / "c.py").write_text("import circled.inner.a\n")
    (pkg / "free.py").write_text("import circled.inner.a\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    circles = import_circles("circled", ("inner",))

    assert sorted(map(tuple, circles)) == [
        ("circled.inner.a", "circled.inner.b", "circled.inner.c", "circled.inner.a"),
        ("circled.inner.b", "circled.inner.c", "circled.inner.a", "circled.inner.b"),
        ("circled.inner.c", "circled.inner.a", "circled.inner.b", "circled.inner.c"),
    ]
    assert import_circles("circled", ("free",)) == []
