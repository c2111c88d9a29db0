"""Hypothesis strategies for planner replies: valid plans across a config's whole plannable space, and
invalid ones (out of range, unknown or forbidden keys, wrong JSON types, broken sweep expressions).

Both are drawn from the config they are checked against: every key of `planner.bounds` can be
searched, held fixed or patched into forge.yaml, with values anywhere inside its bound.
"""

from __future__ import annotations

import math
from typing import Any

from hypothesis import strategies as st

from forge_ml.config import BoundConfig, ForgeConfig
from forge_ml.config.overrides import schema_type
from forge_ml.planner.plan import MAX_FOCUS, MAX_NEXT, MAX_NEXT_TEXT
from forge_ml.search import SearchParam, parse_space

CATEGORIES = ["hover", "land", "takeoff", "rtl", "loiter", "goto_waypoint", "ascend", "descend", "unknown"]
# names a planner may invent: unknown to the data, but plain words (allowed, and written for)
ODD_CATEGORIES = ["teleport", "Hover", "hover_2", "a-b", "x.y", "emergency stop", "c0"]
NEVER_PLANNABLE = [
    "model.trust_remote_code",
    "model.name_or_path",
    "tune.num_samples",
    "tracking.uri",
    "name",
    "project_dir",
    "eval.scorer_path",
]
UNKNOWN_KEYS = ["lora.rank", "training.lr", "optimizer.name", "lora", "training"]


def _short(value: float) -> float:
    """A float as a planner writes it: six significant digits."""
    return float(f"{value:.6g}")


def _number_in(key: str, bound: BoundConfig) -> st.SearchStrategy:
    low, high = float(bound.low), float(bound.high)
    if schema_type(key) is int:
        return st.integers(math.ceil(low), math.floor(high))
    if bound.log:
        return st.floats(math.log(low), math.log(high)).map(
            lambda u: min(max(_short(math.exp(u)), low), high)
        )
    return st.floats(low, high).map(lambda v: min(max(_short(v), low), high))


def value_in(key: str, bound: BoundConfig) -> st.SearchStrategy:
    """A value a plan may set for `key`: one of its choices, or a number inside [low, high]."""
    if bound.choices is not None:
        return st.sampled_from(list(bound.choices))
    return _number_in(key, bound)


def _literal(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


@st.composite
def expression_in(draw, key: str, bound: BoundConfig) -> str:
    """A Hydra sweep expression whose every point lies inside `bound`."""
    if bound.choices is not None:
        picked = draw(st.lists(st.sampled_from(list(bound.choices)), min_size=1, max_size=len(bound.choices)))
        return "choice(" + ",".join(_literal(v) for v in dict.fromkeys(picked)) + ")"
    kind = draw(
        st.sampled_from(
            ["interval", "choice", "range"] if schema_type(key) is int else ["interval", "choice"]
        )
    )
    if kind == "choice":
        values = draw(st.lists(_number_in(key, bound), min_size=1, max_size=4, unique=True))
        return "choice(" + ",".join(_literal(v) for v in values) + ")"
    a, b = sorted(draw(st.lists(_number_in(key, bound), min_size=2, max_size=2, unique=True)))
    if kind == "range":  # integers only: stop excluded, as Python's range
        return f"range({a},{b + 1})"
    body = f"interval({a},{b})"
    log = bound.log or (a > 0 and draw(st.booleans()))
    return f"tag(log, {body})" if log else body


@st.composite
def valid_plans(draw, cfg: ForgeConfig) -> dict[str, Any]:
    """A `propose_experiment` input that must pass validation against `cfg`."""
    planner = cfg.planner
    space: dict[str, str] = {}
    fixed: dict[str, Any] = {}
    patches: dict[str, Any] = {}
    for key, bound in planner.bounds.items():
        role = draw(st.sampled_from(["search", "fixed", "none"]))
        if role == "search":
            space[key] = draw(expression_in(key, bound))
        elif role == "fixed":
            fixed[key] = draw(value_in(key, bound))
        if draw(st.integers(0, 3)) == 0:
            patches[key] = draw(value_in(key, bound))
    if not space:  # a round always searches something, if only one point
        key = draw(st.sampled_from(sorted(planner.bounds)))
        space[key] = draw(expression_in(key, planner.bounds[key]))
        fixed.pop(key, None)
    num_samples = draw(st.integers(planner.min_samples, planner.max_samples))
    params = parse_space(space)
    first = draw(st.lists(points_in(params), max_size=min(num_samples, 3)))
    focus = draw(st.lists(st.sampled_from(CATEGORIES + ODD_CATEGORIES), max_size=6, unique=True))
    words = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), min_size=1, max_size=80)
    return {
        "hypothesis": draw(words.filter(str.strip)),
        "search_space": space,
        "num_samples": num_samples,
        "fixed_overrides": fixed,
        "forge_yaml_patches": patches,
        "background_additions": draw(st.one_of(st.just(""), words)),
        "augment_focus": focus,
        "augment_n": draw(st.integers(0, planner.max_augment)),
        "next_hypotheses": draw(st.lists(words.filter(str.strip), max_size=MAX_NEXT)),
        **({"first_points": first} if first or draw(st.booleans()) else {}),  # optional: present or left out
    }


@st.composite
def points_in(draw, params: dict[str, SearchParam]) -> dict[str, Any]:
    """A point of the space: every searched key, each value inside its expression."""
    point: dict[str, Any] = {}
    for key, param in params.items():
        if param.kind == "choice":
            point[key] = draw(st.sampled_from(list(param.values)))
        elif param.kind in ("randint", "lograndint"):
            point[key] = draw(st.integers(int(param.low), int(param.high)))
        else:
            point[key] = draw(
                st.floats(param.low, param.high).map(lambda v, p=param: min(max(_short(v), p.low), p.high))
            )
    return point


def _outside(key: str, bound: BoundConfig) -> st.SearchStrategy:
    """A value of the right type that lies outside `bound`."""
    if bound.choices is not None:
        numeric = [c for c in bound.choices if isinstance(c, int | float) and not isinstance(c, bool)]
        top = max(numeric) if numeric else 0
        return st.integers(int(top) + 1, int(top) + 1000).filter(lambda v: v not in bound.choices)
    low, high = float(bound.low), float(bound.high)
    if schema_type(key) is int:
        return st.one_of(
            st.integers(int(high) + 1, int(high) + 100), st.integers(int(low) - 100, int(low) - 1)
        )
    return st.one_of(
        st.floats(high * 1.5 + 1, high * 100 + 10), st.floats(-100.0, low - abs(low) * 0.5 - 1e-9)
    )


@st.composite
def invalid_plans(draw, cfg: ForgeConfig) -> tuple[dict[str, Any], str]:
    """A plan broken in one way, and a fragment the rejection must name."""
    plan = draw(valid_plans(cfg))
    bounds = cfg.planner.bounds
    key = draw(st.sampled_from(sorted(bounds)))
    defect = draw(
        st.sampled_from(
            [
                "out_of_range_fixed",
                "out_of_range_patch",
                "space_outside_bounds",
                "unknown_key",
                "never_plannable",
                "bad_expression",
                "wrong_type_space",
                "wrong_type_fixed",
                "wrong_type_focus",
                "wrong_type_samples",
                "too_many_samples",
                "negative_augment",
                "unknown_field",
                "empty_hypothesis",
                "path_focus",
                "too_many_focus",
                "bad_queue",
                "clash",
                "empty_space",
                "point_outside_space",
                "point_missing_key",
                "point_unsearched_key",
                "too_many_points",
            ]
        )
    )
    if defect in ("out_of_range_fixed", "out_of_range_patch"):
        field = "fixed_overrides" if defect == "out_of_range_fixed" else "forge_yaml_patches"
        plan["search_space"].pop(key, None)
        plan[field][key] = draw(_outside(key, bounds[key]))
        return plan, key
    if defect == "space_outside_bounds":
        value = draw(_outside(key, bounds[key]))
        plan["search_space"][key] = f"choice({_literal(value)})"
        plan["fixed_overrides"].pop(key, None)
        return plan, key
    if defect == "unknown_key":
        bad = draw(st.sampled_from(UNKNOWN_KEYS))
        field = draw(st.sampled_from(["search_space", "fixed_overrides", "forge_yaml_patches"]))
        plan[field][bad] = "choice(4,8)" if field == "search_space" else 8
        return plan, bad
    if defect == "never_plannable":
        bad = draw(st.sampled_from(NEVER_PLANNABLE))
        field = draw(st.sampled_from(["search_space", "fixed_overrides", "forge_yaml_patches"]))
        plan[field][bad] = "choice(true,false)" if field == "search_space" else True
        return plan, bad
    if defect == "bad_expression":
        plan["fixed_overrides"].pop(key, None)
        plan["search_space"][key] = draw(
            st.sampled_from(["choice()", "interval(5,1)", "banana", "interval(a,b)", "range(3,3)", "8"])
        )
        return plan, key
    if defect == "wrong_type_space":
        plan["search_space"] = draw(st.sampled_from([["lora.r", "choice(4,8)"], "lora.r=choice(4,8)", 7]))
        return plan, "search_space"
    if defect == "wrong_type_fixed":
        plan["fixed_overrides"] = draw(st.sampled_from([["lora.r", 8], "lora.r=8"]))
        return plan, "fixed_overrides"
    if defect == "wrong_type_focus":
        plan["augment_focus"] = draw(st.sampled_from(["hover", 3, [1, 2], [""]]))
        return plan, "augment_focus"
    if defect == "wrong_type_samples":
        plan["num_samples"] = draw(st.sampled_from(["4", 2.5, True, None, [4]]))
        return plan, "num_samples"
    if defect == "too_many_samples":
        planner = cfg.planner
        plan["num_samples"] = draw(
            st.one_of(
                st.integers(planner.max_samples + 1, planner.max_samples + 100),
                st.integers(-5, planner.min_samples - 1),
            )
        )
        return plan, "num_samples"
    if defect == "negative_augment":
        plan["augment_n"] = draw(
            st.one_of(st.integers(-100, -1), st.integers(cfg.planner.max_augment + 1, 10**6))
        )
        return plan, "augment_n"
    if defect == "unknown_field":
        plan[draw(st.sampled_from(["learning_rate", "notes", "trials"]))] = 1
        return plan, "unknown field"
    if defect == "empty_hypothesis":
        plan["hypothesis"] = draw(st.sampled_from(["", "   ", 42]))
        return plan, "hypothesis"
    if defect == "path_focus":
        plan["augment_focus"] = [draw(st.sampled_from(["../etc", "a/b", "x\ny", "..", "/root"]))]
        return plan, "augment_focus"
    if defect == "too_many_focus":
        plan["augment_focus"] = [f"cat{i}" for i in range(MAX_FOCUS + 1)]
        return plan, "augment_focus"
    if defect == "bad_queue":
        plan["next_hypotheses"] = draw(
            st.sampled_from(["try r=16", [1, 2], ["  "], ["x" * (MAX_NEXT_TEXT + 1)], ["h"] * (MAX_NEXT + 1)])
        )
        return plan, "next_hypotheses"
    if defect == "empty_space":
        plan["fixed_overrides"].update({k: draw(value_in(k, bounds[k])) for k in plan["search_space"]})
        plan["search_space"] = {}
        return plan, "search_space"
    if defect.startswith("point_") or defect == "too_many_points":
        return _broken_points(draw, plan, defect, cfg)
    # clash: the same key searched and held fixed
    plan["search_space"][key] = draw(expression_in(key, bounds[key]))
    plan["fixed_overrides"][key] = draw(value_in(key, bounds[key]))
    return plan, key


def _broken_points(draw, plan: dict[str, Any], defect: str, cfg: ForgeConfig) -> tuple[dict[str, Any], str]:
    """The plan with first points broken by `defect`, and the fragment its rejection must name."""
    params = parse_space(plan["search_space"])
    point = draw(points_in(params))
    key = draw(st.sampled_from(sorted(params)))
    if defect == "point_outside_space":
        bounds = cfg.planner.bounds
        inside_bounds = {k: v for k in params if (v := _in_bound_not_in_space(k, params[k], bounds[k]))}
        if inside_bounds:  # a value the bounds allow but this round's space does not
            key = draw(st.sampled_from(sorted(inside_bounds)))
            point[key] = draw(st.sampled_from(inside_bounds[key]))
        else:  # every searched key spans its whole bound
            point[key] = draw(_outside(key, bounds[key]))
        plan["first_points"] = [point]
        return plan, f"first_points[0]: '{key}'"
    if defect == "point_missing_key":
        del point[key]
        plan["first_points"] = [point]
        return plan, f"missing {key}"
    if defect == "point_unsearched_key":
        extra = draw(st.sampled_from(UNKNOWN_KEYS + sorted(set(cfg.planner.bounds) - set(params))))
        point[extra] = 1
        plan["first_points"] = [point]
        return plan, f"not searched: {extra}"
    plan["first_points"] = [point] * (plan["num_samples"] + 1)
    return plan, "more than num_samples"


def _in_bound_not_in_space(key: str, param: SearchParam, bound: BoundConfig) -> list[Any]:
    """Values inside `bound` (its ends, its middle, its choices) that `param` leaves out."""
    if bound.choices is not None:
        candidates = list(bound.choices)
    else:
        low, high = float(bound.low), float(bound.high)
        middle = math.sqrt(low * high) if bound.log and low > 0 else (low + high) / 2
        candidates = [low, high, _short(middle)]
        if schema_type(key) is int:
            candidates = [math.ceil(low), math.floor(high), round(middle)]
    return [value for value in candidates if not param.contains(value)]
