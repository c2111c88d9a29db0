"""Progress of the steps a person waits on: counts and rates on stderr, never on stdout.

On a terminal a `Stage` is a transient line that updates in place. Elsewhere (a log file, CI)
it prints a line once the step has run for `FIRST_REPORT_S`, every `REPORT_EVERY_S` after,
and a closing line with the count, time and rate; a step shorter than that prints nothing.
`--json` turns it all off (`set_quiet`).

Training reports once per epoch, and a real base's epoch on a CPU takes minutes: `paced` turns the
trainer's fractional epoch into a `Position` (where, how fast) at most every so often, for a line
like `epoch 1/3 at 61 % (about 5 min 10 s to go)` (`epoch_lines`; a round's trials post theirs to
its progress line: forge_ml/tuning/steps.py).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType

FIRST_REPORT_S = 2.0
REPORT_EVERY_S = 10.0
EPOCH_LINE_EVERY_S = 60.0  # away from a terminal, where an epoch under way stands, this often
LONGEST_LEFT_S = 7 * 24 * 3600.0  # a longer time to go says nothing useful (a speed near 0): not shown
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


def minutes(seconds: float) -> str:
    """'42 s', '6 min 12 s', '1 h 05 min': a round's time as a person reads it."""
    whole = int(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"


@dataclass(frozen=True)
class Position:
    """A training's place (a trial's, or `forge-ml train`'s): `epoch` is the trainer's fractional
    epoch (1.25: a quarter into the second), `epochs_per_s` its speed since it (re)started, 0 while
    unknown."""

    epoch: float
    epochs_per_s: float = 0.0

    @property
    def current(self) -> int:
        """The epoch under way, from 1; at an epoch's exact end (1.0), the epoch just done."""
        return max(1, math.ceil(self.epoch))

    @property
    def done_in_current(self) -> float:
        """The fraction of the current epoch done, in [0, 1]."""
        return self.epoch - (self.current - 1)

    def seconds_left_in_epoch(self) -> float | None:
        """None while the speed is unknown, at the epoch's end, or when too slow to say anything."""
        if self.epochs_per_s <= 0 or self.done_in_current >= 1:
            return None
        left = (1.0 - self.done_in_current) / self.epochs_per_s
        return left if left <= LONGEST_LEFT_S else None


def where_in_epoch(p: Position, of: str = "") -> str:
    """`epoch 1 at 61 % (about 5 min 10 s to go)`; `of` follows the epoch's number (`/3`)."""
    text = f"epoch {p.current}{of} at {math.floor(p.done_in_current * 100)} %"
    left = p.seconds_left_in_epoch()
    return text + (f" (about {minutes(max(left, 1.0))} to go)" if left is not None else "")


def paced(
    sink: Callable[[Position], None],
    every_s: float,
    *,
    at_first_step: bool = True,
    clock: Callable[[], float] = time.monotonic,
) -> Callable[[float], None]:
    """A trainer step hook (it gets the fractional epoch) that hands `sink` the position, with its
    speed since the first step it saw, at most every `every_s` (and at the first step, or not)."""
    first: tuple[float, float] | None = None  # (clock, epoch) at the first step of this process
    last = -math.inf

    def step(epoch: float) -> None:
        nonlocal first, last
        now = clock()
        if first is None:
            first = (now, epoch)
            if not at_first_step:
                last = now
                return
        if now - last < every_s:
            return
        last = now
        elapsed = now - first[0]
        speed = (epoch - first[1]) / elapsed if elapsed > 0 else 0.0
        sink(Position(epoch, max(speed, 0.0)))

    return step


def epoch_lines(of: str = "") -> Callable[[float], None] | None:
    """A trainer step hook printing `  epoch 1/3 at 61 % (about 5 min to go)` every EPOCH_LINE_EVERY_S,
    away from a terminal (a terminal has the trainer's own bar); None where nothing would print."""
    from forge_ml.console import console

    if _quiet or console.is_terminal:
        return None
    return paced(
        lambda p: console.print(f"  {where_in_epoch(p, of)}", highlight=False, markup=False),
        EPOCH_LINE_EVERY_S,
        at_first_step=False,
    )
