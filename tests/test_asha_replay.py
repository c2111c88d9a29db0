"""The ASHA replay of bench/round_efficiency.py: Ray's own scheduler (built as the engine builds
it) decides on recorded curves, in the order a simulated clock gives the reports."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from asha_replay import Curve, epoch_durations, replay

from forge_ml.config import ForgeConfig
from forge_ml.tuning.engine import make_scheduler

GOOD = Curve(losses=(1.0, 0.6, 0.4, 0.3, 0.25, 0.2), seconds=(2.0,) * 6)
BAD = Curve(losses=(2.0, 1.99, 1.98, 1.97, 1.96, 1.95), seconds=(2.0,) * 6)
CURVES = [GOOD, BAD] * 4  # good and bad alternate, as the benchmark's first points do


def scheduler_for(kind: str):
    cfg = ForgeConfig(name="replay", project_dir="/nonexistent")
    cfg.tune.scheduler, cfg.tune.grace_period, cfg.tune.reduction_factor = kind, 1, 2
    cfg.training.epochs = 6
    return lambda: make_scheduler(cfg, {})


def run(kind: str, durations, seed: int = 0):
    return replay(CURVES, scheduler_for(kind), concurrency=2, durations=durations, rng=random.Random(seed))


def test_fifo_trains_every_epoch_of_every_trial():
    result = run("fifo", epoch_durations(CURVES))
    assert (result.epochs, result.stopped, result.best_loss) == (48, 0, 0.2)


def test_asha_with_even_timing_stops_every_bad_trial_at_the_first_rung():
    # Equal durations: the good trial of each pair reports first, so each bad one is cut at epoch 1.
    result = run("asha", epoch_durations(CURVES))
    assert result.stopped >= 4 and result.best_loss == 0.2
    assert result.epochs <= 48 - 4 * 5  # at least the 4 bad trials' last 5 epochs saved


def test_asha_figures_vary_with_arrival_order_and_repeat_with_the_seed():
    durations = [[0.5, 1.0, 4.0]] * 6  # uneven: a bad trial sometimes reports first and survives a rung
    epochs = [run("asha", durations, seed).epochs for seed in range(60)]
    assert len(set(epochs)) > 1  # timing changes what ASHA saves
    assert all(e < 48 for e in epochs)
    assert [run("asha", durations, seed).epochs for seed in range(60)] == epochs


@pytest.mark.parametrize("concurrency", [1, 3, 8])
def test_every_epoch_counted_is_one_a_trial_reported(concurrency):
    result = replay(
        CURVES,
        scheduler_for("asha"),
        concurrency=concurrency,
        durations=epoch_durations(CURVES),
        rng=random.Random(1),
    )
    assert len(CURVES) <= result.epochs <= 48
    assert result.epochs >= len(CURVES) + (len(CURVES) - result.stopped) * 5  # finished trials ran all 6
