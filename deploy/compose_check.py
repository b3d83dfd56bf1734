"""The compose testnet, built and run for real, and checked (run by deploy/compose_check.sh).

1. An engine: `docker` (else Debian's `docker.io`, installed with apt when root) and a running daemon
   (else `dockerd` started here, and stopped at the end); compose v2 (`docker compose`) or v1
   (`docker-compose`).
2. Images: where the image hub is unreachable, the base image from Debian packages
   (deploy/build_base.sh) and deploy/docker-compose.debian.yml (Prometheus from Debian's package,
   Grafana left out); where PyTorch's CPU index is unreachable, the CPU torch wheel from this
   machine's pip find-links copied into deploy/wheels/. Then `build`.
3. `up` under a project name of its own (`ftischeck<pid>`), on free host ports, each node
   checkpointing every `--checkpoint-every` rounds (an override written to a temporary file; the
   nodes' commands are otherwise the compose file's). Checks: every started service healthy; each
   node's rounds advance and it learns from its peers' groups (`ftis_peer_groups_used_total`);
   Prometheus scrapes every started node and nothing else; every dashboard panel's query returns
   series (Prometheus's HTTP API, each panel's `expr`); after `down` the volumes hold each node's
   checkpoint, and `up` resumes each node from it (its log's "resumed from ckpt-..." line and a
   round after it).
4. Always, also on failure or Ctrl-C: `down -v --remove-orphans`, then no container, network or
   volume of the project is left.

Prints the figures (build time, image sizes, time from `up` to each node's first round, rounds and
reward per node, memory per container, which queries return series) and a JSON summary as its
last line; exits 0 when every check passed, 1 when one failed, 2 when it could not run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
COMPOSE_FILE = DEPLOY / "docker-compose.yml"
DEBIAN_OVERRIDE = DEPLOY / "docker-compose.debian.yml"
BOARD = DEPLOY / "grafana" / "dashboards" / "ftis-node.json"
TORCH_WHEEL = re.compile(r"^torch-2\.13\.0\+cpu-cp311-cp311-.*linux.*_x86_64\.whl$")
HUB_PROBE = "python:3.11-slim"
TORCH_INDEX = os.environ.get("TORCH_INDEX_URL") or "https://download.pytorch.org/whl/cpu"


class CheckFailed(Exception):
    """A check that did not pass: one sentence."""


def say(msg: str) -> None:
    print(f"[compose_check {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def run(cmd: list[str], *, check: bool = True, timeout: float | None = None, env: dict | None = None,
        quiet: bool = False) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if check and proc.returncode != 0:
        raise CheckFailed(f"`{' '.join(cmd[:6])} ...` failed ({proc.returncode}): {(proc.stderr or proc.stdout)[-1500:]}")
    if not quiet and proc.returncode != 0:
        say(f"({' '.join(cmd[:4])} ... exited {proc.returncode})")
    return proc


# -- the engine ------------------------------------------------------------------------------------
class Engine:
    def __init__(self) -> None:
        self.dockerd: subprocess.Popen | None = None
        self.compose: list[str] = []

    def start(self) -> None:
        if shutil.which("docker") is None or (shutil.which("dockerd") is None and not self._daemon_up()):
            if os.geteuid() != 0 or shutil.which("apt-get") is None:
                raise SystemExit("[compose_check] no Docker engine, and apt-get as root is not available to install one")
            say("installing Debian's docker.io and docker-compose")
            run(["apt-get", "install", "-y", "docker.io", "docker-compose"], timeout=1200)
        if not self._daemon_up():
            if os.geteuid() != 0:
                raise SystemExit("[compose_check] the Docker daemon is not running and starting one needs root")
            say("starting dockerd (stopped again at the end)")
            log = open(tempfile.gettempdir() + "/ftis-compose-check-dockerd.log", "w")
            self.dockerd = subprocess.Popen(["dockerd"], stdout=log, stderr=subprocess.STDOUT)
            for _ in range(60):
                if self._daemon_up():
                    break
                time.sleep(1)
            else:
                raise SystemExit("[compose_check] dockerd did not come up in 60 s")
        if run(["docker", "compose", "version"], check=False, quiet=True).returncode == 0:
            self.compose = ["docker", "compose"]
        elif shutil.which("docker-compose"):
            self.compose = ["docker-compose"]
        else:
            raise SystemExit("[compose_check] neither `docker compose` nor `docker-compose` is installed")
        say(f"engine {run(['docker', 'version', '-f', '{{.Server.Version}}']).stdout.strip()}, "
            f"compose: {' '.join(self.compose)}")

    @staticmethod
    def _daemon_up() -> bool:
        return shutil.which("docker") is not None and run(["docker", "info"], check=False, quiet=True).returncode == 0

    def stop(self) -> None:
        if self.dockerd is not None:
            self.dockerd.send_signal(signal.SIGTERM)
            try:
                self.dockerd.wait(60)
            except subprocess.TimeoutExpired:
                self.dockerd.kill()


# -- images -----------------------------------------------------------------------------------------
def reachable(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=10)
        return True
    except Exception:  # noqa: BLE001 -- any failure means: not reachable from here
        return False


def hub_reachable() -> bool:
    if run(["docker", "image", "inspect", HUB_PROBE], check=False, quiet=True).returncode == 0:
        return True
    try:
        return run(["docker", "pull", HUB_PROBE], check=False, quiet=True, timeout=120).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def find_links_dirs() -> list[Path]:
    dirs = os.environ.get("PIP_FIND_LINKS", "").split()
    proc = run([sys.executable, "-m", "pip", "config", "list"], check=False, quiet=True)
    for line in proc.stdout.splitlines():
        key, _, value = line.partition("=")
        if key.endswith(".find-links"):
            dirs += value.strip().strip("'\"").split()
    return [Path(d.removeprefix("file://")) for d in dirs if not d.startswith("http")]


def torch_wheel() -> str:
    """Where the image's CPU torch comes from: the index, or a wheel put in deploy/wheels/."""
    have = [p for p in (DEPLOY / "wheels").glob("torch-*.whl") if TORCH_WHEEL.match(p.name)]
    if have:
        return f"deploy/wheels/{have[0].name}"
    if reachable(TORCH_INDEX.rstrip("/") + "/torch/"):
        return TORCH_INDEX
    for d in find_links_dirs():
        for p in sorted(d.glob("torch-*.whl")) if d.is_dir() else []:
            if TORCH_WHEEL.match(p.name):
                dest = DEPLOY / "wheels" / p.name
                try:
                    os.link(p, dest)
                except OSError:
                    shutil.copy2(p, dest)
                return f"deploy/wheels/{p.name} (from {d})"
    raise SystemExit(f"[compose_check] {TORCH_INDEX} is unreachable and no torch 2.13.0+cpu wheel is in deploy/wheels/ "
                     "or pip's find-links: put one in deploy/wheels/ or set TORCH_INDEX_URL")


def local_certs() -> int:
    """The machine's locally added CA certificates (a TLS-intercepting proxy's) into deploy/certs/."""
    n = 0
    for crt in sorted(Path("/usr/local/share/ca-certificates").glob("**/*.crt")):
        dest = DEPLOY / "certs" / crt.name
        if not dest.exists():
            shutil.copy2(crt, dest)
        n += 1
    return n


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- the run ---------------------------------------------------------------------------------------
class Testnet:
    def __init__(self, engine: Engine, files: list[Path], env: dict[str, str], project: str):
        self.engine, self.files, self.env, self.project = engine, files, env, project
        self.prom = f"http://127.0.0.1:{env['TESTNET_PROMETHEUS_PORT']}"

    def compose(self, *args: str, timeout: float = 1800, check: bool = True) -> subprocess.CompletedProcess:
        cmd = [*self.engine.compose, "-p", self.project]
        for f in self.files:
            cmd += ["-f", str(f)]
        return run(cmd + list(args), timeout=timeout, env=self.env, check=check)

    def containers(self) -> dict[str, str]:
        """service -> container id, of the running containers."""
        out = run(["docker", "ps", "-q", "--filter", f"label=com.docker.compose.project={self.project}"]).stdout.split()
        names = {}
        for cid in out:
            svc = run(["docker", "inspect", "-f", '{{index .Config.Labels "com.docker.compose.service"}}', cid]).stdout
            names[svc.strip()] = cid
        return names

    def health(self) -> dict[str, str]:
        return {svc: run(["docker", "inspect", "-f", "{{if .State.Health}}{{.State.Health.Status}}{{else}}none{{end}}",
                          cid]).stdout.strip() for svc, cid in self.containers().items()}

    def query(self, expr: str) -> list[dict]:
        url = f"{self.prom}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(url, timeout=20) as r:
            body = json.load(r)
        if body.get("status") != "success":
            raise CheckFailed(f"Prometheus refused {expr!r}: {body}")
        return body["data"]["result"]

    def per_node(self, expr: str) -> dict[str, float]:
        try:
            return {s["metric"].get("instance", "?").split(":")[0]: float(s["value"][1]) for s in self.query(expr)}
        except OSError:
            return {}

    def targets(self) -> list[dict]:
        with urllib.request.urlopen(f"{self.prom}/api/v1/targets", timeout=20) as r:
            return json.load(r)["data"]["activeTargets"]

    def logs(self, service: str) -> str:
        cid = self.containers().get(service)
        proc = run(["docker", "logs", cid], check=False, quiet=True) if cid else None
        return proc.stdout + proc.stderr if proc else ""

    def node_log(self, node: str) -> str:
        """The node's log file in its run directory (the console shows the round table, not the log)."""
        cid = self.containers().get(node)
        if not cid:
            return ""
        return run(["docker", "exec", cid, "sh", "-c", f"cat /runs/{node}/node.log 2>/dev/null || true"], check=False,
                   quiet=True).stdout

    def checkpoints(self, node: str) -> list[int]:
        cid = self.containers()[node]
        out = run(["docker", "exec", cid, "sh", "-c", f"ls /runs/{node}/checkpoints/*/COMPLETE 2>/dev/null || true"]).stdout
        return sorted(int(m) for m in re.findall(r"ckpt-(\d+)/COMPLETE", out))

    def leftovers(self) -> dict[str, list[str]]:
        label = f"label=com.docker.compose.project={self.project}"
        return {kind: run(["docker", *cmd, "--filter", label], check=False, quiet=True).stdout.split()
                for kind, cmd in (("containers", ["ps", "-aq"]), ("networks", ["network", "ls", "-q"]),
                                  ("volumes", ["volume", "ls", "-q"]))}


def wait(what: str, cond, timeout: float, every: float = 10.0):
    t0 = time.monotonic()
    last = None
    while time.monotonic() - t0 < timeout:
        ok, last = cond()
        if ok:
            return last
        time.sleep(every)
    raise CheckFailed(f"{what}: not within {timeout:.0f} s (last seen: {last})")


def check_override(nodes: dict[str, dict], every: int) -> str:
    """A temporary compose override: each node's command with `--checkpoint-every <every>`."""
    services = {name: {"command": [*svc["command"], "--checkpoint-every", str(every)]} for name, svc in nodes.items()}
    fd, path = tempfile.mkstemp(prefix="ftis-compose-check-", suffix=".yml")
    with os.fdopen(fd, "w") as f:
        yaml.safe_dump({"services": services}, f)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=0.0,
                    help="keep the testnet running this long after every node's first round before the checks "
                         "(the figures' rounds and reward per node)")
    ap.add_argument("--checkpoint-every", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=1800, help="most seconds for each wait")
    ap.add_argument("--no-build", action="store_true",
                    help="run the images already built (by an earlier run or `build`) instead of building them")
    args = ap.parse_args(argv)

    t_start = time.monotonic()
    figures: dict = {}
    engine = Engine()
    engine.start()
    compose = yaml.safe_load(COMPOSE_FILE.read_text())
    files = [COMPOSE_FILE]
    env = dict(os.environ, TESTNET_PROMETHEUS_PORT=str(free_port()), TESTNET_BOOTSTRAP_PORT=str(free_port()))
    if hub_reachable():
        figures["base"] = HUB_PROBE
    else:
        say("the image hub is unreachable: base image from Debian packages (deploy/build_base.sh)")
        run(["bash", str(DEPLOY / "build_base.sh")], timeout=1800)
        env["TESTNET_BASE_IMAGE"] = "ftis-swarm-base:bookworm"
        files.append(DEBIAN_OVERRIDE)
        figures["base"] = "ftis-swarm-base:bookworm (deploy/build_base.sh)"
    figures["torch"] = torch_wheel()
    figures["local_ca_certificates"] = local_certs()
    say(f"base {figures['base']}; torch from {figures['torch']}")
    started = {n for n, s in compose["services"].items() if not s.get("profiles")}
    if DEBIAN_OVERRIDE in files:
        started -= {n for n, s in yaml.safe_load(DEBIAN_OVERRIDE.read_text())["services"].items() if s.get("profiles")}
    nodes = {n: compose["services"][n] for n in sorted(started) if compose["services"][n].get("command", [""])[0] == "join"}
    override = check_override(nodes, args.checkpoint_every)
    files.append(Path(override))
    net = Testnet(engine, files, env, project=f"ftischeck{os.getpid()}")
    failed: str | None = None

    def interrupted(*_):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, interrupted)
    try:
        t0 = time.monotonic()
        if not args.no_build:
            net.compose("build", timeout=3 * 3600)
        figures["build_s"] = None if args.no_build else round(time.monotonic() - t0)
        sizes = {}
        for svc in sorted(started):
            image = compose["services"][svc].get("image")
            if svc == "prometheus" and DEBIAN_OVERRIDE in files:
                image = yaml.safe_load(DEBIAN_OVERRIDE.read_text())["services"]["prometheus"]["image"]
            sizes[image] = round(int(run(["docker", "image", "inspect", "-f", "{{.Size}}", image]).stdout) / 1e6)
        figures["image_mb"] = sizes
        say(f"built in {figures['build_s']} s; images (MB): {sizes}")

        t_up = time.monotonic()
        net.compose("up", "-d")
        health = wait("every started service healthy",
                      lambda: (lambda h: (set(h) == started and all(v == "healthy" for v in h.values()), h))(net.health()),
                      args.timeout)
        figures["healthy_s"] = round(time.monotonic() - t_up)
        say(f"healthy after {figures['healthy_s']} s: {health}")

        first: dict[str, float] = {}

        def first_rounds():
            for node, v in net.per_node("ftis_rounds_total").items():
                if v >= 1 and node not in first:
                    first[node] = round(time.monotonic() - t_up)
            return set(first) >= set(nodes), dict(first)
        wait("every node's first round", first_rounds, args.timeout)
        figures["first_round_s"] = first
        say(f"first round (s after up): {first}")
        if args.minutes:
            say(f"running {args.minutes} more minutes")
            time.sleep(args.minutes * 60)
        r0 = net.per_node("ftis_rounds_total")

        def advanced():
            r, used = net.per_node("ftis_rounds_total"), net.per_node("ftis_peer_groups_used_total")
            ok = all(r.get(n, 0) > r0.get(n, 0) and used.get(n, 0) > 0 for n in nodes)
            return ok, {"rounds": r, "peer_groups_used": used}
        progress = wait("each node's rounds advance and its peers' groups are used", advanced, args.timeout)
        figures["rounds"] = progress["rounds"]
        figures["peer_groups_used"] = progress["peer_groups_used"]
        figures["reward"] = net.per_node("ftis_reward")
        figures["heldout_acc"] = net.per_node("ftis_heldout_acc")
        say(f"rounds {figures['rounds']}; peer groups used {figures['peer_groups_used']}; reward {figures['reward']}")

        up = {t["labels"]["instance"]: t["health"] for t in net.targets()}
        if up != {f"{n}:9100": "up" for n in nodes}:
            raise CheckFailed(f"Prometheus's targets are {up}, not every started node up and nothing else")
        figures["targets"] = up

        board = json.loads(BOARD.read_text())
        series = {}
        for panel in board["panels"]:
            for target in panel["targets"]:
                series[f"{panel['title']}: {target['expr']}"] = len(net.query(target["expr"]))
        figures["query_series"] = series
        empty_panels = [p["title"] for p in board["panels"]
                        if not any(series[f"{p['title']}: {t['expr']}"] for t in p["targets"])]
        for k, v in series.items():
            say(f"  {v:3d} series  {k}")

        stats = run(["docker", "stats", "--no-stream", "--format", "{{.Name}} {{.MemUsage}}"]).stdout
        figures["memory"] = {line.split()[0].removeprefix(net.project).strip("_-"): line.split(maxsplit=1)[1]
                             for line in stats.splitlines() if line.startswith(net.project)}
        say(f"memory: {figures['memory']}")

        ckpt = wait("a complete checkpoint on every node", lambda: (
            lambda c: (all(c.values()), c))({n: net.checkpoints(n)[-1:] for n in nodes}), args.timeout)
        say(f"checkpoints before down: {ckpt}; down")
        net.compose("down", timeout=600)
        vols = net.leftovers()["volumes"]
        if not any(v.endswith("_runs") for v in vols):
            raise CheckFailed(f"after down, no runs volume is left: {vols}")
        listing = run(["docker", "run", "--rm", "--entrypoint", "sh", "-v", f"{net.project}_runs:/runs", "ftis-swarm:cpu",
                       "-c", "ls -d /runs/*/checkpoints/ckpt-*/COMPLETE /runs/*/metrics.jsonl"], check=False).stdout
        for n in nodes:
            if f"/runs/{n}/checkpoints/ckpt-" not in listing:
                raise CheckFailed(f"the runs volume holds no checkpoint of {n} after down: {listing}")
        figures["volume_runs"] = listing.split()
        saved = {n: c[-1] for n, c in ckpt.items()}
        net.compose("up", "-d")
        resumed = {}

        def resumes():
            for n in nodes:
                m = re.findall(r"resumed from ckpt-(\d+): next round (\d+)", net.node_log(n))
                if m:
                    resumed[n] = (int(m[-1][0]), int(m[-1][1]))
            r = net.per_node("ftis_rounds_total")
            return set(resumed) == set(nodes) and all(r.get(n, 0) >= 1 for n in nodes), {"resumed": resumed, "rounds": r}
        wait("each node resumes from its checkpoint and learns a round", resumes, args.timeout)
        for n, (at, nxt) in resumed.items():
            if at < saved[n] or nxt != at + 1:
                raise CheckFailed(f"{n} resumed from ckpt {at} (next {nxt}), but the last complete one before down was {saved[n]}")
        figures["resumed"] = {n: {"checkpoint": at, "next_round": nxt} for n, (at, nxt) in resumed.items()}
        say(f"resumed: {figures['resumed']}")
        if empty_panels:
            raise CheckFailed(f"dashboard panels whose queries return no series: {empty_panels}")
    except CheckFailed as e:
        failed = str(e)
    except KeyboardInterrupt:
        failed = "interrupted"
    finally:
        if failed:
            for svc in sorted(started):
                say(f"--- last log lines of {svc} ---\n" + "\n".join(net.logs(svc).splitlines()[-15:]))
        net.compose("down", "-v", "--remove-orphans", timeout=600, check=False)
        Path(override).unlink(missing_ok=True)
        left = net.leftovers()
        if any(left.values()):
            failed = (failed + "; " if failed else "") + f"left behind: {left}"
        engine.stop()
    figures["check_s"] = round(time.monotonic() - t_start)
    figures["failed"] = failed
    say("FAILED: " + failed if failed else f"all checks passed in {figures['check_s']} s")
    print(json.dumps(figures))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
