"""Progress on the terminal (rich): a status line around long steps, bars for counted work.

Only where stderr is a terminal; elsewhere (a log file, CI) a status is one plain line and a
bar draws nothing, so logs hold no animation. stdout stays for results.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

_console: Optional[Console] = None


def console() -> Console:
    """The stderr console (made on first use, so a redirected stderr is honoured)."""
    global _console
    if _console is None:
        _console = Console(stderr=True)
    return _console


@contextmanager
def status(message: str) -> Iterator[None]:
    """A spinner with `message` while the block runs; without a terminal, the message once."""
    if console().is_terminal:
        with console().status(message):
            yield
    else:
        typer.echo(message, err=True)
        yield


class Bar:
    """A bar of `total` steps (None: not known yet); `say` prints a line above it (or plainly)."""

    def __init__(self, description: str, total: Optional[int] = None) -> None:
        self._progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                  TimeElapsedColumn(), console=console(), disable=not console().is_terminal)
        self._task = self._progress.add_task(description, total=total)

    def __enter__(self) -> "Bar":
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def advance(self, steps: int = 1) -> None:
        self._progress.advance(self._task, steps)

    def update(self, completed: int, total: Optional[int] = None) -> None:
        self._progress.update(self._task, completed=completed, total=total)

    def say(self, line: str) -> None:
        if console().is_terminal:
            self._progress.console.print(line, highlight=False, markup=False)
        else:
            typer.echo(line)
