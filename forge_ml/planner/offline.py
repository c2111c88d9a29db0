"""The offline planner: deterministic, no API key needed.

Search: every round searches the whole of `planner.bounds` with the engine's TPE, warm-started
with every trial so far, so its model of the landscape is global. The planner adds what TPE
lacks, a local search around the best trial: the round's first trials are `planner.local_points`
points drawn inside a trust region around it. The region's radius (a share of each key's
range, on a log scale for log bounds) starts at `planner.trust_radius`, widens by half after a
round that beat the best and halves after one that did not; below 3 % it has searched out its
optimum and starts again at the first radius (TuRBO's restart). After a round that moved the best,
one of those points is Hooke and Jeeves' pattern move instead: the new best plus the step that
led to it from the old best, so a search that is getting somewhere goes on in that direction
faster than a radius a round. The first round has no best trial: its first point is the
configured values.

Under ASHA (`tune.scheduler=asha`) `training.epochs` is not searched: it is ASHA's budget. Every
trial plans the configured `training.epochs` and ASHA, whose rungs are epochs, decides how many
each trains. Searched, the epochs break ASHA's comparisons: under a decaying learning rate a
trial planned for 8 epochs is still mid-schedule at the rung where a 2-epoch trial has finished,
so the rung stops the long schedules, where the best often is.

bench/search_landscapes.py measures this on tables of real trainings against random search and
TPE alone over the same bounds (docs/BENCHMARKS.md).

Data: `augment_n` examples for the categories with gold failures, most failures first (the
offline writer splits them in proportion to the failures).
"""

from __future__ import annotations

import math
import random
from typing import Any

from forge_ml.config import BoundConfig, ForgeConfig
from forge_ml.config.overrides import config_value, schema_type
from forge_ml.planner.history import History, TrialRow
from forge_ml.planner.plan import MAX_FOCUS, ExperimentPlan
from forge_ml.project import GENERATOR_FILE
from forge_ml.search import SearchParam, parse_space

MIN_RADIUS = 0.03
MAX_RADIUS = 0.5
FOCUS_SHOWN = 3  # categories named in the hypothesis
EPOCHS = "training.epochs"
DRAWS_PER_POINT = 20  # tries to draw a local point that differs from the best and from each other


def trust_radius(history: History, start: float, metric: str, mode: str) -> float:
    """Replay the rounds so far: widen after a round that improved the best, halve after one that did not."""
    radius = start
    best: float | None = None
    better = (lambda a, b: a < b) if mode == "min" else (lambda a, b: a > b)
    for number in sorted({t.round for t in history.trials}):
        scores = [t.metrics[metric] for t in history.scored(metric) if t.round == number]
        if not scores:
            continue
        round_best = min(scores) if mode == "min" else max(scores)
        if best is not None:
            radius = min(radius * 1.5, MAX_RADIUS) if better(round_best, best) else radius * 0.5
            if radius < MIN_RADIUS:  # searched out: start again around the best, which may move
                radius = start
        if best is None or better(round_best, best):
            best = round_best
    return radius


def _unit(bound: BoundConfig, value: float) -> float:
    lo, hi = float(bound.low), float(bound.high)
    value = min(max(float(value), lo), hi)
    if bound.log:
        return (math.log(value) - math.log(lo)) / (math.log(hi) - math.log(lo))
    return (value - lo) / (hi - lo)


def _from_unit(bound: BoundConfig, u: float) -> float:
    lo, hi = float(bound.low), float(bound.high)
    u = min(max(u, 0.0), 1.0)
    if bound.log:
        return math.exp(math.log(lo) + u * (math.log(hi) - math.log(lo)))
    return lo + u * (hi - lo)


def _fmt(value: float) -> str:
    return f"{value:.6g}"


def bound_expression(key: str, bound: BoundConfig) -> str | None:
    """Return the sweep expression of the whole of one key's bound, or None when it is a single value."""
    if bound.choices is not None:
        return SearchParam(key, "choice", tuple(bound.choices)).to_expression()
    if schema_type(key) is int:
        low, high = math.ceil(bound.low), math.floor(bound.high)
        body = f"interval({low},{high})" if low < high else None
    else:
        low, high = (
            max(float(_fmt(bound.low)), float(bound.low)),
            min(float(_fmt(bound.high)), float(bound.high)),
        )
        body = f"interval({_fmt(low)},{_fmt(high)})" if low < high else None
    if body is None:
        return None
    return f"tag(log, {body})" if bound.log else body


def _near(
    key: str, bound: BoundConfig, param: SearchParam, center: Any, radius: float, rng: random.Random
) -> Any:
    """One key of a local point: drawn uniformly within `radius` of `center` (a share of the key's range,
    on its log scale for a log bound; for choices, as many places either side, at least one)."""
    if bound.choices is not None:
        choices = list(param.values)
        index = _index(choices, center)
        width = max(1, round(radius * len(choices)))
        return choices[rng.randint(max(0, index - width), min(len(choices) - 1, index + width))]
    value = _from_unit(bound, _unit(bound, center) + rng.uniform(-radius, radius))
    value = min(max(value, param.low), param.high)
    return round(value) if schema_type(key) is int else float(_fmt(value))


def _index(choices: list[Any], center: Any) -> int:
    """The place of `center` among `choices`: its own, the nearest numeric one, or the first."""
    if center in choices:
        return choices.index(center)
    numeric = all(isinstance(c, (int, float)) and not isinstance(c, bool) for c in choices)
    if numeric and isinstance(center, (int, float)):
        return min(range(len(choices)), key=lambda i: abs(choices[i] - center))
    return 0


def pattern_point(
    cfg: ForgeConfig, space: dict[str, str], history: History, best: TrialRow
) -> tuple[dict[str, Any], TrialRow] | None:
    """Hooke and Jeeves' pattern move: when the latest round moved the best trial, the point one step
    further along that move, with the best before that round (None when the latest round did not
    move the best, or the step leads nowhere new).

    The step is taken per key on the scale the trust region uses (log for a log bound, places for
    numeric choices) and clipped to the bounds; a key of non-numeric choices keeps the best's value.
    """
    metric, mode = cfg.tune.metric, cfg.tune.mode
    latest = max(t.round for t in history.trials)
    before = History(trials=[t for t in history.trials if t.round < best.round]).best(metric, mode)
    if best.round != latest or before is None:
        return None
    params = parse_space(space)
    center, tried = _center_and_tried(cfg, params, history, best)
    point = {
        key: _step_on(key, cfg.planner.bounds[key], param, _value(cfg, before, key), center[key])
        for key, param in params.items()
    }
    return None if point == center or point in tried else (point, before)


def _value(cfg: ForgeConfig, trial: TrialRow, key: str) -> Any:
    """The trial's value of `key`, or the configured one when the trial predates the key's bound."""
    return trial.params[key] if key in trial.params else config_value(cfg, key)


def _center_and_tried(
    cfg: ForgeConfig, params: dict[str, SearchParam], history: History, best: TrialRow
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The best trial's point in `params`, and every trial's, for the moves around it to avoid."""
    center = {key: _value(cfg, best, key) for key in params}
    return center, [{key: t.params.get(key) for key in params} for t in history.trials]


def _step_on(key: str, bound: BoundConfig, param: SearchParam, there: Any, here: Any) -> Any:
    """One key of a pattern move: `here` plus the step from `there` to `here`, inside the bound."""
    if bound.choices is not None:
        choices = list(param.values)
        if not all(isinstance(c, (int, float)) and not isinstance(c, bool) for c in choices):
            return here  # no direction among unordered choices
        index = 2 * _index(choices, here) - _index(choices, there)
        return choices[min(max(index, 0), len(choices) - 1)]
    value = _from_unit(bound, 2 * _unit(bound, here) - _unit(bound, there))
    value = min(max(value, param.low), param.high)
    return round(value) if schema_type(key) is int else float(_fmt(value))


def local_points(
    cfg: ForgeConfig, space: dict[str, str], history: History, best: TrialRow, radius: float, count: int
) -> list[dict[str, Any]]:
    """Up to `count` points of `space` drawn around `best`, none tried before nor equal to each other."""
    params = parse_space(space)
    center, tried = _center_and_tried(cfg, params, history, best)
    # seeded by the run's seed and the history: the same history gives the same plan, and every
    # round (and every run with another tune.seed) draws anew
    rng = random.Random(f"{cfg.tune.seed}:{len(history.trials)}")
    points: list[dict[str, Any]] = []
    for _ in range(count * DRAWS_PER_POINT):
        if len(points) == count:
            break
        point = {
            key: _near(key, cfg.planner.bounds[key], param, center[key], radius, rng)
            for key, param in params.items()
        }
        if point != center and point not in points and point not in tried:
            points.append(point)
    return points


def samples_for_budget(cfg: ForgeConfig, history: History, remaining_s: float | None) -> int:
    """Return the round's trial count: tune.num_samples, fewer when the wall budget cannot pay for it."""
    planner = cfg.planner
    wanted = min(max(cfg.tune.num_samples, planner.min_samples), planner.max_samples)
    timed = [r for r in history.rounds if r.wall_s and r.num_trials]
    if remaining_s is None or not timed:
        return wanted
    per_trial = sum(r.wall_s for r in timed) / sum(r.num_trials for r in timed)
    affordable = int(remaining_s // max(per_trial, 1e-9))
    return min(max(affordable, planner.min_samples), wanted)


def offline_plan(
    cfg: ForgeConfig,
    history: History,
    *,
    round_number: int,
    remaining_s: float | None = None,
    writes_data: bool = True,
) -> ExperimentPlan:
    """Return the deterministic plan of round `round_number` from what `history` holds;
    `writes_data` False (no generator.py, and Claude is off) plans no new examples."""
    metric, mode = cfg.tune.metric, cfg.tune.mode
    best = history.best(metric, mode)
    space: dict[str, str] = {}
    fixed: dict[str, Any] = {}
    for key, bound in cfg.planner.bounds.items():
        if key == EPOCHS and cfg.tune.scheduler == "asha":  # ASHA's budget: the configured value stands
            continue
        expression = bound_expression(key, bound)
        if expression is None:
            fixed[key] = (
                best.params[key] if best is not None and key in best.params else config_value(cfg, key)
            )
        else:
            space[key] = expression
    if not space and (fixed or EPOCHS in cfg.planner.bounds):  # nothing left: search one point
        key, value = next(iter(fixed.items())) if fixed else (EPOCHS, config_value(cfg, EPOCHS))
        space[key] = SearchParam(key, "choice", (value,)).to_expression()
        fixed.pop(key, None)
    num_samples = samples_for_budget(cfg, history, remaining_s)
    failing = history.failures_by_category()
    focus = [name for name, count in failing.items() if count > 0 and name != "uncategorized"][:MAX_FOCUS]
    named = ", ".join(f"{c} ({failing[c]})" for c in focus[:FOCUS_SHOWN])
    more = f" and {len(focus) - FOCUS_SHOWN} more" if len(focus) > FOCUS_SHOWN else ""
    augment_n = cfg.planner.augment_n if writes_data else 0
    data = f"{augment_n} new examples " + (
        f"split by gold failures over {named}{more}" if focus else "for every category"
    )
    if not writes_data and cfg.planner.augment_n:
        data = (
            f"no new examples (no {GENERATOR_FILE}, and Claude is off: write one, or set ANTHROPIC_API_KEY)"
        )
    radius = trust_radius(history, cfg.planner.trust_radius, metric, mode)
    budget = (
        f"; {EPOCHS} stays {config_value(cfg, EPOCHS)}, ASHA's budget"
        if cfg.tune.scheduler == "asha" and EPOCHS in cfg.planner.bounds
        else ""
    )
    if best is None:
        first = _configured_point(cfg, space)
        points = [first] if first else []
        search = "TPE over the whole bounds" + (", the configured values first" if first else "")
    else:
        count = min(cfg.planner.local_points, num_samples // 2)  # at least half of a round is TPE's
        pattern = pattern_point(cfg, space, history, best) if count else None
        moved = [pattern[0]] if pattern else []
        drawn = [p for p in local_points(cfg, space, history, best, radius, count) if p not in moved]
        drawn = drawn[: count - len(moved)]
        points = moved + drawn
        search = (
            f"{len(drawn)} trial(s) drawn within radius {radius:.2f} of trial"
            f" {best.trial_id} of {best.where} ({metric} {best.metrics[metric]:.4g}),"
            + (
                f" 1 a step on along its move from trial {pattern[1].trial_id} (a pattern move),"
                if pattern
                else ""
            )
            + " the rest by TPE over the whole bounds, warm-started with every trial so far"
        )
    return ExperimentPlan(
        hypothesis=f"Round {round_number}: {search}{budget}; {data}.",
        search_space=space,
        num_samples=num_samples,
        fixed_overrides=fixed,
        augment_focus=focus,
        augment_n=augment_n,
        next_hypotheses=_queue(cfg, radius, best is None, focus),
        first_points=points,
    )


def _configured_point(cfg: ForgeConfig, space: dict[str, str]) -> dict[str, Any] | None:
    """The configured values of the searched keys, when every one lies inside the space (else None)."""
    params = parse_space(space)
    point = {key: config_value(cfg, key) for key in params}
    return point if all(params[key].contains(value) for key, value in point.items()) else None


def _queue(cfg: ForgeConfig, radius: float, first_round: bool, focus: list[str]) -> list[str]:
    """The offline planner's own notes on what comes next: the rule it will follow either way."""
    start, metric = cfg.planner.trust_radius, cfg.tune.metric
    if first_round:
        notes = [
            f"Next round: draw local trials within radius {start:.2f} of the best trial this round finds."
        ]
    else:
        wider, narrower = min(radius * 1.5, MAX_RADIUS), radius * 0.5
        notes = [
            f"If this round improves {metric}: draw the next local trials around its best, radius {wider:.2f},"
            " one of them a step further along the move to it.",
            f"If it stalls: radius {narrower:.2f} around the best so far"
            + (f"; below {MIN_RADIUS:g} it starts again at {start:.2f}." if narrower < MIN_RADIUS else "."),
        ]
    if focus:
        notes.append(
            f"Keep adding examples where gold fails most ({', '.join(focus[:FOCUS_SHOWN])}) until they catch up."
        )
    return notes
