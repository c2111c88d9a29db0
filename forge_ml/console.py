"""User-facing progress and tables (rich), kept apart from library logging."""

from __future__ import annotations

import logging
import re
import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

LOG_MAX_BYTES = 10 * 2**20  # a mirrored log is rotated to `<name>.1` past this size
LOG_TIME_FORMAT = "%Y-%m-%d %H:%M:%S"


class MirroredConsole(Console):
    """A rich Console whose `print`s are also written, with the time, to the consoles in `mirrors`.

    Away from a terminal (a log file, a pipe, a Ray job's log) a line of text is printed whole:
    rich would break it at 80 columns, mid-phrase, and a `grep` of the log would find half of it.
    Tables are still drawn at the console's width (`COLUMNS`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.mirrors: list[Console] = []

    def print(self, *objects: Any, **kwargs: Any) -> None:
        text = all(isinstance(o, str | Text) for o in objects)
        if kwargs.get("soft_wrap") is None and not self.is_terminal and text:
            kwargs["soft_wrap"] = True
        super().print(*objects, **kwargs)
        for mirror in self.mirrors:
            if text:  # one line in the log, after its time: whole, as a `grep` wants it
                stamp = datetime.now().strftime(LOG_TIME_FORMAT)
                mirror.print(stamp, *objects, highlight=False, soft_wrap=True, markup=kwargs.get("markup"))
            else:  # a table: drawn at the log's width, under its time
                mirror.log(*objects, highlight=False, _stack_offset=2)


console = MirroredConsole(stderr=True)  # progress, messages, errors
results = MirroredConsole()  # what a command reports: tables, scores


_PADDING = re.compile(r"[ \t]+\n")


class BoundedLog:
    """An append-only text file that moves itself to `<name>.1` (one old file kept) past `max_bytes`."""

    def __init__(self, path: Path, max_bytes: int = LOG_MAX_BYTES) -> None:
        self.path, self.max_bytes = path, max_bytes
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("a", encoding="utf-8")

    def write(self, text: str) -> int:
        text = _PADDING.sub("\n", text)  # the console pads each line to its width: not in a file
        if self._file.tell() + len(text) > self.max_bytes and self._file.tell() > 0:
            self._file.close()
            self.path.replace(self.path.with_name(self.path.name + ".1"))
            self._file = self.path.open("a", encoding="utf-8")
        written = self._file.write(text)
        self._file.flush()
        return written

    def flush(self) -> None:
        self._file.flush()

    def isatty(self) -> bool:
        return False

    def close(self) -> None:
        self._file.close()


@contextmanager
def mirrored_to(path: Path, max_bytes: int = LOG_MAX_BYTES) -> Iterator[None]:
    """Meanwhile, write what `console` and `results` print and forge-ml's log records to `path` too
    (plain text with times, size-bounded), as well as to the terminal."""
    from forge_ml.secrets import RedactingFilter

    log = BoundedLog(path, max_bytes)
    mirror = Console(
        file=log,
        width=120,
        no_color=True,
        log_time=True,
        log_time_format=LOG_TIME_FORMAT,
        log_path=False,
        soft_wrap=True,
    )
    handler = logging.StreamHandler(log)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(RedactingFilter())
    logger = logging.getLogger("forge_ml")
    for target in (console, results):
        target.mirrors.append(mirror)
    logger.addHandler(handler)
    try:
        yield
    except Exception as exc:  # the error a run ends with belongs in its log, not on stderr alone
        _log_error(mirror, log, exc)
        raise
    finally:
        logger.removeHandler(handler)
        for target in (console, results):
            target.mirrors.remove(mirror)
        log.close()


def _log_error(mirror: Console, log: BoundedLog, exc: Exception) -> None:
    """`error: …` under its time, as the command says it; an unexpected error's traceback after it."""
    import traceback

    from forge_ml.errors import ForgeError, describe
    from forge_ml.secrets import redact_text

    expected = isinstance(exc, ForgeError) and str(exc).strip()
    stamp = datetime.now().strftime(LOG_TIME_FORMAT)
    mirror.print(stamp, f"error: {redact_text(str(exc) if expected else describe(exc))}", markup=False)
    if not expected:
        log.write(redact_text("".join(traceback.format_exception(exc))))


def titled_table(title: str, **options: Any) -> Any:
    """A rich Table at least as wide as its title (rich wraps a longer title to the table's width)."""
    from rich.table import Table

    return Table(title=title, min_width=Text.from_markup(title).cell_len + 4, **options)


def print_table(title: str, columns: tuple[str, ...], rows: list[tuple[Any, ...]]) -> None:
    """Print a titled table of `rows` (each cell as str, long cells folded) to `results`."""
    table = titled_table(title)
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*(str(cell) for cell in row))
    results.print(table)


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def column_labels(keys: list[str]) -> dict[str, str]:
    """Each dotted key's shortest tail that no other key ends with (lora.r → r; a clash keeps more)."""
    labels = {}
    for key in keys:
        parts = key.split(".")
        label = key
        for n in range(1, len(parts)):
            tail = ".".join(parts[-n:])
            if not any(other != key and (other == tail or other.endswith("." + tail)) for other in keys):
                label = tail
                break
        labels[key] = label
    return labels


def round_table(result: Any, metric: str, width: int = 120) -> Any:
    """The round's trials: one row each (the searched keys by their short names, the metric, dev
    accuracy), or one column each when that is what fits in `width` columns.

    A cell too long for its column folds onto another line instead of being cut.
    """
    from rich.console import Console
    from rich.measure import Measurement
    from rich.table import Table

    keys = sorted({k for t in result.trials for k in t.config})
    labels = column_labels(keys)
    header = ["trial", "status", *(labels[k] for k in keys), metric, "dev/accuracy"]
    rows = []
    for t in result.trials:
        acc = t.metrics.get("dev/accuracy")
        rows.append(
            [
                t.trial_id,
                t.status,
                *(_short(t.config.get(k, "")) for k in keys),
                f"{t.metrics[metric]:.4f}" if metric in t.metrics else "-",
                f"{acc:.3f}" if acc is not None else "-",
            ]
        )
    title = (
        f"{result.name}: best trial {result.best.trial_id} "
        f"({metric} {result.best.metrics[metric]:.4f}) in {result.wall_s:.0f}s"
    )

    def build(columns: list[str], body: list[list[str]]) -> Table:
        table = titled_table(title)
        for column in columns:
            table.add_column(column, overflow="fold")
        for row in body:
            table.add_row(*row)
        return table

    by_trial = build(header, rows)
    by_key = build(
        [header[0], *(row[0] for row in rows)],
        [[name, *(row[i] for row in rows)] for i, name in enumerate(header) if i],
    )
    unbounded = Console(width=10_000)  # measures a table's natural width, prints nothing

    def natural(table: Table) -> int:
        return Measurement.get(unbounded, unbounded.options, table).maximum

    if natural(by_trial) <= width or natural(by_trial) <= natural(by_key):
        return by_trial
    return by_key


def print_round(result: Any, metric: str) -> None:
    results.print(round_table(result, metric, width=results.width))


def shell_path(path: Path | str) -> str:
    """A path as a command to copy into a shell needs it: quoted when it holds a space or another special."""
    return shlex.quote(str(path))
