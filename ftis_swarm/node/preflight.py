"""What `ftis-node join` settles before it writes a file or loads a model.

A node's config is checked in two steps, both cheap (no torch, no model, no network):

- `check_config` (also under `--print-config`): the task exists and its rows are at hand,
  each of `eval_tasks` too, with a test split to evaluate on, the model name would load (a short name, a hub id, a checkpoint folder), the sinks the
  config asks for are installed;
- `check_machine` (only when the node is about to run): the peers file reads as multiaddrs,
  the swarm, metrics and status ports are free (`join` checks first that a hub model is cached or
  the hub reachable, before torch loads: `models.check_model_reachable`).

Each failure is a `UserError` sentence, so nothing reaches the run directory until the
config is valid. `with_task_defaults` fills in what depends on the task when the user left
it unset: `sampling.max_new_tokens` (the task's own `max_new_tokens`; 64 cuts a GSM8K
solution short).
"""

from __future__ import annotations

import errno
import socket
from pathlib import Path

from ftis_swarm.config import ConfigError, NodeConfig, SwarmConfig, check_multiaddr
from ftis_swarm.metrics.extra_sinks import check_installed
from ftis_swarm.models import check_model_name
from ftis_swarm.tasks import get_task, task_class


def with_task_defaults(cfg: NodeConfig) -> NodeConfig:
    """`cfg` with `sampling.max_new_tokens` set to the task's default when no file, flag or variable set it."""
    if "max_new_tokens" in cfg.sampling.model_fields_set:
        return cfg
    tokens = task_class(cfg.task).max_new_tokens
    return cfg.model_copy(update={"sampling": cfg.sampling.model_copy(update={"max_new_tokens": tokens})})


def check_config(cfg: NodeConfig) -> None:
    """Task, model name and sinks, as far as they can be checked without loading anything."""
    get_task(cfg.task, options=cfg.task_options)  # UnknownTaskError, or TaskSourceError (rows nowhere, bad rows)
    for name in cfg.eval_tasks:
        if "test" not in get_task(name).splits:
            raise ConfigError(f"eval_tasks: task {name} has no test split to evaluate on")
    check_model_name(cfg.model)
    check_installed(tensorboard=cfg.tensorboard, wandb=cfg.wandb_project is not None)


def check_machine(cfg: NodeConfig) -> None:
    """The peers file and the ports, on this machine, now."""
    read_peers_file(cfg.swarm)
    net = cfg.swarm.transport
    if net.port and not net.client_mode:
        _require_free_port(net.host, net.port, "swarm.transport.port (--port)")
    if cfg.metrics_port:
        _require_free_port(cfg.metrics_host, cfg.metrics_port, "metrics_port (--metrics-port)")
    if cfg.status_port:
        _require_free_port(cfg.status_host, cfg.status_port, "status_port (--status-port)")


def read_peers_file(swarm_cfg: SwarmConfig) -> list[str]:
    """The multiaddrs listed in `transport.peers_file` (one per line; blank lines and # comments skipped)."""
    if swarm_cfg.transport.peers_file is None:
        return []
    path = Path(swarm_cfg.transport.peers_file)
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise ConfigError(f"cannot read the peers file {path}: {exc.strerror or exc}") from None
    maddrs = [ln.strip() for ln in lines if ln.strip() and not ln.strip().startswith("#")]
    for maddr in maddrs:
        try:
            check_multiaddr(maddr)
        except ValueError as exc:
            raise ConfigError(f"peers file {path}: {exc}") from None
    return maddrs


def with_peers_file(swarm_cfg: SwarmConfig) -> SwarmConfig:
    """`transport.peers` plus the multiaddrs listed in `transport.peers_file`."""
    if swarm_cfg.transport.peers_file is None:
        return swarm_cfg
    return swarm_cfg.replace(transport={"peers": list(swarm_cfg.transport.peers) + read_peers_file(swarm_cfg)})


def _require_free_port(host: str, port: int, what: str) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers do: TIME_WAIT is no conflict
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise ConfigError(f"{what}: port {port} on {host} is in use by another program; "
                                  "give another port, or 0 for any free one") from None
            raise ConfigError(f"{what}: cannot listen on {host}:{port} ({exc.strerror or exc})") from None
