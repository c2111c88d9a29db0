"""Progress of the steps a person waits on: counts and rates on stderr, never on stdout.

On a terminal a `Stage` is a transient line that updates in place. Elsewhere (a log file, CI)
it prints a line once the step has run for `FIRST_REPORT_S`, every `REPORT_EVERY_S` after,
and a closing line with the count, time and rate; a step shorter than that prints nothing.
`--json` turns it all off (`set_quiet`).
"""

from __future__ import annotations

import time
from types import TracebackType

FIRST_REPORT_S = 2.0
REPORT_EVERY_S = 10.0
_quiet = False


def set_quiet(quiet: bool) -> None:
    global _quiet
    _quiet = quiet


def _rate(count: int, seconds: float) -> str:
    """How fast, in the form that shows it: thousands a second, a second, or seconds for each one
    (generating with a real model on a CPU runs at 0.4 examples a second, which `/s` rounds to 0)."""
    per_s = count / seconds if seconds > 0 else 0.0
    if per_s >= 1000:
        return f"{per_s / 1000:.1f}k/s"
    if per_s >= 10:
        return f"{per_s:.0f}/s"
    if per_s >= 1:
        return f"{per_s:.1f}/s"
    if per_s > 0:
        each = seconds / count
        return f"{each:.1f} s each" if each < 100 else f"{each:.0f} s each"
    return "0/s"


class Stage:
    """`with Stage("tokenising", unit="examples", total=n) as stage: ... stage.advance(k)`."""

    def __init__(self, description: str, *, unit: str = "examples", total: int | None = None) -> None:
        self.description, self.unit, self.total = description, unit, total
        self.count = 0
        self.started = self._last = 0.0
        self._reported = False
        self._live = None
        self._task = None

    def __enter__(self) -> Stage:
        from forge_ml.console import console

        self.started = self._last = time.monotonic()
        if not _quiet and console.is_terminal:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            columns = [TextColumn("{task.description}")]
            if self.total:
                columns.append(BarColumn())
            columns += [TextColumn("{task.completed:,} " + self.unit), TimeElapsedColumn()]
            self._live = Progress(*columns, console=console, transient=True)
            self._live.start()
            self._task = self._live.add_task(self.description, total=self.total)
        return self

    def advance(self, n: int = 1) -> None:
        self.count += n
        if _quiet:
            return
        if self._live is not None:
            self._live.update(self._task, completed=self.count)
            return
        now = time.monotonic()
        wait = REPORT_EVERY_S if self._reported else FIRST_REPORT_S
        finished = self.total is not None and self.count >= self.total  # the closing line says it
        if not finished and now - (self._last if self._reported else self.started) >= wait:
            self._last, self._reported = now, True
            self._print(
                f"{self.description}: {self._progress()} so far ({_rate(self.count, now - self.started)})"
            )

    def _progress(self) -> str:
        of = f" of {self.total:,}" if self.total else ""
        return f"{self.count:,}{of} {self.unit}"

    def _print(self, line: str) -> None:
        from forge_ml.console import console

        console.print(line, highlight=False, markup=False)

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._live is not None:
            self._live.stop()
        elapsed = time.monotonic() - self.started
        if _quiet or kind is not None or (elapsed < FIRST_REPORT_S and not self._reported):
            return
        if self.count == 0 and self.total is None:  # a step without counts: its time alone
            self._print(f"{self.description}: done in {elapsed:.1f} s")
            return
        self._print(
            f"{self.description}: {self._progress()} in {elapsed:.1f} s ({_rate(self.count, elapsed)})"
        )
