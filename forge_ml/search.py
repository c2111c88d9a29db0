"""One grammar for search spaces: Hydra sweep expressions, checked, mapped to Ray Tune.

A space maps a config key to an expression, the same strings a user types after
`forge-ml tune` or `forge-ml train -m hydra/sweeper=tune`, and a planner writes:

    choice(8,16,32)                 categorical
    range(1,5) / range(0.1,0.5,0.1) the listed points (stop excluded, as Python's range)
    interval(1e-5,1e-3)             uniform; an int key samples integers, bounds included
    tag(log, interval(1e-5,1e-3))   log-uniform (log-int for an int key)

Expressions are parsed with Hydra's own override parser; keys are checked against the config
schema and, when given, against `bounds` (the keys a planner may touch, with their ranges).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from forge_ml.config import ForgeConfig
from forge_ml.config.overrides import schema_type, typed_value, with_overrides
from forge_ml.config.planner import never_searched
from forge_ml.errors import ConfigError, first_line

OVERRIDE_GRAMMAR = "https://hydra.cc/docs/advanced/override_grammar/basic/"


@dataclass(frozen=True)
class Bound:
    """What a bounded search (a planner's) may set for one key."""

    low: float | None = None
    high: float | None = None
    choices: tuple[Any, ...] | None = None


@dataclass(frozen=True)
class SearchParam:
    """One parsed dimension of a search space."""

    key: str
    kind: str  # choice | uniform | loguniform | randint | lograndint
    values: tuple[Any, ...] = ()
    low: float = 0.0
    high: float = 0.0

    def to_tune(self) -> Any:
        """Return the Ray Tune domain sampling this dimension."""
        from ray import tune

        if self.kind == "choice":
            return tune.choice(list(self.values))
        if self.kind == "uniform":
            return tune.uniform(self.low, self.high)
        if self.kind == "loguniform":
            return tune.loguniform(self.low, self.high)
        if self.kind == "randint":
            return tune.randint(int(self.low), int(self.high) + 1)  # Tune's upper bound is exclusive
        return tune.lograndint(int(self.low), int(self.high) + 1)

    def to_expression(self) -> str:
        """Return the Hydra sweep expression of this dimension (parses back to an equal param)."""
        if self.kind == "choice":
            return "choice(" + ",".join(_literal(v) for v in self.values) + ")"
        body = f"interval({_literal(self.low)},{_literal(self.high)})"
        return f"tag(log, {body})" if self.kind.startswith("log") else body

    def contains(self, value: Any) -> bool:
        if self.kind == "choice":
            return value in self.values
        return self.low <= value <= self.high


def _literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _check_key(key: str) -> type:
    if never_searched(key):
        raise ConfigError(f"search space: '{key}' cannot be searched")
    try:
        kind = schema_type(key)
    except ConfigError as exc:
        raise ConfigError(f"search space: {exc}") from None
    if kind not in (int, float, bool, str):
        raise ConfigError(
            f"search space: '{key}' holds a {kind}; only numbers, booleans and strings are searched"
        )
    return kind


def _coerce(key: str, value: Any) -> Any:
    try:
        return typed_value(key, value)
    except ConfigError as exc:
        raise ConfigError(f"search space: {exc}") from None


def parse_param(key: str, expression: str) -> SearchParam:
    """Return the SearchParam of `key=expression`; raise ConfigError naming the problem."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, RangeSweep
    from hydra.errors import HydraException

    kind = _check_key(key)
    try:
        value = OverridesParser.create().parse_override(f"{key}={expression}").value()
    except HydraException as exc:
        first = first_line(exc)
        raise ConfigError(f"search space: {key}={expression!r} does not parse ({first})") from None
    tags = getattr(value, "tags", set()) or set()
    if isinstance(value, ChoiceSweep):
        if not value.list:
            raise ConfigError(f"search space: {key}={expression!r} has no choices")
        return SearchParam(key, "choice", tuple(_coerce(key, v) for v in value.list))
    if isinstance(value, RangeSweep):
        points = _range_points(key, expression, value.start, value.stop, value.step)
        return SearchParam(key, "choice", tuple(_coerce(key, v) for v in points))
    if isinstance(value, IntervalSweep):
        low, high = float(value.start), float(value.end)
        if not low < high:
            raise ConfigError(
                f"search space: {key}={expression!r}: interval low {low:g} must be below high {high:g}"
            )
        if kind not in (int, float):
            raise ConfigError(f"search space: {key}={expression!r}: interval needs a numeric key")
        log = "log" in tags
        if log and low <= 0:
            raise ConfigError(f"search space: {key}={expression!r}: a log interval needs low > 0")
        if kind is int:
            if not (low.is_integer() and high.is_integer()):
                raise ConfigError(
                    f"search space: {key}={expression!r}: '{key}' is an integer; use integer bounds"
                )
            return SearchParam(key, "lograndint" if log else "randint", low=low, high=high)
        return SearchParam(key, "loguniform" if log else "uniform", low=low, high=high)
    raise ConfigError(
        f"search space: {key}={expression!r} is not a sweep; use choice(...), range(...) or interval(...)"
    )


def _range_points(key: str, expression: str, start: float, stop: float, step: float) -> list[float]:
    if step == 0 or (stop - start) / step <= 0:
        raise ConfigError(f"search space: {key}={expression!r} is an empty range")
    count = math.ceil(round((stop - start) / step, 9))
    if count > 10_000:
        raise ConfigError(f"search space: {key}={expression!r} has {count} points; use interval(...) instead")
    points = [start + i * step for i in range(count)]
    return [round(p, 12) if isinstance(p, float) else p for p in points]


def check_bounds(param: SearchParam, bounds: Mapping[str, Bound]) -> None:
    """Raise ConfigError when `param` leaves what `bounds` allows for its key."""
    if param.key not in bounds:
        raise ConfigError(
            f"search space: '{param.key}' is not in planner.bounds ({', '.join(sorted(bounds))})"
        )
    bound = bounds[param.key]
    if param.kind == "choice":
        for v in param.values:
            outside = (bound.choices is not None and v not in bound.choices) or (
                isinstance(v, (int, float))
                and not isinstance(v, bool)
                and ((bound.low is not None and v < bound.low) or (bound.high is not None and v > bound.high))
            )
            if outside:
                raise ConfigError(f"search space: {param.key} value {v!r} is outside planner.bounds")
        return
    if bound.choices is not None:
        raise ConfigError(f"search space: {param.key} is bounded to choices; use choice(...)")
    if (bound.low is not None and param.low < bound.low) or (
        bound.high is not None and param.high > bound.high
    ):
        raise ConfigError(
            f"search space: {param.key} interval [{param.low:g}, {param.high:g}] leaves planner.bounds "
            f"[{bound.low}, {bound.high}]"
        )


def parse_space(
    space: Mapping[str, str], bounds: Mapping[str, Bound] | None = None
) -> dict[str, SearchParam]:
    """Return the parsed, checked search space (ConfigError names the first bad entry)."""
    params = {}
    for key, expression in space.items():
        param = parse_param(str(key), str(expression))
        if bounds is not None:
            check_bounds(param, bounds)
        params[param.key] = param
    return params


def check_space(cfg: ForgeConfig, params: Mapping[str, SearchParam]) -> None:
    """Validate the config at every edge of the space, so no trial can be born invalid."""
    for param in params.values():
        edges = list(param.values) if param.kind == "choice" else [param.low, param.high]
        for value in edges:
            if param.kind in ("randint", "lograndint"):
                value = int(value)
            try:
                with_overrides(cfg, {param.key: value})
            except ConfigError as exc:
                raise ConfigError(
                    f"search space: {param.key}={value!r} gives an invalid config: {exc}"
                ) from None


def tune_space(params: Mapping[str, SearchParam]) -> dict[str, Any]:
    """Return the Ray Tune param_space for parsed params (flat dotted keys)."""
    return {key: param.to_tune() for key, param in params.items()}


def with_space(cfg: ForgeConfig, space: Mapping[str, str]) -> ForgeConfig:
    """Return `cfg` whose `tune.space` also holds `space` (sweeps given on the command line win)."""
    return with_overrides(cfg, {"tune.space": {**cfg.tune.space, **space}}) if space else cfg


def check_override_syntax(overrides: list[str]) -> None:
    """Refuse a command-line word that is not an override, naming it, before Hydra reads any.

    Hydra's own message names neither the override nor its place (`LexerNoViableAltException: 5`),
    and compose() would blame forge.yaml. Every command's overrides pass here first.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    option = next((text for text in overrides if text.startswith("-")), None)
    if option is not None:  # argparse left it over: the command has no such option
        raise ConfigError(
            f"command line: {option}: not an option of this command (see --help), nor a key=value override"
        )
    parser = OverridesParser.create()
    for text in overrides:
        if "=" not in text and not text.startswith("~"):
            raise ConfigError(
                f"command line: {text}: not an override: expected key=value (for example training.epochs=3)"
            )
        try:
            parser.parse_overrides([text])
        except HydraException as exc:
            lines = [line.strip() for line in str(exc).splitlines() if line.strip() not in ("", "^")]
            detail = [line for line in lines if not line.startswith(("See ", "Error parsing override"))]
            hint = hydra_spelling(text) or quoted_spelling(text)
            raise ConfigError(
                f"command line: {text}: cannot parse it ({'; '.join(detail) or first_line(exc)});"
                + (f" in Hydra's grammar that is {hint};" if hint else "")
                + f" the override grammar: {OVERRIDE_GRAMMAR}"
            ) from None


# How Ray Tune, Optuna and W&B name a distribution, and the same in Hydra's sweep grammar. Ray's
# randint and lograndint exclude their upper bound; Hydra's interval on an int key includes it.
FOREIGN_DISTRIBUTIONS = {
    "loguniform": "tag(log, interval({args}))",
    "log_uniform": "tag(log, interval({args}))",
    "log_uniform_values": "tag(log, interval({args}))",
    "lograndint": "tag(log, interval({exclusive}))",
    "uniform": "interval({args})",
    "randint": "interval({exclusive})",
    "int_uniform": "interval({args})",
    "grid_search": "choice({items})",
    "categorical": "choice({items})",
}
_CALL = re.compile(r"^(?P<key>[^=]+)=(?:tune\.)?(?P<name>\w+)\((?P<args>.*)\)$")
_TWO_INTS = re.compile(r"^\s*(-?\d+)\s*,\s*(-?\d+)\s*$")


def quoted_spelling(override: str) -> str | None:
    """`key='s3://b/p?x=1&y=2'` for an unquoted value holding `=` (a URI's query, for one) that parses
    once quoted; None for anything else (a sweep with a typo is not a string)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    key, _, value = override.partition("=")
    if "=" not in value or value[:1] in ("'", '"') or "'" in value:
        return None
    quoted = f"{key}='{value}'"
    try:
        OverridesParser.create().parse_overrides([quoted])
    except HydraException:
        return None
    return quoted


def hydra_spelling(override: str) -> str | None:
    """`key=tag(log, interval(1e-4,1e-2))` for `key=loguniform(1e-4,1e-2)`; None for anything else."""
    found = _CALL.match(override.strip())
    if found is None or found["name"] not in FOREIGN_DISTRIBUTIONS:
        return None
    args = found["args"].strip()
    template = FOREIGN_DISTRIBUTIONS[found["name"]]
    exclusive = None
    if "{exclusive}" in template:
        ints = _TWO_INTS.match(args)
        if ints is None:
            return None
        exclusive = f"{ints[1]},{int(ints[2]) - 1}"
    items = args[1:-1] if args[:1] in ("[", "(") and args[-1:] in ("]", ")") else args
    return f"{found['key']}={template.format(args=args, items=items, exclusive=exclusive)}"


def split_sweep_overrides(overrides: list[str]) -> tuple[dict[str, str], list[str]]:
    """Split command-line overrides into a search space (sweeps) and fixed overrides."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    check_override_syntax(overrides)
    space: dict[str, str] = {}
    fixed: list[str] = []
    for line in overrides:
        override = OverridesParser.create().parse_override(line)
        if override.is_sweep_override():
            space[override.get_key_element().lstrip("+~")] = line.split("=", 1)[1]
        else:
            fixed.append(line)
    return space, fixed
