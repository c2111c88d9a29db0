"""The plan of one round, its JSON schema (the `propose_experiment` tool), and its validation.

A plan may only touch the keys in `planner.bounds`, within their ranges; everything else
(identity, paths, tracking, Ray placement, trust_remote_code, secrets) is never plannable.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from forge_ml.config import ForgeConfig, PlannerConfig
from forge_ml.config.overrides import typed_value, with_overrides
from forge_ml.config.planner import never_searched
from forge_ml.data.examples import safe_category
from forge_ml.errors import ConfigError
from forge_ml.search import Bound, SearchParam, check_bounds, check_space, parse_space

MAX_TEXT = 4000
MAX_FOCUS = 20
MAX_NEXT = 5  # hypotheses a plan may queue for later rounds
MAX_NEXT_TEXT = 400
OPTIONAL_FIELDS = ("first_points",)  # the tool may leave these out; every other field it must give


@dataclass
class ExperimentPlan:
    hypothesis: str
    search_space: dict[str, str]
    num_samples: int
    fixed_overrides: dict[str, Any] = field(default_factory=dict)
    forge_yaml_patches: dict[str, Any] = field(default_factory=dict)
    background_additions: str = ""
    augment_focus: list[str] = field(default_factory=list)
    augment_n: int = 0
    next_hypotheses: list[str] = field(default_factory=list)  # the queue PLAN.md shows, for later rounds
    first_points: list[dict[str, Any]] = field(default_factory=list)  # run before the searcher samples

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def round_overrides(self) -> dict[str, Any]:
        """Return what the plan sets on its round's config: the fixed values, the trial count, the space."""
        return {
            **self.fixed_overrides,
            "tune.num_samples": self.num_samples,
            "tune.space": dict(self.search_space),
        }

    def apply(self, cfg: ForgeConfig) -> ForgeConfig:
        """Return the round's config: `cfg` (forge.yaml with its patches, then the command line) with this plan."""
        return with_overrides(cfg, self.round_overrides())


PLAN_FIELDS = {
    "hypothesis": "what this round tests and why, in one or two sentences",
    "search_space": "config key -> Hydra sweep expression: choice(a,b,...), interval(lo,hi), "
    "tag(log, interval(lo,hi)), range(start,stop[,step]); keys from the bounds only",
    "num_samples": "trials to run in this round",
    "fixed_overrides": "config key -> value held fixed for this round's trials (keys from the bounds only)",
    "forge_yaml_patches": "config key -> value written permanently into forge.yaml (keys from the bounds only)",
    "background_additions": "a short note appended to BACKGROUND.md (facts learned), or empty",
    "augment_focus": "categories the new training examples should cover",
    "augment_n": "how many new training examples to write this round (0 for none)",
    "first_points": "points of the search space to train first, in order (each sets every searched key to "
    "a value inside its expression; at most num_samples), e.g. the current values or a hunch to check; "
    "the searcher picks the rest",
    "next_hypotheses": f"up to {MAX_NEXT} hypotheses worth testing in later rounds, most promising first, "
    "each one sentence (PLAN.md keeps them as the queue; revise it from what this round and PLAN.md show)",
}


def plan_schema(planner: PlannerConfig) -> dict[str, Any]:
    """Return the JSON schema of the `propose_experiment` tool's input."""
    scalar = {"type": ["number", "integer", "string", "boolean"]}
    props: dict[str, Any] = {
        "hypothesis": {"type": "string"},
        "search_space": {"type": "object", "additionalProperties": {"type": "string"}},
        "num_samples": {"type": "integer", "minimum": planner.min_samples, "maximum": planner.max_samples},
        "fixed_overrides": {"type": "object", "additionalProperties": scalar},
        "forge_yaml_patches": {"type": "object", "additionalProperties": scalar},
        "background_additions": {"type": "string"},
        "augment_focus": {"type": "array", "items": {"type": "string"}, "maxItems": MAX_FOCUS},
        "augment_n": {"type": "integer", "minimum": 0, "maximum": planner.max_augment},
        "next_hypotheses": {"type": "array", "items": {"type": "string"}, "maxItems": MAX_NEXT},
        "first_points": {
            "type": "array",
            "items": {"type": "object", "additionalProperties": scalar},
            "maxItems": planner.max_samples,
        },
    }
    for name, text in PLAN_FIELDS.items():
        props[name]["description"] = text
    return {
        "type": "object",
        "properties": props,
        "required": [name for name in PLAN_FIELDS if name not in OPTIONAL_FIELDS],
        "additionalProperties": False,
    }


def bounds_of(planner: PlannerConfig) -> dict[str, Bound]:
    return {
        key: Bound(b.low, b.high, tuple(b.choices) if b.choices is not None else None)
        for key, b in planner.bounds.items()
    }


class PlanError(ConfigError):
    """A plan broke the schema or the bounds; `problems` lists every reason."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("invalid plan:\n  " + "\n  ".join(problems))
        self.problems = problems


def _check_value(key: str, value: Any, bounds: dict[str, Bound]) -> Any:
    """Return `value` coerced to the key's type; raise ConfigError when the key or value is not allowed."""
    if never_searched(key):
        raise ConfigError(f"'{key}' is never plannable")
    if key not in bounds:
        raise ConfigError(f"'{key}' is not in planner.bounds ({', '.join(sorted(bounds))})")
    value = typed_value(key, value)
    bound = bounds[key]
    if bound.choices is not None and value not in bound.choices:
        raise ConfigError(f"'{key}'={value!r} is not one of planner.bounds choices {list(bound.choices)}")
    numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
    if numeric and (
        (bound.low is not None and value < bound.low) or (bound.high is not None and value > bound.high)
    ):
        raise ConfigError(f"'{key}'={value!r} is outside planner.bounds [{bound.low}, {bound.high}]")
    return value


def _text(raw: dict, name: str, problems: list[str], *, required: bool) -> str:
    value = raw.get(name, "")
    if not isinstance(value, str):
        problems.append(f"{name}: must be a string")
        return ""
    if required and not value.strip():
        problems.append(f"{name}: must not be empty")
    if len(value) > MAX_TEXT:
        problems.append(f"{name}: {len(value)} characters, at most {MAX_TEXT}")
    return value.strip()


def _integer(raw: dict, name: str, low: int, high: int, problems: list[str]) -> int:
    value = raw.get(name)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        problems.append(f"{name}: must be an integer, got {value!r}")
        return low
    if not low <= value <= high:
        problems.append(f"{name}: {value} is out of range [{low}, {high}]")
    return value


def _mapping(raw: dict, name: str, problems: list[str]) -> dict[str, Any]:
    value = raw.get(name) or {}
    if not isinstance(value, dict):
        problems.append(f"{name}: must be an object of config key -> value")
        return {}
    return value


def _strings(raw: dict, name: str, what: str, most: int, problems: list[str]) -> list[str]:
    """The non-empty strings of list field `name`, stripped (none when it is not such a list)."""
    value = raw.get(name) or []
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        problems.append(f"{name}: must be a list of {what}")
        return []
    if len(value) > most:
        problems.append(f"{name}: {len(value)} {what}, at most {most}")
        return []
    return [v.strip() for v in value]


def validate_plan(raw: Any, cfg: ForgeConfig) -> ExperimentPlan:
    """Return the plan in `raw` checked against the schema and planner.bounds; raise PlanError."""
    planner = cfg.planner
    if not isinstance(raw, dict):
        raise PlanError([f"the plan must be a JSON object, got {type(raw).__name__}"])
    problems: list[str] = []
    unknown = sorted(set(raw) - set(PLAN_FIELDS))
    if unknown:
        problems.append(f"unknown field(s) {', '.join(unknown)}; allowed: {', '.join(PLAN_FIELDS)}")
    missing = [name for name in ("hypothesis", "search_space", "num_samples") if name not in raw]
    if missing:
        problems.append(f"missing field(s): {', '.join(missing)}")
    bounds = bounds_of(planner)
    hypothesis = _text(raw, "hypothesis", problems, required=True)
    background = _text(raw, "background_additions", problems, required=False)
    num_samples = _integer(raw, "num_samples", planner.min_samples, planner.max_samples, problems)
    augment_n = _integer(raw, "augment_n", 0, planner.max_augment, problems) if "augment_n" in raw else 0

    space = _mapping(raw, "search_space", problems)
    if not all(isinstance(v, str) for v in space.values()):
        problems.append("search_space: every value must be a sweep expression string")
        space = {}
    elif not space and "search_space" in raw and isinstance(raw["search_space"], dict):
        problems.append(
            "search_space: name at least one key to search (choice(x) for a single value); "
            "hold the others in fixed_overrides"
        )
    params: dict[str, SearchParam] = {}  # the keys whose expression parsed
    for key, expression in space.items():
        try:
            params[key] = parse_space({key: expression})[key]
            check_bounds(params[key], bounds)
        except ConfigError as exc:
            problems.append(str(exc))

    checked: dict[str, dict[str, Any]] = {}
    for name in ("fixed_overrides", "forge_yaml_patches"):
        checked[name] = {}
        for key, value in _mapping(raw, name, problems).items():
            try:
                checked[name][key] = _check_value(str(key), value, bounds)
            except ConfigError as exc:
                problems.append(f"{name}: {exc}")
    clash = sorted(set(space) & set(checked["fixed_overrides"]))
    if clash:
        problems.append(f"fixed_overrides: {', '.join(clash)} also searched in search_space")

    focus = _strings(raw, "augment_focus", "category names", MAX_FOCUS, problems)
    unsafe = [f for f in focus if not safe_category(f)]
    if unsafe:
        problems.append(f"augment_focus: {unsafe[0]!r} is not a category name (a plain word, no path)")
    queued = _strings(raw, "next_hypotheses", "hypotheses", MAX_NEXT, problems)
    if any(len(h) > MAX_NEXT_TEXT for h in queued):
        problems.append(f"next_hypotheses: each at most {MAX_NEXT_TEXT} characters")

    points = _first_points(raw, space, params, bounds, num_samples, problems)

    if not problems:  # the whole config must stay valid with the plan applied at every edge
        problems.extend(_config_problems(cfg, space, checked))
    if problems:
        raise PlanError(problems)
    return ExperimentPlan(
        hypothesis=hypothesis,
        search_space={str(k): v for k, v in space.items()},
        num_samples=num_samples,
        fixed_overrides=checked["fixed_overrides"],
        forge_yaml_patches=checked["forge_yaml_patches"],
        background_additions=background,
        augment_focus=focus,
        augment_n=augment_n,
        next_hypotheses=queued,
        first_points=points,
    )


def _first_points(
    raw: dict,
    space: dict[str, str],
    params: dict[str, SearchParam],
    bounds: dict[str, Bound],
    num_samples: int,
    problems: list[str],
) -> list[dict[str, Any]]:
    """The plan's first points, each value typed; every problem names the point and the key.
    `params` holds the expressions of `space` that parsed."""
    value = raw.get("first_points") or []
    if not isinstance(value, list) or not all(isinstance(point, dict) for point in value):
        problems.append("first_points: must be a list of objects of config key -> value")
        return []
    if len(value) > num_samples:
        problems.append(f"first_points: {len(value)} points, more than num_samples ({num_samples})")
        return []
    if len(params) < len(space):  # an expression did not parse: that problem is reported already
        return []
    points: list[dict[str, Any]] = []
    for index, point in enumerate(value):
        where = f"first_points[{index}]"
        missing, extra = sorted(set(params) - set(point)), sorted(set(point) - set(params))
        if missing or extra:
            problems.append(
                f"{where}: must set exactly the searched keys ({', '.join(sorted(params))})"
                + (f"; missing {', '.join(missing)}" if missing else "")
                + (f"; not searched: {', '.join(map(str, extra))}" if extra else "")
            )
            continue
        checked: dict[str, Any] = {}
        for key, given in point.items():
            try:
                checked[key] = _check_value(key, given, bounds)
            except ConfigError as exc:
                problems.append(f"{where}: {exc}")
                continue
            if not params[key].contains(checked[key]):
                problems.append(f"{where}: '{key}'={checked[key]!r} is outside its search_space {space[key]}")
        points.append(checked)
    return points


def _config_problems(cfg: ForgeConfig, space: dict[str, str], checked: dict[str, dict]) -> list[str]:
    try:
        planned = with_overrides(cfg, {**checked["forge_yaml_patches"], **checked["fixed_overrides"]})
        if space:
            check_space(planned, parse_space(space))
    except ConfigError as exc:
        return [str(exc)]
    return []


def plan_json(plan: ExperimentPlan) -> str:
    return json.dumps(plan.to_dict(), indent=2, sort_keys=True)
