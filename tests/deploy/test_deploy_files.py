"""deploy/: the compose file parses, every service runs a valid ftis-node command, images have their
entry point and take torch from a CPU index, the documented `docker run` keeps its state on volumes.

These tests need no Docker engine: the files parse, and every command they hold goes through the
real CLI. The images built and the testnet run for real: tests/deploy/test_compose_run.py
(`docker` marker, deploy/compose_check.sh).
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main
import yaml
from typer.testing import CliRunner

from ftis_swarm.cli.main import app
from ftis_swarm.config import tomllib

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "deploy" / "docker-compose.yml").read_text())


NODES = ("node-full", "node-lora", "node-slim", "node-gpu")
MONITORING = ("prometheus", "grafana")


def test_compose_has_a_bootstrap_cpu_nodes_and_a_gpu_node_with_volumes_healthchecks_restarts():
    services = COMPOSE["services"]
    assert set(services) == {"bootstrap", *NODES, *MONITORING}
    for name, svc in services.items():
        if name in MONITORING:  # tests/deploy/test_deploy_dashboard.py
            continue
        assert svc["healthcheck"]["test"]
        mounts = {v.split(":")[1] for v in svc["volumes"]}
        assert "/identity" in mounts and "/shared" in mounts
        if name == "bootstrap":
            assert svc["restart"] == "unless-stopped"
            continue
        assert svc["restart"] == "on-failure"  # a node that finished (exit 0) is not started again
        assert {"/runs", "/cache"} <= mounts
        assert "9100/metrics" in " ".join(svc["healthcheck"]["test"])
        assert svc["depends_on"]["bootstrap"]["condition"] == "service_healthy"
    named = {v.split(":")[0] for svc in services.values() for v in svc["volumes"] if not v.startswith("./")}
    assert named <= set(COMPOSE["volumes"])


def test_the_gpu_service_reserves_a_gpu_and_stays_out_of_a_plain_up():
    gpu = COMPOSE["services"]["node-gpu"]
    assert gpu["profiles"] == ["gpu"] and gpu["image"] == "ftis-swarm:cuda"
    assert gpu["build"]["dockerfile"] == "deploy/Dockerfile.cuda"
    (device,) = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"] and device["count"] == 1
    assert all("profiles" not in COMPOSE["services"][n] for n in NODES[:3])


@pytest.mark.parametrize("name", NODES)
def test_node_commands_are_valid_join_invocations(name):
    args = COMPOSE["services"][name]["command"]
    result = CliRunner().invoke(app, args + ["--print-config"])
    assert result.exit_code == 0, result.output
    cfg = json.loads(result.output)
    assert cfg["swarm"]["transport"]["peers_file"] == "/shared/bootstrap.maddrs"
    assert cfg["metrics_port"] == 9100 and cfg["metrics_host"] == "0.0.0.0"
    assert cfg["swarm"]["identity"] == "/identity/node.key" and cfg["run_dir"].startswith("/runs/")
    assert (cfg["learner"]["lora"] is not None) == (name == "node-lora")
    assert (cfg["backend"] == "vllm") == (name == "node-gpu")


def test_the_bootstrap_peer_clears_a_stale_address_file_as_it_starts(tmp_path):
    """A real `ftis-node bootstrap` process: the file an earlier run left is gone even when the start
    then fails (here on a damaged identity file), so a healthcheck never passes on a stale address."""
    stale = tmp_path / "bootstrap.maddrs"
    stale.write_text("/ip4/172.18.0.9/tcp/31337/p2p/QmGoneBootstrapPeer\n")
    identity = tmp_path / "bootstrap.key"
    identity.write_bytes(b"not a key")
    proc = subprocess.run([sys.executable, "-m", "ftis_swarm.cli", "bootstrap", "--host", "127.0.0.1",
                           "--identity", str(identity), "--maddrs-file", str(stale)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "is not a readable RSA libp2p key" in proc.stderr and "Traceback" not in proc.stderr
    assert not stale.exists()


def test_documented_docker_run_keeps_state_on_volumes_and_publishes_its_ports():
    text = (ROOT / "docs" / "deploy.md").read_text()
    block = re.search(r"^docker run -d .*?(?<!\\)\n", text, re.M | re.S).group(0)
    args = shlex.split(block.replace("\\\n", " "))
    image_at = args.index("ftis-swarm:cpu")
    opts, join_args = args[:image_at], args[image_at + 1:]
    volumes = {opts[i + 1].split(":")[1] for i, a in enumerate(opts) if a == "-v"}
    ports = {opts[i + 1] for i, a in enumerate(opts) if a == "-p"}
    assert {"/runs", "/cache", "/identity"} <= volumes
    result = CliRunner().invoke(app, join_args + ["--print-config"])
    assert result.exit_code == 0, result.output
    cfg = json.loads(result.output)
    assert f"{cfg['swarm']['transport']['port']}:{cfg['swarm']['transport']['port']}" in ports and "9100:9100" in ports
    assert cfg["swarm"]["identity"].startswith("/identity/") and cfg["run_dir"].startswith("/runs/")
    assert cfg["swarm"]["transport"]["host"] == "0.0.0.0" and cfg["metrics_host"] == "0.0.0.0"


def test_the_cpu_image_takes_torch_from_the_cpu_wheel_index_or_a_local_wheel():
    text = (ROOT / "deploy" / "Dockerfile").read_text()
    assert "ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu" in text
    assert re.search(r'TORCH_INDEX_URL="\$TORCH_INDEX_URL" .*bash deploy/setup.sh --runtime', text)
    # where the index is unreachable: a wheel in deploy/wheels/ (compose_check.py copies it there), found by
    # the same pattern the Dockerfile tests
    assert "PIP_FIND_LINKS=/wheels TORCH_INDEX_URL= bash deploy/setup.sh --runtime" in text
    assert "ls /wheels/torch-2.13.0+cpu-*.whl" in text and "COPY deploy/wheels/ /wheels/" in text
    for folder in ("wheels", "certs"):  # what compose_check.py puts there stays out of git
        assert (ROOT / "deploy" / folder / ".gitignore").read_text().splitlines()[-2:] == ["*", "!.gitignore"]
    assert "endswith('+cpu')" in text  # the build fails rather than ship a CUDA torch
    setup = (ROOT / "deploy" / "setup.sh").read_text()
    assert "pip install 'torch==2.13.0' --index-url \"$TORCH_INDEX_URL\"" in setup
    assert subprocess.run(["bash", "-n", str(ROOT / "deploy" / "setup.sh")]).returncode == 0


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
    for src in re.findall(r"^COPY (?!--from)(\S+)", text, re.M):
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


def test_the_base_image_is_a_build_arg_and_the_compiler_stays_in_the_build_stage():
    text = (ROOT / "deploy" / "Dockerfile").read_text()
    assert text.count("FROM ${BASE_IMAGE}") == 2 and "ARG BASE_IMAGE=python:3.11-slim" in text
    build, runtime = text.split("\nFROM ${BASE_IMAGE}\n")
    assert "gcc" in build and "gcc" not in runtime and "COPY --from=build /opt/venv /opt/venv" in runtime
    args = COMPOSE["services"]["node-full"]["build"]["args"]
    assert args["BASE_IMAGE"] == "${TESTNET_BASE_IMAGE:-python:3.11-slim}"
    assert COMPOSE["services"]["bootstrap"]["build"] == COMPOSE["services"]["node-full"]["build"]


def test_the_dockerignore_lets_in_what_the_dockerfiles_copy_and_keeps_the_venv_out():
    """The build context is the repository: without the allow-list it would send .venv (GBs) and runs/."""
    patterns = [p for p in (ROOT / ".dockerignore").read_text().splitlines() if p and not p.startswith("#")]
    assert patterns[0] == "*"
    allowed = {p[1:] for p in patterns if p.startswith("!")}
    for dockerfile in ("Dockerfile", "Dockerfile.cuda"):
        for src in re.findall(r"^COPY (?!--from)(\S+)", (ROOT / "deploy" / dockerfile).read_text(), re.M):
            src = src.rstrip("/")
            assert any(src == a or src.startswith(a + "/") for a in allowed), (dockerfile, src)
    assert not any(a in (".venv", "runs", "tests") or a.startswith(".venv") for a in allowed)


def test_without_the_hub_the_debian_override_builds_prometheus_and_leaves_grafana_out():
    override = yaml.safe_load((ROOT / "deploy" / "docker-compose.debian.yml").read_text())["services"]
    assert set(override) == {"prometheus", "grafana"} and override["grafana"]["profiles"] == ["grafana"]
    assert override["prometheus"]["build"]["dockerfile"] == "deploy/Dockerfile.prometheus"
    prom = (ROOT / "deploy" / "Dockerfile.prometheus").read_text()
    # the compose command's flags go to Debian's binary as they go to prom/prometheus's entry point
    assert json.loads(re.search(r"^ENTRYPOINT (\[.*\])$", prom, re.M).group(1)) == ["/usr/bin/prometheus"]
    assert re.search(r"install -y --no-install-recommends prometheus wget", prom)
    assert COMPOSE["services"]["prometheus"]["healthcheck"]["test"][:2] == ["CMD", "wget"]  # busybox's and Debian's
    for script in ("build_base.sh", "compose_check.sh", "setup.sh", "test.sh"):
        assert subprocess.run(["bash", "-n", str(ROOT / "deploy" / script)]).returncode == 0, script
    base = (ROOT / "deploy" / "build_base.sh").read_text()
    assert "debootstrap --variant=minbase --include=python3,python3-venv" in base and '"$suite" "$root"' in base
    assert "suite=bookworm" in base  # Debian 12: Python 3.11, python:3.11-slim's major.minor


def test_ci_leaves_the_docker_run_out_and_the_check_override_keeps_each_node_command_valid():
    test_sh = (ROOT / "deploy" / "test.sh").read_text()
    assert '-m "not slow"' in test_sh and '-m "slow and not docker"' in test_sh
    sys.path.insert(0, str(ROOT / "deploy"))
    try:
        import compose_check
    finally:
        sys.path.pop(0)
    nodes = {n: COMPOSE["services"][n] for n in NODES[:3]}
    path = Path(compose_check.check_override(nodes, 2))
    try:
        services = yaml.safe_load(path.read_text())["services"]
    finally:
        path.unlink()
    assert set(services) == set(nodes)
    for name, svc in services.items():
        result = CliRunner().invoke(app, svc["command"] + ["--print-config"])
        assert result.exit_code == 0, result.output
        cfg = json.loads(result.output)
        assert cfg["checkpoint_every"] == 2 and cfg["run_dir"] == f"/runs/{name}"
