"""User-facing progress and tables (rich), kept apart from library logging."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

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


def print_table(title: str, columns: tuple[str, ...], rows: list[tuple[Any, ...]]) -> None:
    """Print a titled table of `rows` (each cell as str, long cells folded) to `results`."""
    from rich.table import Table

    table = Table(title=title)
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*(str(cell) for cell in row))
    results.print(table)


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def print_round(result: Any, metric: str) -> None:
    from rich.table import Table

    keys = sorted({k for t in result.trials for k in t.config})
    table = Table(
        title=f"{result.name}: best trial {result.best.trial_id} "
        f"({metric} {result.best.metrics[metric]:.4f}) in {result.wall_s:.0f}s"
    )
    for column in ("trial", "status", *keys, metric, "dev/accuracy"):
        table.add_column(column)
    for t in result.trials:
        acc = t.metrics.get("dev/accuracy")
        table.add_row(
            t.trial_id,
            t.status,
            *(_short(t.config.get(k, "")) for k in keys),
            f"{t.metrics[metric]:.4f}" if metric in t.metrics else "-",
            f"{acc:.3f}" if acc is not None else "-",
        )
    results.print(table)
