"""The typer app every command module registers on, and what the commands share.

`Commands.invoke` is the one place a `ftis_swarm.errors.UserError` (a bad flag, a bad config, a
bad file, an unknown model or task, a busy port) becomes one sentence on stderr and exit status 2,
never a traceback; `fail` raises one from the CLI's own checks; `renamed` resolves a flag against
its hidden old spelling; `setup_logging` sends log lines to stderr at `--log-level`.

Options every command shares sit before the command: `ftis-node --log-level debug join ...`
(or `FTIS_LOG_LEVEL=debug`), `ftis-node --version`. The command modules import this module,
never `main` (which imports them), so the package has no import circle.
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
