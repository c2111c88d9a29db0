"""Replay Ray Tune's ASHA scheduler on per-epoch curves recorded from real trials.

At concurrency c a round runs its trials c at a time, and ASHA decides at each epoch's report
whether the trial goes on by comparing it with what the other trials reported at that rung *so
far*. Which trial reports first depends on timing, so the epochs ASHA saves change from one run
of the same round to the next: one real run is an anecdote. A replay feeds the recorded dev-loss
curves to Ray's own scheduler (the object the engine builds, `make_scheduler`), in the order a
simulated clock gives them, with every epoch's duration drawn from the durations recorded for
that epoch. Many replays give the distribution of what the same round can do.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Curve:
    """One trial as a FIFO round ran it to the end."""

    losses: tuple[float, ...]  # dev loss after epochs 1..n
    seconds: tuple[float, ...]  # each epoch's duration (the first includes the trial's start)


@dataclass(frozen=True)
class Replay:
    epochs: int  # epochs reported by all trials together (what the round's callback counts)
    best_loss: float  # the lowest dev loss any trial reported
    stopped: int  # trials stopped before their last epoch


@dataclass(frozen=True)
class _Trial:
    trial_id: str  # all the scheduler reads from a trial


def epoch_durations(curves: Sequence[Curve]) -> list[list[float]]:
    """Pool the recorded durations by epoch: index e holds every trial's epoch e+1."""
    longest = max(len(c.seconds) for c in curves)
    return [[c.seconds[e] for c in curves if e < len(c.seconds)] for e in range(longest)]


def replay(
    curves: Sequence[Curve],
    new_scheduler: Callable[[], Any],
    *,
    concurrency: int,
    durations: Sequence[Sequence[float]],
    rng: random.Random,
    metric: str = "dev/loss",
    mode: str = "min",
) -> Replay:
    """Run the trials `concurrency` at a time, in order, through a fresh scheduler.

    Each epoch of each trial lasts a duration drawn from `durations[epoch]`; a report reaches
    the scheduler when its epoch ends, and a STOP frees the trial's slot for the next trial.
    """
    from ray.tune.schedulers import TrialScheduler

    scheduler = new_scheduler()
    scheduler.set_search_properties(metric, mode)
    events: list[tuple[float, int, int, int]] = []  # (time, tie-break, trial, epoch index)
    waiting = list(range(len(curves)))
    tie = 0

    def start(index: int, now: float) -> None:
        nonlocal tie
        scheduler.on_trial_add(None, _Trial(str(index)))
        heapq.heappush(events, (now + rng.choice(durations[0]), tie, index, 0))
        tie += 1

    for _ in range(min(concurrency, len(waiting))):
        start(waiting.pop(0), 0.0)
    epochs, stopped, best = 0, 0, float("inf")
    while events:
        now, _, index, epoch = heapq.heappop(events)
        curve, trial = curves[index], _Trial(str(index))
        loss = curve.losses[epoch]
        result = {"epoch": epoch + 1, metric: loss}
        epochs += 1
        best = min(best, loss)
        last = epoch + 1 == len(curve.losses)
        if scheduler.on_trial_result(None, trial, result) == TrialScheduler.STOP and not last:
            stopped += 1
            last = True
        if last:  # as Ray's controller does for a trial that ends or is stopped
            scheduler.on_trial_complete(None, trial, result)
            if waiting:
                start(waiting.pop(0), now)
            continue
        heapq.heappush(events, (now + rng.choice(durations[epoch + 1]), tie, index, epoch + 1))
        tie += 1
    return Replay(epochs=epochs, best_loss=best, stopped=stopped)
