"""`ftis-node`: the entry point. Registers every command on the app of `app.py` (the node's, then
the lab's from `cli/lab/`), and holds `inspect` and `bootstrap`.

torch, transformers and hivemind are imported inside the commands, so `ftis-node --help`
answers at once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ftis_swarm.cli.app import app, fail, setup_logging

__all__ = ["app", "main"]


@app.command()
def inspect(
    file: Path = typer.Argument(..., help="An encoded group (wire v2), e.g. proto/examples/group_v2_example.msgpack."),
    vocab_size: Optional[int] = typer.Option(None, help="Also check token ids against this vocabulary size."),
) -> None:
    """Print a group file's header and per-sample lengths and log-prob statistics."""
    from ftis_swarm.cli.inspect_cmd import describe_group_file

    typer.echo(describe_group_file(file, vocab_size=vocab_size))


@app.command()
def bootstrap(
    host: str = typer.Option("0.0.0.0", help="Address to listen on."),
    port: int = typer.Option(0, help="TCP port to listen on; 0 picks a free one."),
    identity: Optional[Path] = typer.Option(None, help="Private-key file, created on first start; keeps the peer id."),
    announce: list[str] = typer.Option([], help="Multiaddr to announce instead of the listening one (repeatable)."),
    maddrs_file: Optional[Path] = typer.Option(None, help="Also write the multiaddrs to this file, one per line "
                                                          "(a stale one is removed at start)."),
    ttl: float = typer.Option(600.0, help="The swarm's record TTL in seconds; longer-lived records are refused."),
    max_clock_skew: float = typer.Option(30.0, help="Seconds peers' clocks may differ."),
) -> None:
    """Run a bare DHT peer for nodes to join through; prints the multiaddrs to pass to --peers.

    Other swarm keys (the run's identity puzzle: `FTIS_SWARM__PUZZLE__BITS`) come from the
    environment, as for `join`."""
    import signal
    import threading

    from pydantic import ValidationError

    from ftis_swarm.cli.overrides import env_overrides
    from ftis_swarm.config import ConfigError, NodeConfig, SwarmConfig, format_validation_error, load_node_config

    try:
        swarm_env = {k: v for k, v in env_overrides(NodeConfig).items() if k.startswith("swarm.")}
        base = load_node_config(None, swarm_env).swarm.model_dump(exclude_unset=True)
        cfg = SwarmConfig.model_validate({
            **base, "identity": identity,
            "transport": {**base.get("transport", {}), "host": host, "port": port, "announce": announce},
            "records": {**base.get("records", {}), "ttl": ttl, "max_clock_skew": max_clock_skew}})
    except ConfigError as exc:
        fail(str(exc))
    except ValidationError as exc:
        fail(format_validation_error(exc, as_flags=True))
    if maddrs_file is not None:
        if not maddrs_file.parent.is_dir():
            fail(f"--maddrs-file: folder {maddrs_file.parent} does not exist")
        # A file left by an earlier run names an address that may be gone; nodes waiting for
        # the file must see the new one only.
        maddrs_file.unlink(missing_ok=True)
    setup_logging("info")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    from ftis_swarm.swarm.bootstrap import run_bootstrap

    def ready(maddrs: list[str]) -> None:
        for maddr in maddrs:
            typer.echo(maddr)

    run_bootstrap(cfg, stop=stop, on_ready=ready, maddrs_file=maddrs_file)


# After inspect and bootstrap, so that `--help` lists the commands in this order; the lab's last,
# under their own heading.
from ftis_swarm.cli import node_cmds, plan_cmd, status_cmd  # noqa: E402,F401  (register their commands)
from ftis_swarm.cli.lab import bench, bench_swarm, experiment, pilot  # noqa: E402,F401  (the lab's commands)


def main() -> None:
    """Entry point of the `ftis-node` script (and of `python -m ftis_swarm.cli`, under the same name)."""
    app(prog_name="ftis-node")
