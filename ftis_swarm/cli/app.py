"""The typer app every command module registers on, and what the commands share.

`Commands.invoke` is the one place a `ftis_swarm.errors.UserError` (a bad flag, a bad config, a
bad file, an unknown model or task, a busy port) or a flag typer refuses (a number outside its
option's `min=`/`max=`, a value of the wrong type) becomes one sentence on stderr and exit status
2, never a traceback; `fail` raises one from the CLI's own checks; `renamed` resolves a flag
against its hidden old spelling; `setup_logging` sends log lines to stderr at `--log-level`.
`--help` lists the node's commands first and the lab's (`rich_help_panel=LAB_PANEL`) under
their own heading.

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


LAB_PANEL = "Lab (measures the product; not part of a node)"
"""The `--help` heading of the lab's commands (`cli/lab/`), listed after the node's."""


class Commands(typer.core.TyperGroup):
    """The command group that turns every `UserError` and refused flag into one sentence and exit status 2,
    and lists its commands under their `rich_help_panel` heading (the node's first, under "Commands")."""

    def invoke(self, ctx):  # noqa: ANN001, ANN201 - click's signature
        try:
            return super().invoke(ctx)
        except UserError as exc:
            typer.echo(f"error: {exc}", err=True)
        except typer.BadParameter as exc:
            typer.echo(f"error: {refused_flag(exc)}", err=True)
        raise typer.Exit(2) from None

    def format_commands(self, ctx, formatter) -> None:  # noqa: ANN001 - click's signature
        """Plain help (rich markup is off) by heading, in the order the headings first appear."""
        sections: dict[str, list[tuple[str, str]]] = {}
        shown = [(name, cmd) for name in self.list_commands(ctx)
                 if (cmd := self.get_command(ctx, name)) is not None and not cmd.hidden]
        width = formatter.width - 6 - max((len(name) for name, _ in shown), default=0)
        for name, cmd in shown:
            heading = getattr(cmd, "rich_help_panel", None) or "Commands"
            sections.setdefault(heading, []).append((name, cmd.get_short_help_str(width)))
        for heading in sorted(sections, key=lambda h: h != "Commands"):  # stable: the rest keep their order
            with formatter.section(heading):
                formatter.write_dl(sections[heading])


def refused_flag(exc: typer.BadParameter) -> str:
    """One sentence for a flag typer refused: out of its `min=`/`max=` range, `<flag> must be between
    <min> and <max> (got <value>)` (or at least, at most); else typer's own message."""
    cause, param = exc.__cause__, exc.param
    error = cause.errors()[0] if callable(getattr(cause, "errors", None)) and cause.errors() else {}
    if param is None or error.get("type") not in ("greater_than_equal", "less_than_equal"):
        return exc.format_message()
    flag = max(param.opts, key=len)
    low, high = getattr(param, "min", None), getattr(param, "max", None)
    if low is not None and high is not None:
        bound = f"between {low:,} and {high:,}"
    else:
        bound = f"at least {low:,}" if low is not None else f"at most {high:,}"
    return f"{flag} must be {bound} (got {error.get('input')})"


app = typer.Typer(
    name="ftis-node",
    cls=Commands,
    help="A swarm node for collaborative GRPO across heterogeneous models, with F-TIS correction.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


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
