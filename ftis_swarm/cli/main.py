"""`ftis-node`: the command line. Parses, validates, then imports the heavy parts.

torch, transformers and hivemind are imported inside the commands, so `ftis-node --help`
answers at once. Every error a user can cause (a bad flag, a bad config, a bad file, an
unknown model or task, a busy port) is a `ftis_swarm.errors.UserError`; `Commands.invoke`
catches it in this one place and prints it as one sentence on stderr with exit status 2,
never a traceback. `fail` raises one from the CLI's own checks.

Options every command shares sit before the command: `ftis-node --log-level debug join ...`
(or `FTIS_LOG_LEVEL=debug`), `ftis-node --version`.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import NoReturn, Optional, TypeVar

import typer
import typer.core

from ftis_swarm.errors import UserError

LOG_LEVELS = ("debug", "info", "warning", "error")
_state: dict[str, Optional[str]] = {"log_level": None}
T = TypeVar("T")


class Commands(typer.core.TyperGroup):
    """The command group that turns every `UserError` into one sentence and exit status 2."""

    def invoke(self, ctx):  # noqa: ANN001, ANN201 - click's signature
        try:
            return super().invoke(ctx)
        except UserError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None


app = typer.Typer(
    name="ftis-node",
    cls=Commands,
    help="A swarm node for collaborative GRPO across heterogeneous models, with F-TIS correction.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
bench_app = typer.Typer(
    help="Benchmarks: each prints a table of figures measured against a baseline in the same run.",
    no_args_is_help=True,
    rich_markup_mode=None,
)
app.add_typer(bench_app, name="bench")


def fail(message: str) -> NoReturn:
    """Ends the command with `error: <message>` on stderr and exit status 2."""
    raise UserError(message)


def renamed(value: Optional[T], old_value: Optional[T], flag: str, old_flag: str, default: T) -> T:
    """The value of `flag`, else of its old spelling `old_flag` (a hidden alias), else `default`.

    Giving both spellings is an error.
    """
    if old_value is not None and value is not None:
        fail(f"{old_flag} is the old name of {flag}; give only {flag}")
    chosen = value if value is not None else old_value
    return default if chosen is None else chosen


def log_level(default: str) -> str:
    """The level of log lines on stderr: `--log-level` (or FTIS_LOG_LEVEL), else the command's default."""
    return (_state["log_level"] or default).upper()


def setup_logging(default: str, *, log_file: Optional[Path] = None) -> None:
    """Log lines on stderr at `--log-level` (else `default`); all INFO and above also to `log_file`."""
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    root = logging.getLogger()
    console = logging.StreamHandler(sys.stderr)
    console.setFormatter(fmt)
    console.setLevel(log_level(default))
    root.addHandler(console)
    root.setLevel(min(console.level, logging.INFO) if log_file else console.level)
    if log_file is not None:
        handler = logging.FileHandler(log_file)
        handler.setFormatter(fmt)
        handler.setLevel(min(console.level, logging.INFO))
        root.addHandler(handler)
    if console.level > logging.DEBUG:
        for noisy in ("hivemind", "httpx", "transformers", "urllib3", "filelock"):
            logging.getLogger(noisy).setLevel(logging.WARNING)


def _version(show: bool) -> None:
    if show:
        from ftis_swarm import __version__

        typer.echo(f"ftis-node {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: bool = typer.Option(False, "--version", is_eager=True, callback=_version, help="Print the version and exit."),
    level: Optional[str] = typer.Option(None, "--log-level", envvar="FTIS_LOG_LEVEL", show_envvar=True,
                                        help="Log lines on stderr from this level: debug, info, warning, error "
                                             "(default: warning; info for bootstrap)."),
) -> None:
    """A swarm node for collaborative GRPO across heterogeneous models, with F-TIS correction."""
    if level is not None and level.lower() not in LOG_LEVELS:
        fail(f"--log-level must be one of {', '.join(LOG_LEVELS)}, not {level!r}")
    _state["log_level"] = level.lower() if level else None


@app.command()
def inspect(
    file: Path = typer.Argument(..., help="An encoded group (wire v1), e.g. proto/examples/group_v1_example.msgpack."),
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
    """Run a bare DHT peer for nodes to join through; prints the multiaddrs to pass to --peers."""
    import signal
    import threading

    from pydantic import ValidationError

    from ftis_swarm.config import SwarmConfig, format_validation_error

    try:
        cfg = SwarmConfig(host=host, port=port, identity=identity, announce=announce, ttl=ttl,
                          max_clock_skew=max_clock_skew)
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


from ftis_swarm.cli import bench_cmds, node_cmds, plan_cmd  # noqa: E402,F401  (register their commands)
from ftis_swarm.cli import experiment_cmd  # noqa: E402,F401  (registers experiment)
from ftis_swarm.cli import pilot_cmd  # noqa: E402,F401  (registers bench pilot)
from ftis_swarm.cli import status_cmd  # noqa: E402,F401  (registers status)


def main() -> None:
    """Entry point of the `ftis-node` script (and of `python -m ftis_swarm.cli`, under the same name)."""
    app(prog_name="ftis-node")
