"""The offline planner: the whole bounds for TPE, local points in a trust region around the best
trial, a pattern move after a round that moved the best, and ASHA's epochs left alone."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from plan_strategies import value_in

from forge_ml.compose import compose_config
from forge_ml.config.overrides import config_value, schema_type, with_overrides
from forge_ml.planner import validate_plan
from forge_ml.planner.history import History, TrialRow
from forge_ml.planner.offline import (
    bound_expression,
    local_points,
    offline_plan,
    pattern_point,
    trust_radius,
)
from forge_ml.search import parse_space


@pytest.fixture
def cfg(example_project):
    return compose_config(example_project, ["planner.timeout_s=3", "planner.max_retries=0"])


# hypothesis with the function-scoped `cfg` fixture: the tests only read it
READS_CFG = {
    "deadline": None,
    "derandomize": True,
    "suppress_health_check": [HealthCheck.function_scoped_fixture],
}


def _trial(round_: int, lr: float, loss: float) -> TrialRow:
    return TrialRow(
        round_,
        f"t{round_}-{lr}",
        "FINISHED",
        {"training.learning_rate": lr, "training.epochs": 4, "training.batch_size": 16},
        {"dev/loss": loss},
    )


def _whole_bounds(cfg, plan) -> None:
    params = parse_space(plan.search_space)
    budget = {"training.epochs"} if cfg.tune.scheduler == "asha" else set()  # ASHA's, not searched
    assert set(params) == set(cfg.planner.bounds) - budget and plan.fixed_overrides == {}
    for key in params:
        bound = cfg.planner.bounds[key]
        expected = tuple(bound.choices) if bound.choices is not None else (bound.low, bound.high)
        got = params[key].values if bound.choices is not None else (params[key].low, params[key].high)
        assert got == pytest.approx(expected), key


def _within(cfg, point: dict, center: dict, radius: float) -> bool:
    """Whether `point` lies in the trust region of `radius` around `center`."""
    for key in point:
        bound = cfg.planner.bounds[key]
        if bound.choices is not None:
            places = abs(bound.choices.index(point[key]) - bound.choices.index(center[key]))
            if places > max(1, round(radius * len(bound.choices))):
                return False
        else:
            scale = math.log if bound.log else float
            span = scale(bound.high) - scale(bound.low)
            slack = 0.5 / span if schema_type(key) is int else 1e-6  # an integer rounds to the nearest
            if abs(scale(point[key]) - scale(center[key])) / span > radius + slack:
                return False
    return True


def test_later_rounds_search_the_whole_bounds_and_first_try_points_around_the_best_trial(cfg):
    best = {key: config_value(cfg, key) for key in cfg.planner.bounds} | {
        "training.learning_rate": 6e-3,
        "training.epochs": 4,
        "training.batch_size": 16,
    }
    history = History(
        trials=[
            TrialRow(1, "a", "FINISHED", {**best, "training.learning_rate": 2e-3}, {"dev/loss": 0.9}),
            TrialRow(1, "b", "FINISHED", best, {"dev/loss": 0.5}),
        ],
        failures=[{"category": "hover"}] * 5 + [{"category": "land"}] * 2 + [{"category": "rtl"}],
    )
    plan = offline_plan(cfg, history, round_number=2)
    assert plan == offline_plan(cfg, history, round_number=2)  # deterministic
    assert validate_plan(plan.to_dict(), cfg) == plan
    _whole_bounds(cfg, plan)  # TPE's part of the round: everywhere, warm-started with every trial
    radius = trust_radius(history, cfg.planner.trust_radius, "dev/loss", "min")
    assert len(plan.first_points) == min(cfg.planner.local_points, plan.num_samples // 2) > 0
    for point in plan.first_points:
        assert point != best and _within(cfg, point, best, radius), point
    assert len({json.dumps(p, sort_keys=True) for p in plan.first_points}) == len(plan.first_points)
    assert "drawn within radius 0.25 of trial b of round 1" in plan.hypothesis
    assert plan.augment_focus == ["hover", "land", "rtl"]  # most gold failures first
    assert "split by gold failures over hover (5), land (2), rtl (1)" in plan.hypothesis


def test_a_best_trial_from_a_round_outside_the_flywheel_is_named_by_its_run(cfg):
    """A `forge-ml tune` round (run tune-001) is no flywheel round: the plan names it as MLflow does."""
    best = {key: config_value(cfg, key) for key in cfg.planner.bounds}
    history = History(
        trials=[
            TrialRow(0, "hand", "FINISHED", best, {"dev/loss": 0.4}, round_name="tune-001"),
            TrialRow(1, "fly", "FINISHED", {**best, "training.learning_rate": 2e-3}, {"dev/loss": 0.9}),
        ]
    )
    plan = offline_plan(cfg, history, round_number=2)
    assert "of trial hand of tune-001 (dev/loss 0.4)" in plan.hypothesis, plan.hypothesis
    assert "round 0" not in plan.hypothesis


@settings(max_examples=60, **READS_CFG)
@given(data=st.data())
def test_local_points_stay_in_the_region_and_inside_the_bounds_for_any_best_and_radius(cfg, data):
    best = {key: data.draw(value_in(key, bound)) for key, bound in cfg.planner.bounds.items()}
    radius = data.draw(st.floats(0.01, 0.5))
    count = data.draw(st.integers(0, 6))
    space = {key: bound_expression(key, bound) for key, bound in cfg.planner.bounds.items()}
    history = History(trials=[TrialRow(1, "b", "FINISHED", best, {"dev/loss": 0.5})])
    points = local_points(cfg, space, history, history.trials[0], radius, count)
    params = parse_space(space)
    assert len(points) <= count
    for point in points:
        assert point != best and _within(cfg, point, best, radius), (point, best, radius)
        assert all(params[k].contains(v) for k, v in point.items())


def test_after_a_round_that_moved_the_best_one_first_point_goes_a_step_further_along_the_move(cfg):
    cfg = with_overrides(cfg, {"tune.scheduler": "fifo"})  # the epochs searched too (ASHA's budget otherwise)
    old = {key: config_value(cfg, key) for key in cfg.planner.bounds} | {
        "training.learning_rate": 1e-3,
        "training.epochs": 3,
        "training.batch_size": 8,
    }
    new = old | {"training.learning_rate": 2e-3, "training.epochs": 4, "training.batch_size": 16}
    moved = History(
        trials=[
            TrialRow(1, "a", "FINISHED", old, {"dev/loss": 0.9}),
            TrialRow(2, "b", "FINISHED", new, {"dev/loss": 0.5}),
            TrialRow(2, "c", "FINISHED", old | {"training.learning_rate": 5e-3}, {"dev/loss": 1.2}),
        ]
    )
    plan = offline_plan(cfg, moved, round_number=3)
    assert validate_plan(plan.to_dict(), cfg) == plan
    # log scale for the learning rate (x2 again), one more epoch, the next batch size: the rest stay
    assert plan.first_points[0] == new | {
        "training.learning_rate": pytest.approx(4e-3),
        "training.epochs": 5,
        "training.batch_size": 32,
    }
    assert len(plan.first_points) == min(cfg.planner.local_points, plan.num_samples // 2)
    radius = trust_radius(moved, cfg.planner.trust_radius, "dev/loss", "min")
    assert all(_within(cfg, point, new, radius) for point in plan.first_points[1:])
    drawn = len(plan.first_points) - 1
    assert f"{drawn} trial(s) drawn within radius {radius:.2f} of trial b of round 2" in plan.hypothesis
    assert "1 a step on along its move from trial a (a pattern move)" in plan.hypothesis

    # a round that did not move the best: no pattern move, every first point in the region
    stalled = History(trials=[*moved.trials, TrialRow(3, "d", "FINISHED", old, {"dev/loss": 0.7})])
    plan = offline_plan(cfg, stalled, round_number=4)
    assert pattern_point(cfg, plan.search_space, stalled, stalled.trials[1]) is None
    assert "pattern move" not in plan.hypothesis
    radius = trust_radius(stalled, cfg.planner.trust_radius, "dev/loss", "min")
    assert plan.first_points and all(_within(cfg, point, new, radius) for point in plan.first_points)


@settings(max_examples=80, **READS_CFG)
@given(data=st.data())
def test_a_pattern_move_goes_along_the_move_inside_the_bounds_for_any_two_bests(cfg, data):
    old, new = (
        {key: data.draw(value_in(key, bound)) for key, bound in cfg.planner.bounds.items()} for _ in range(2)
    )
    space = {key: bound_expression(key, bound) for key, bound in cfg.planner.bounds.items()}
    history = History(
        trials=[
            TrialRow(1, "a", "FINISHED", old, {"dev/loss": 0.9}),
            TrialRow(2, "b", "FINISHED", new, {"dev/loss": 0.5}),
        ]
    )
    found = pattern_point(cfg, space, history, history.trials[1])
    if found is None:  # only when the step leads back to the best or to a point already tried
        return
    point, before = found
    assert before is history.trials[0] and point not in (old, new)
    params = parse_space(space)
    for key, value in point.items():
        assert params[key].contains(value), (key, value)
        bound = cfg.planner.bounds[key]
        if bound.choices is not None:
            at = bound.choices.index
            expected = min(max(2 * at(new[key]) - at(old[key]), 0), len(bound.choices) - 1)
            assert at(value) == expected, (key, old[key], new[key], value)
            continue
        scale = math.log if bound.log else float
        span = scale(bound.high) - scale(bound.low)
        step = (scale(new[key]) - scale(old[key])) / span
        went = (scale(value) - scale(new[key])) / span
        slack = 0.5 / span if schema_type(key) is int else 1e-5  # integers round, floats print to 6 digits
        assert went * step >= -slack * abs(step) and abs(went) <= abs(step) + slack, (key, old, new, value)


def test_the_first_round_searches_the_whole_bounds_trying_the_configured_values_first(cfg):
    plan = offline_plan(cfg, History(), round_number=1)
    _whole_bounds(cfg, plan)
    configured = {key: config_value(cfg, key) for key in parse_space(plan.search_space)}
    assert plan.first_points == [configured]
    assert validate_plan(plan.to_dict(), cfg) == plan  # what Claude's replies must pass, this passes
    assert "TPE over the whole bounds, the configured values first" in plan.hypothesis


@pytest.mark.parametrize("configured", [2, 5])
def test_under_asha_the_epochs_are_its_budget_not_searched_and_fifo_searches_them(cfg, configured):
    history = History(trials=[_trial(1, 2e-3, 0.5)])
    for number, seen in ((1, History()), (2, history)):
        asha_cfg = with_overrides(cfg, {"tune.scheduler": "asha", "training.epochs": configured})
        asha = offline_plan(asha_cfg, seen, round_number=number)
        assert "training.epochs" not in asha.search_space and "training.epochs" not in asha.fixed_overrides
        assert all("training.epochs" not in point for point in asha.first_points)
        assert asha.apply(asha_cfg).training.epochs == configured  # every trial plans the configured budget
        assert f"training.epochs stays {configured}, ASHA's budget" in asha.hypothesis
        fifo = offline_plan(with_overrides(cfg, {"tune.scheduler": "fifo"}), seen, round_number=number)
        assert "training.epochs" in fifo.search_space


def test_trust_region_widens_after_an_improving_round_and_shrinks_after_a_stalled_one():
    improving = History(trials=[_trial(1, 1e-3, 0.9), _trial(2, 2e-3, 0.5)])
    stalled = History(trials=[_trial(1, 1e-3, 0.5), _trial(2, 2e-3, 0.9)])
    assert trust_radius(improving, 0.2, "dev/loss", "min") == pytest.approx(0.3)
    assert trust_radius(stalled, 0.2, "dev/loss", "min") == pytest.approx(0.1)


def test_a_collapsed_region_starts_again_at_the_first_radius(cfg):
    # round 1 sets the best; the rounds after it stall, halving the radius until it is below 3 %
    start = cfg.planner.trust_radius
    halvings = next(n for n in range(1, 20) if start * 0.5**n < 0.03)
    stalls = [_trial(1, 2e-3, 0.5)] + [_trial(n, 2e-3, 0.9) for n in range(2, halvings + 2)]
    assert trust_radius(History(trials=stalls[:-1]), start, "dev/loss", "min") == pytest.approx(
        start * 0.5 ** (halvings - 1)
    )
    assert trust_radius(History(trials=stalls), start, "dev/loss", "min") == pytest.approx(start)
    plan = offline_plan(cfg, History(trials=stalls), round_number=halvings + 2)
    assert f"drawn within radius {start:.2f}" in plan.hypothesis
