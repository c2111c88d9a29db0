"""Helpers shared by the benchmarks in bench/: a throwaway example project, quiet libraries, tables.

The benchmark scripts run as `python bench/<name>.py`, so this module is imported by its bare
name (bench/ is first on sys.path).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

EXAMPLE = "drone-router"
# the CLI through the running interpreter: works where no `forge-ml` script is on PATH (a GPU box's
# system Python with forge-ml on PYTHONPATH) as well as in the project's .venv
FORGE_ML = [sys.executable, "-m", "forge_ml"]
BUSY_CORES = 0.25  # cores used by other processes above which a measurement counts as taken on a busy machine


def quiet_libraries() -> None:
    """Keep the libraries' progress bars, warnings and info logs out of the benchmark output.

    Call before importing torch/transformers/datasets/mlflow. Also forces Hugging Face offline:
    the benchmarks only ever use the locally built tiny model.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    warnings.filterwarnings("ignore")
    for name in ("mlflow", "alembic", "forge_ml", "datasets", "transformers", "trl", "peft"):
        logging.getLogger(name).setLevel(logging.ERROR)


@contextlib.contextmanager
def captured_stdout(enabled: bool) -> Iterator[io.StringIO]:
    """Swallow what the trainers print to stdout (their per-epoch log dicts) unless disabled."""
    buffer = io.StringIO()
    if not enabled:
        yield buffer
        return
    with contextlib.redirect_stdout(buffer):
        yield buffer


@dataclass
class BenchProject:
    project: Any  # forge_ml.project.Project
    cfg: Any  # forge_ml.config.ForgeConfig
    tmpdir: Path


TINY = "tiny"


def model_overrides(model: str) -> list[str]:
    """The overrides selecting a model preset (`tiny`, `smollm2-135m-instruct`, ...)."""
    return [] if model == TINY else [f"model={model}"]


def keep_every_kth(path: Path, keep: int | None) -> None:
    """Keep an even spread of `keep` lines of a JSONL file (every k-th), so categories stay mixed."""
    if keep is None:
        return
    lines = path.read_text(encoding="utf-8").splitlines()
    step = max(1, len(lines) // keep)
    path.write_text("\n".join(lines[::step][:keep]) + "\n", encoding="utf-8")


@contextlib.contextmanager
def example_project(
    overrides: Sequence[str], *, keep: bool = False, examples: int | None = None, gold: int | None = None
) -> Iterator[BenchProject]:
    """Yield the drone-router example copied into a temp dir, with its config composed with `overrides`.

    `examples` / `gold` keep that many lines of the canonical / gold set (a real model on a CPU
    cannot take the whole example in a benchmark's time). The working directory moves into the
    temp dir meanwhile, so nothing a library writes relative to it (MLflow's `./mlruns`, say)
    lands in the caller's checkout.
    """
    from forge_ml.compose import compose_config
    from forge_ml.project import init_project

    tmpdir = Path(tempfile.mkdtemp(prefix="forge-bench-"))
    cwd = Path.cwd()
    try:
        project = init_project(tmpdir / "bench", example=EXAMPLE)
        keep_every_kth(project.root / "dataset" / "canonical.jsonl", examples)
        keep_every_kth(project.root / "dataset" / "gold.jsonl", gold)
        cfg = compose_config(project, list(overrides))
        os.chdir(tmpdir)
        yield BenchProject(project=project, cfg=cfg, tmpdir=tmpdir)
    finally:
        os.chdir(cwd)
        if keep:
            print(f"(kept the benchmark project in {tmpdir})", file=sys.stderr)
        else:
            shutil.rmtree(tmpdir, ignore_errors=True)


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def spread(values: Sequence[float]) -> float:
    """Return (max - min) / median: how far apart the repeats of one side are."""
    mid = median(values)
    return (max(values) - min(values)) / mid if values and mid else 0.0


def ratio_range(numerators: Sequence[float], denominators: Sequence[float]) -> str:
    """The ratio's spread over every pairing of the two sides' runs: `lowest..highest`."""
    if not numerators or not denominators or not min(denominators):
        return "n/a"
    return f"{min(numerators) / max(denominators):.2f}..{max(numerators) / min(denominators):.2f}"


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) of `values`, linear between the closest ranks."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def bootstrap_ratio(
    top: Sequence[float],
    bottom: Sequence[float],
    stat: Callable[[list[float]], float] = statistics.median,
    draws: int = 2000,
    seed: int = 12345,
) -> tuple[float, float]:
    """A 90 % interval of stat(top) / stat(bottom), resampling the seeds with replacement, paired:
    top[i] and bottom[i] come from the same seed."""
    rng = random.Random(seed)
    n, ratios = len(top), []
    for _ in range(draws):
        picks = [rng.randrange(n) for _ in range(n)]
        ratios.append(stat([top[i] for i in picks]) / max(stat([bottom[i] for i in picks]), 1e-12))
    return percentile(ratios, 5), percentile(ratios, 95)


def distribution(values: Sequence[float], fmt: str = ".3f", *, inner: float | None = None) -> str:
    """`median (range min..max, n=N)`; with `inner=10`: `median (p10..p90 a..b; range min..max, n=N)`."""
    if not values:
        return "no values"
    text = f"{median(values):{fmt}} ("
    if inner is not None:
        low, high = percentile(values, inner), percentile(values, 100 - inner)
        text += f"p{inner:g}..p{100 - inner:g} {low:{fmt}}..{high:{fmt}}; "
    return text + f"range {min(values):{fmt}}..{max(values):{fmt}}, n={len(values)})"


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, left: int = 1) -> None:
    """Print a plain text table: the first `left` columns left-aligned, the figures right-aligned."""
    cells = [[str(h) for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]

    def line(row: Sequence[str]) -> str:
        parts = [cell.ljust(w) if i < left else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths))]
        return "  ".join(parts).rstrip()

    print(line(cells[0]))
    print("  ".join("-" * w for w in widths))
    for row in cells[1:]:
        print(line(row))


def _busy_ticks() -> int | None:
    """Return the machine's non-idle CPU ticks since boot (Linux /proc/stat), or None elsewhere."""
    try:
        with open("/proc/stat", encoding="ascii") as fh:
            fields = fh.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    values = [int(v) for v in fields[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    guest = sum(values[8:10]) if len(values) > 9 else 0  # already counted in user/nice
    return sum(values) - idle - guest


def _own_cpu_seconds() -> float:
    import resource

    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


@dataclass
class OtherLoad:
    """CPU used by other processes during a measurement, in cores (None where /proc/stat is missing)."""

    cores: float | None = None

    def __str__(self) -> str:
        return "n/a" if self.cores is None else f"{self.cores:.2f}"

    @property
    def quiet(self) -> bool:
        return self.cores is None or self.cores <= BUSY_CORES


@contextlib.contextmanager
def other_load() -> Iterator[OtherLoad]:
    """Measure how many cores the rest of the machine kept busy while the block ran.

    A benchmark is only as good as the machine is quiet: a figure taken while another process
    held a core (on a 2-core machine) says more about that process than about the code.
    """
    load = OtherLoad()
    ticks0, own0, wall0 = _busy_ticks(), _own_cpu_seconds(), time.perf_counter()
    yield load
    ticks1, own1, wall1 = _busy_ticks(), _own_cpu_seconds(), time.perf_counter()
    if ticks0 is None or ticks1 is None or wall1 <= wall0:
        return
    hz = os.sysconf("SC_CLK_TCK")
    others = (ticks1 - ticks0) / hz - (own1 - own0)
    load.cores = max(others, 0.0) / (wall1 - wall0)


def wait_for_quiet(max_wait_s: float, *, sample_s: float = 2.0) -> None:
    """Wait (at most `max_wait_s`) until other processes use at most BUSY_CORES, so a run starts quiet."""
    deadline = time.monotonic() + max_wait_s
    said = False
    while time.monotonic() < deadline:
        with other_load() as load:
            time.sleep(sample_s)
        if load.quiet:
            return
        if not said:
            print(
                f"  (other processes use {load} cores; waiting up to {max_wait_s:.0f} s for a quiet machine)"
            )
            sys.stdout.flush()
            said = True
    if said:
        print("  (still busy; measuring anyway)")


class HasLoad(Protocol):
    load: OtherLoad


L = TypeVar("L", bound=HasLoad)


@dataclass
class Selection(Generic[L]):
    """The runs of each side a verdict uses; `note` says what was left out and why."""

    first: list[L]
    second: list[L]
    note: str | None = None
    reliable: bool = True

    @property
    def verdict_suffix(self) -> str:
        return "" if self.reliable else ", UNRELIABLE: busy machine"


def pick_quiet(first: Sequence[L], second: Sequence[L]) -> Selection[L]:
    """Return the runs of each side the verdict uses.

    Runs during which other processes kept more than BUSY_CORES busy are left out, as long as
    each side keeps at least one quiet run; otherwise every run counts and the selection is
    marked unreliable.
    """
    quiet_first = [r for r in first if r.load.quiet]
    quiet_second = [r for r in second if r.load.quiet]
    if len(quiet_first) == len(first) and len(quiet_second) == len(second):
        return Selection(list(first), list(second))
    if quiet_first and quiet_second:
        dropped = len(first) + len(second) - len(quiet_first) - len(quiet_second)
        note = f"left out {dropped} run(s) taken on a busy machine (> {BUSY_CORES} cores)"
        return Selection(quiet_first, quiet_second, note)
    note = "every run of one side was taken on a busy machine: the figures are unreliable; rerun when it is quiet"
    return Selection(list(first), list(second), note, reliable=False)


def set_threads(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)


def positive_int(text: str) -> int:
    import argparse

    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text}: must be at least 1")
    return value
