"""Tabulated landscapes (bench/landscapes/*.csv) and search rounds replayed on them.

A table holds real trainings: for each configuration of a design over a task's
`planner.bounds` and each seed, the dev loss, dev accuracy and duration of every epoch. A
search method's point is answered by the nearest configuration of the table (distance in the
unit cube: log scale for log bounds, rank for choices), with the curve of one of its seeds drawn
at random: seed-to-seed noise stays in the replay. A configuration's true value is its final dev
loss averaged over the seeds; trials-to-1 % and regret are measured on true values, while the
searchers see only the noisy draws, as they would in a real round.

A round replays as the engine runs it: `concurrency` trials at a time on a simulated clock
(each epoch lasts what the table recorded), the searcher asked for a point when a slot frees and
told the trial's last result when it ends, and under ASHA Ray's own scheduler (`make_scheduler`)
deciding at every epoch's report whether the trial goes on.
"""

from __future__ import annotations

import csv
import heapq
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

METRIC, MODE = "dev/loss", "min"


@dataclass(frozen=True)
class Curve:
    losses: tuple[float, ...]  # dev loss after epochs 1..n (nan: the trial diverged or failed)
    accuracies: tuple[float, ...]
    seconds: tuple[float, ...]


@dataclass
class Landscape:
    name: str
    header: list[str]  # the table's '#' lines: how it was made
    bounds: dict[str, Any]  # key -> forge_ml.config.BoundConfig
    start: dict[str, Any]  # the task's configured values of those keys (the planner's first centre)
    configs: list[dict[str, Any]]
    curves: list[list[Curve]]  # [config][seed]
    true: list[float] = field(default_factory=list)  # mean final dev loss over seeds (inf: diverged)
    units: list[tuple[float, ...]] = field(default_factory=list)

    def __post_init__(self) -> None:
        finite = [c.losses[-1] for cs in self.curves for c in cs if c.losses and math.isfinite(c.losses[-1])]
        self.penalty = max(finite)  # what a searcher is told for a diverged trial: the worst finished loss
        self.true = [sum(self.final(c) for c in cs) / len(cs) if cs else math.inf for cs in self.curves]
        self.units = [tuple(unit(self.bounds[k], p[k]) for k in self.bounds) for p in self.configs]

    def final(self, curve: Curve) -> float:
        last = curve.losses[-1] if curve.losses else math.nan
        return last if math.isfinite(last) else self.penalty

    @property
    def best(self) -> float:
        return min(self.true)

    def nearest(self, point: dict[str, Any]) -> int:
        u = [unit(self.bounds[k], point[k]) for k in self.bounds]
        return min(range(len(self.units)), key=lambda i: sum((a - b) ** 2 for a, b in zip(u, self.units[i])))

    def within(self, share: float) -> list[int]:
        """Configurations whose true value is within `share` of the best (1 % = 0.01)."""
        return [i for i, v in enumerate(self.true) if v <= self.best * (1 + share)]


def unit(bound: Any, value: Any) -> float:
    """Position of `value` in its bound, 0..1 (log scale for log bounds, rank for choices)."""
    if bound.choices is not None:
        choices = list(bound.choices)
        index = (
            choices.index(value)
            if value in choices
            else min(range(len(choices)), key=lambda i: abs(choices[i] - value))
        )
        return index / max(1, len(choices) - 1)
    lo, hi, v = (
        float(bound.low),
        float(bound.high),
        min(max(float(value), float(bound.low)), float(bound.high)),
    )
    if bound.log:
        return (math.log(v) - math.log(lo)) / (math.log(hi) - math.log(lo))
    return (v - lo) / (hi - lo)


def read_landscape(path: Path) -> Landscape:
    """Read a table written by bench/build_landscape.py."""
    import json

    from forge_ml.config import BoundConfig
    from forge_ml.config.overrides import schema_type

    text = path.read_text(encoding="utf-8").splitlines()
    header = [line for line in text if line.startswith("#")]
    bounds_line = next(line for line in header if line.startswith("# bounds: "))
    bounds = {k: BoundConfig(**v) for k, v in json.loads(bounds_line.removeprefix("# bounds: ")).items()}
    start = json.loads(
        next(line for line in header if line.startswith("# start: ")).removeprefix("# start: ")
    )
    rows = list(csv.DictReader(line for line in text if not line.startswith("#")))
    by_trial: dict[tuple[int, int], list[dict[str, str]]] = {}
    points: dict[int, dict[str, Any]] = {}
    for row in rows:
        config, seed = int(row["config"]), int(row["seed"])
        by_trial.setdefault((config, seed), []).append(row)
        points[config] = {k: (int(float(row[k])) if schema_type(k) is int else float(row[k])) for k in bounds}
    ids = sorted(points)
    seeds = sorted({s for _, s in by_trial})
    curves = []
    for config in ids:
        per_seed = []
        for seed in seeds:
            if (config, seed) not in by_trial:
                continue  # a table still being built
            epochs = sorted(by_trial[(config, seed)], key=lambda r: float(r["epoch"] or 0))
            epochs = [r for r in epochs if r["epoch"]]
            per_seed.append(
                Curve(
                    losses=tuple(_float(r["dev_loss"]) for r in epochs) or (math.nan,),
                    accuracies=tuple(_float(r["dev_accuracy"]) for r in epochs) or (math.nan,),
                    seconds=tuple(_float(r["seconds"]) for r in epochs) or (1.0,),
                )
            )
        curves.append(per_seed)
    return Landscape(path.stem, header, bounds, start, [points[c] for c in ids], curves)


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan


@dataclass(frozen=True)
class Done:
    """One trial as the round saw it end."""

    config: int  # the table's configuration that answered
    loss: float  # the last dev loss it reported (what the searcher is told)
    epochs: int  # epochs it ran
    completed: bool  # ran to its last epoch (ASHA did not stop it)
    epochs_so_far: int  # epochs reported by every trial of the run when this one ended


class UniformPoints:
    """Random search over the bounds, with the Searcher methods a round calls."""

    def __init__(self, bounds: dict[str, Any], rng: random.Random) -> None:
        from forge_ml.config.overrides import schema_type

        self.bounds, self.rng, self.ints = bounds, rng, {k for k in bounds if schema_type(k) is int}

    def suggest(self, trial_id: str) -> dict[str, Any]:
        point: dict[str, Any] = {}
        for key, b in self.bounds.items():
            if b.choices is not None:
                point[key] = self.rng.choice(list(b.choices))
                continue
            if b.log:
                value = math.exp(self.rng.uniform(math.log(b.low), math.log(b.high)))
            else:
                value = self.rng.uniform(b.low, b.high)
            point[key] = min(max(round(value), int(b.low)), int(b.high)) if key in self.ints else value
        return point

    def on_trial_complete(
        self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False
    ) -> None:
        pass


@dataclass(frozen=True)
class _Trial:
    trial_id: str  # all Ray's scheduler reads from a trial


def run_round(
    landscape: Landscape,
    searcher: Any,
    scheduler: Any | None,
    *,
    samples: int,
    fixed: dict[str, Any],
    concurrency: int,
    rng: random.Random,
    epochs_before: int,
    prefix: str,
) -> Iterator[tuple[Done, dict[str, Any]]]:
    """Replay one round of `samples` trials; yield each trial (and its full point) as it ends."""
    from ray.tune.schedulers import TrialScheduler

    if scheduler is not None:
        scheduler.set_search_properties(METRIC, MODE)
    events: list[tuple[float, int, str]] = []
    running: dict[str, tuple[int, Curve, dict[str, Any], int]] = {}  # id -> (config, curve, point, epoch)
    started = 0
    epochs = epochs_before
    tie = 0

    def start(now: float) -> None:
        nonlocal started, tie
        tid = f"{prefix}{started}"
        started += 1
        point = {**fixed, **searcher.suggest(tid)}
        config = landscape.nearest(point)
        curve = rng.choice(landscape.curves[config])
        running[tid] = (config, curve, point, 0)
        if scheduler is not None:
            scheduler.on_trial_add(None, _Trial(tid))
        heapq.heappush(events, (now + curve.seconds[0], tie, tid))
        tie += 1

    for _ in range(min(concurrency, samples)):
        start(0.0)
    while events:
        now, _, tid = heapq.heappop(events)
        config, curve, point, epoch = running[tid]
        loss = curve.losses[epoch] if math.isfinite(curve.losses[epoch]) else landscape.penalty
        epochs += 1
        last = epoch + 1 == len(curve.losses)
        result = {"epoch": epoch + 1, METRIC: loss}
        stopped = (
            scheduler is not None
            and scheduler.on_trial_result(None, _Trial(tid), result) == TrialScheduler.STOP
            and not last
        )
        if last or stopped:
            if scheduler is not None:
                scheduler.on_trial_complete(None, _Trial(tid), result)
            searcher.on_trial_complete(tid, {**result, **{k: v for k, v in point.items() if k not in fixed}})
            del running[tid]
            yield Done(config, loss, epoch + 1, last, epochs), point
            if started < samples:
                start(now)
            continue
        running[tid] = (config, curve, point, epoch + 1)
        heapq.heappush(events, (now + curve.seconds[epoch + 1], tie, tid))
        tie += 1
