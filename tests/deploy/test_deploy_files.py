"""deploy/: the compose file parses, every service runs a valid ftis-node command, images have their entry point.

No Docker engine runs here, so the images are not built; what can be checked without one is.
"""

from __future__ import annotations

import json
import re

from pathlib import Path

import pytest
import typer.main
import yaml
from typer.testing import CliRunner

from ftis_swarm.cli.main import app
from ftis_swarm.config import tomllib

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "deploy" / "docker-compose.yml").read_text())


def test_compose_has_a_bootstrap_and_three_nodes_with_volumes_healthchecks_restarts():
    services = COMPOSE["services"]
    assert set(services) == {"bootstrap", "node-full", "node-lora", "node-mini"}
    for name, svc in services.items():
        assert svc["restart"] == "unless-stopped"
        assert svc["healthcheck"]["test"]
        mounts = {v.split(":")[1] for v in svc["volumes"]}
        assert "/identity" in mounts and "/shared" in mounts
        if name != "bootstrap":
            assert "/runs" in mounts
            assert "9100/metrics" in " ".join(svc["healthcheck"]["test"])
            assert svc["depends_on"]["bootstrap"]["condition"] == "service_healthy"
    named = {v.split(":")[0] for svc in services.values() for v in svc["volumes"]}
    assert named <= set(COMPOSE["volumes"])


@pytest.mark.parametrize("name", ["node-full", "node-lora", "node-mini"])
def test_node_commands_are_valid_join_invocations(name):
    args = COMPOSE["services"][name]["command"]
    result = CliRunner().invoke(app, args + ["--print-config"])
    assert result.exit_code == 0, result.output
    cfg = json.loads(result.output)
    assert cfg["swarm"]["peers_file"] == "/shared/bootstrap.maddrs"
    assert cfg["metrics_port"] == 9100 and cfg["metrics_host"] == "0.0.0.0"
    assert cfg["swarm"]["identity"] == "/identity/node.key"
    assert (cfg["learner"]["lora"] is not None) == (name == "node-lora")


def test_bootstrap_command_parses_and_shares_its_address_file():
    args = COMPOSE["services"]["bootstrap"]["command"]
    command = typer.main.get_command(app)
    sub = command.get_command(command.make_context("ftis-node", list(args)), args[0])
    ctx = sub.make_context("bootstrap", list(args[1:]))
    assert ctx.params["port"] == 31337 and str(ctx.params["maddrs_file"]) == "/shared/bootstrap.maddrs"
    health = COMPOSE["services"]["bootstrap"]["healthcheck"]["test"]
    assert health[-1] == "/shared/bootstrap.maddrs"


def test_a_broken_command_would_be_caught():
    result = CliRunner().invoke(app, ["join", "--rounds", "0", "--print-config"])
    assert result.exit_code == 2 and "rounds" in result.output


@pytest.mark.parametrize("dockerfile", ["Dockerfile", "Dockerfile.cuda"])
def test_images_entry_point_is_the_installed_script(dockerfile):
    text = (ROOT / "deploy" / dockerfile).read_text()
    entry = json.loads(re.search(r"^ENTRYPOINT (\[.*\])$", text, re.M).group(1))
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert entry == ["ftis-node"] and scripts["ftis-node"] == "ftis_swarm.cli.main:main"
    for src in re.findall(r"^COPY (\S+)", text, re.M):
        assert (ROOT / src).exists(), src
    assert "deploy/setup.sh" in text and (ROOT / "deploy" / "setup.sh").is_file()


@pytest.mark.slow
def test_gpu_recipe_dry_run_plans_both_learners_and_prints_the_harness_command(tmp_path):
    import os
    import subprocess
    import sys

    shim = tmp_path / "bin" / "ftis-node"  # the recipe calls `ftis-node`; here it is this checkout's CLI
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} -m ftis_swarm.cli "$@"\n')
    shim.chmod(0o755)
    env = dict(os.environ, PATH=f"{shim.parent}:{os.environ['PATH']}", DRY_RUN="1", SHORT="1", OUT=str(tmp_path / "o"),
               PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.run(["bash", str(ROOT / "docs" / "gpu_recipe.sh")], capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "A: peak" in proc.stderr and "B: peak" in proc.stderr and "fits" in proc.stderr
    command = proc.stderr.splitlines()[-1]
    assert command.startswith("+ ftis-node experiment ") and "--eval-task math500" in command
    assert "--rounds 10 " in command and "--arms solo,vertical-ftis " in command
