"""User-facing progress and tables (rich), kept apart from library logging."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

console = Console(stderr=True)  # progress, messages, errors
results = Console()  # what a command reports: tables, scores


@contextmanager
def progress(description: str, total: int) -> Iterator[Callable[[int], None]]:
    """Yield an `advance(n)` callback driving a progress bar on stderr."""
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,
    ) as bar:
        task = bar.add_task(description, total=total)
        yield lambda n: bar.advance(task, n)
