"""`ftis-node`: the command line. Parses, validates, then imports the heavy parts.

torch, transformers and hivemind are imported inside the commands, so `ftis-node --help`
answers at once. Every error a user can cause (a bad flag, a bad config, a bad file) ends
as one sentence on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NoReturn, Optional

import typer

app = typer.Typer(
    name="ftis-node",
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


class UserError(Exception):
    """An error the user can fix: printed as one sentence, exit status 2."""


def fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


@app.command()
def inspect(
    file: Path = typer.Argument(..., help="An encoded group (wire v1), e.g. proto/examples/group_v1_example.msgpack."),
    vocab_size: Optional[int] = typer.Option(None, help="Also check token ids against this vocabulary size."),
) -> None:
    """Print a group file's header and per-sample lengths and log-prob statistics."""
    from ftis_swarm.cli.inspect_cmd import describe_group_file

    try:
        typer.echo(describe_group_file(file, vocab_size=vocab_size))
    except UserError as exc:
        fail(str(exc))


def main() -> None:
    """Entry point of the `ftis-node` script."""
    try:
        app()
    except UserError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
