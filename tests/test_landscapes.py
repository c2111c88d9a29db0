"""The landscape replay of bench/search_landscapes.py: a table answers points by its grid, rounds
replay through the engine's own searcher and scheduler, and the figures count what they say."""

from __future__ import annotations

import json
import math
import random
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from _landscape import UniformPoints, read_landscape, run_round
from search_landscapes import REGRET_AT, Setup, baseline_bounds, config_for, full_space, measure

from forge_ml.tuning.engine import make_scheduler

LRS = (1e-4, 1e-3, 1e-2)
EPOCHS = (1, 2, 4)
RANKS = (4, 16)
BOUNDS = {
    "training.learning_rate": {"low": 1e-4, "high": 1e-2, "log": True},
    "training.epochs": {"low": 1, "high": 4},
    "lora.r": {"choices": list(RANKS)},
}
BEST = (1e-3, 4, 16)


def loss_after(lr: float, epochs: int, r: int, epoch: int, seed: int) -> float:
    """A landscape with one best point (BEST) and a cliff at the highest learning rate."""
    if lr == 1e-2 and epoch >= 2:
        return math.nan  # diverged
    gap = abs(math.log10(lr) + 3) + (0.2 if r != 16 else 0.0) + 0.3 * (4 - epochs) / 3
    return 1.0 + gap + 1.0 / epoch + 0.01 * seed


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("landscape") / "toy.csv"
    lines = [
        "# landscape: toy",
        f"# bounds: {json.dumps(BOUNDS)}",
        f"# start: {json.dumps({'training.learning_rate': 1e-4, 'training.epochs': 1, 'lora.r': 4})}",
        "config,seed,training.learning_rate,training.epochs,lora.r,epoch,train_loss,dev_loss,dev_accuracy,seconds",
    ]
    config = 0
    for lr in LRS:
        for epochs in EPOCHS:
            for r in RANKS:
                for seed in (0, 1):
                    for epoch in range(1, epochs + 1):
                        loss = loss_after(lr, epochs, r, epoch, seed)
                        lines.append(f"{config},{seed},{lr},{epochs},{r},{epoch},1.0,{loss},0.5,{1.0 + seed}")
                config += 1
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_the_table_reads_back_as_written(table):
    land = read_landscape(table)
    assert len(land.configs) == len(LRS) * len(EPOCHS) * len(RANKS)
    assert [len(c) for c in land.curves] == [2] * len(land.configs)
    best = land.true.index(land.best)
    assert tuple(land.configs[best].values()) == BEST
    assert land.best == pytest.approx(loss_after(*BEST, 4, 0) + 0.005)
    assert land.within(0.01) == [best]
    diverged = [
        i
        for i, c in enumerate(land.configs)
        if c["training.learning_rate"] == 1e-2 and c["training.epochs"] > 1
    ]
    assert all(
        land.true[i] == land.penalty for i in diverged
    )  # a diverged trial counts as the worst finished one


@settings(max_examples=200, deadline=None)
@given(
    lr=st.floats(1e-4, 1e-2),
    epochs=st.integers(1, 4),
    r=st.sampled_from(RANKS),
)
def test_a_point_snaps_to_the_nearest_grid_value_of_each_key(table, lr, epochs, r):
    land = read_landscape(table)
    got = land.configs[land.nearest({"training.learning_rate": lr, "training.epochs": epochs, "lora.r": r})]
    log_lr = math.log10(lr)
    assert got["lora.r"] == r
    assert (
        abs(math.log10(got["training.learning_rate"]) - log_lr)
        <= min(abs(math.log10(v) - log_lr) for v in LRS) + 1e-9
    )
    assert abs(got["training.epochs"] - epochs) <= min(abs(e - epochs) for e in EPOCHS)


def round_of(table, scheduler: str, samples: int):
    land = read_landscape(table)
    cfg = config_for(land, 0, asha=scheduler == "asha", samples=samples, concurrency=2)
    params = full_space(cfg)
    sched = make_scheduler(cfg, params) if scheduler == "asha" else None
    rng = random.Random(3)
    return land, list(
        run_round(
            land,
            UniformPoints(land.bounds, rng),
            sched,
            samples=samples,
            fixed={},
            concurrency=2,
            rng=rng,
            epochs_before=0,
            prefix="t",
        )
    )


def test_fifo_runs_every_trial_to_its_last_epoch(table):
    land, ended = round_of(table, "fifo", 24)
    assert len(ended) == 24
    assert all(done.completed for done, _ in ended)
    assert all(done.epochs == land.configs[done.config]["training.epochs"] for done, _ in ended)
    assert max(done.epochs_so_far for done, _ in ended) == sum(done.epochs for done, _ in ended)


def test_asha_stops_trials_and_spends_fewer_epochs(table):
    _, fifo = round_of(table, "fifo", 24)
    _, asha = round_of(table, "asha", 24)
    assert len(asha) == 24
    stopped = [done for done, _ in asha if not done.completed]
    assert stopped and all(done.epochs < 4 for done in stopped)
    assert max(d.epochs_so_far for d, _ in asha) < max(d.epochs_so_far for d, _ in fifo)


@pytest.mark.parametrize("method", ["random", "tpe", "planner+tpe"])
def test_every_method_finds_the_best_point_and_regret_only_falls(table, method):
    land = read_landscape(table)
    out = measure(method, land, 0, asha=False, setup=Setup(cap=150))
    assert 1 <= out.trials < 150
    assert out.epochs >= out.trials
    assert len(out.regret) == len(REGRET_AT)
    assert all(r >= 0 for r in out.regret)
    assert list(out.regret) == sorted(out.regret, reverse=True)


def test_under_asha_every_trial_plans_the_most_epochs_its_budget(table):
    land = read_landscape(table)
    cfg = config_for(land, 0, asha=True, samples=16, concurrency=2)
    params = full_space(cfg)
    assert params["training.epochs"].values == (4,)
    rng = random.Random(5)
    ended = list(
        run_round(
            land,
            UniformPoints(baseline_bounds(cfg), rng),
            make_scheduler(cfg, params),
            samples=16,
            fixed={},
            concurrency=2,
            rng=rng,
            epochs_before=0,
            prefix="t",
        )
    )
    assert {land.configs[done.config]["training.epochs"] for done, _ in ended} == {4}
    assert any(not done.completed for done, _ in ended)  # ASHA, not the plan, cut some short
