"""The offline planner: deterministic, no API key needed.

Search: a trust region over `planner.bounds`, centred on the best trial so far (or the
current config). It starts at `planner.trust_radius` (a share of each key's range, on a log
scale for log bounds), widens by half after a round that beat the best, and halves after one
that did not. A region that collapses below 3 % without progress has searched out a local
optimum: the next round searches the whole of the bounds (the searcher, warm-started with every
trial, looks elsewhere), and the round after it starts again at the first radius around the
best trial, which may have moved. The round engine's searcher then picks points inside the
region, warm-started with the earlier trials: the planner chooses the space, the searcher the
points. bench/search_landscapes.py measures it on tables of real trainings: far fewer trials
than random search, about as many as TPE alone over the whole bounds (docs/BENCHMARKS.md).

Data: `augment_n` examples for the categories with gold failures, most failures first (the
offline writer splits them in proportion to the failures).
"""

from __future__ import annotations

import math
from typing import Any

from forge_ml.config import BoundConfig, ForgeConfig
from forge_ml.config.overrides import config_value, schema_type
from forge_ml.planner.history import History
from forge_ml.planner.plan import MAX_FOCUS, ExperimentPlan

MIN_RADIUS = 0.03
MAX_RADIUS = 0.5
WHOLE = 1.0  # a radius that covers every bound from any centre
FOCUS_SHOWN = 3  # categories named in the hypothesis


def trust_radius(history: History, start: float, metric: str, mode: str) -> float:
    """Replay the rounds so far: widen after a round that improved the best, shrink otherwise."""
    radius = start
    best: float | None = None
    better = (lambda a, b: a < b) if mode == "min" else (lambda a, b: a > b)
    for number in sorted({t.round for t in history.trials}):
        scores = [t.metrics[metric] for t in history.scored(metric) if t.round == number]
        if not scores:
            continue
        round_best = min(scores) if mode == "min" else max(scores)
        if best is not None:
            if radius >= WHOLE:  # after a round over the whole bounds: zoom in again on the best
                radius = start
            else:
                radius = min(radius * 1.5, MAX_RADIUS) if better(round_best, best) else radius * 0.5
            if radius < MIN_RADIUS:  # collapsed without progress: search everything once, as TuRBO restarts
                radius = WHOLE
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


def region(key: str, bound: BoundConfig, center: Any, radius: float) -> str | None:
    """Return the sweep expression of the trust region of one key, or None when it is a single point."""
    if bound.choices is not None:
        choices = list(bound.choices)
        numeric = all(isinstance(c, (int, float)) and not isinstance(c, bool) for c in choices)
        if center in choices:
            index = choices.index(center)
        elif numeric and isinstance(center, (int, float)):
            index = min(range(len(choices)), key=lambda i: abs(choices[i] - center))
        else:
            index = 0
        width = max(1, round(radius * len(choices)))
        window = choices[max(0, index - width) : index + width + 1]
        return "choice(" + ",".join(str(c).lower() if isinstance(c, bool) else str(c) for c in window) + ")"
    u = _unit(bound, center)
    low, high = _from_unit(bound, u - radius), _from_unit(bound, u + radius)
    if schema_type(key) is int:
        low, high = max(math.floor(low), int(bound.low)), min(math.ceil(high), int(bound.high))
        if low >= high:
            return None
        body = f"interval({low},{high})"
    else:
        low = max(float(_fmt(low)), float(bound.low))
        high = min(float(_fmt(high)), float(bound.high))
        if not low < high:
            return None
        body = f"interval({_fmt(low)},{_fmt(high)})"
    return f"tag(log, {body})" if bound.log else body


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
    cfg: ForgeConfig, history: History, *, round_number: int, remaining_s: float | None = None
) -> ExperimentPlan:
    """Return the deterministic plan of round `round_number` from what `history` holds."""
    metric, mode = cfg.tune.metric, cfg.tune.mode
    radius = trust_radius(history, cfg.planner.trust_radius, metric, mode)
    best = history.best(metric, mode)
    space: dict[str, str] = {}
    fixed: dict[str, Any] = {}
    for key, bound in cfg.planner.bounds.items():
        center = best.params[key] if best is not None and key in best.params else config_value(cfg, key)
        expression = region(key, bound, center, radius)
        if expression is None:
            fixed[key] = center
        else:
            space[key] = expression
    if not space and fixed:  # every region collapsed: a round still searches, over one point
        key, value = next(iter(fixed.items()))
        space[key] = f"choice({str(value).lower() if isinstance(value, bool) else value})"
        del fixed[key]
    failing = history.failures_by_category()
    focus = [name for name, count in failing.items() if count > 0 and name != "uncategorized"][:MAX_FOCUS]
    where = (
        f"trial {best.trial_id} of round {best.round} ({metric} {best.metrics[metric]:.4g})"
        if best
        else "the configured values"
    )
    named = ", ".join(f"{c} ({failing[c]})" for c in focus[:FOCUS_SHOWN])
    more = f" and {len(focus) - FOCUS_SHOWN} more" if len(focus) > FOCUS_SHOWN else ""
    data = f"{cfg.planner.augment_n} new examples " + (
        f"split by gold failures over {named}{more}" if focus else "for every category"
    )
    scope = (
        "the whole bounds (the region around the best collapsed without progress), best so far"
        if radius >= WHOLE
        else f"a trust region of radius {radius:.2f} around"
    )
    return ExperimentPlan(
        hypothesis=f"Round {round_number}: search {scope} {where}; {data}.",
        search_space=space,
        num_samples=samples_for_budget(cfg, history, remaining_s),
        fixed_overrides=fixed,
        augment_focus=focus,
        augment_n=cfg.planner.augment_n,
        next_hypotheses=_queue(cfg, radius, focus),
    )


def _queue(cfg: ForgeConfig, radius: float, focus: list[str]) -> list[str]:
    """The offline planner's own notes on what comes next: the rule it will follow either way."""
    wider = min(radius * 1.5, MAX_RADIUS)  # the rule of trust_radius, stated ahead
    narrower = radius * 0.5
    if radius >= WHOLE:
        notes = [
            f"Whatever this round over the whole bounds finds: centre the next region on the best trial"
            f" so far, radius {cfg.planner.trust_radius:.2f}."
        ]
    else:
        notes = [
            f"If this round improves {cfg.tune.metric}: centre the next region on its best trial,"
            f" radius {wider:.2f}.",
            f"If it stalls: shrink the region to radius {narrower:.2f} around the best trial so far"
            + (
                f"; below {MIN_RADIUS:g} the next round searches the whole bounds, then radius"
                f" {cfg.planner.trust_radius:.2f} around the best again."
                if narrower < MIN_RADIUS
                else "."
            ),
        ]
    if focus:
        notes.append(
            f"Keep adding examples where gold fails most ({', '.join(focus[:FOCUS_SHOWN])}) until they catch up."
        )
    return notes
