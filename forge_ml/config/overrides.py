"""Deriving configs: the one place that turns a validated config plus dotted-key overrides into another.

Everything downstream of `compose` that needs a changed config (a round's plan applied, a trial's
sampled point, the edge of a search space) calls `with_overrides`; everything that reads one
value by its dotted name calls `config_value`.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import re
import types
import typing
from collections.abc import Mapping
from typing import Any

from forge_ml.config import ForgeConfig, config_to_dict, validate_config
from forge_ml.config.keys import config_value
from forge_ml.errors import ConfigError

__all__ = ["config_value", "hydra_string", "schema_type", "set_dotted", "typed_value", "with_overrides"]


def hydra_string(value: str) -> str:
    """`value` as a quoted string of Hydra's override grammar that composes back to exactly `value`,
    whatever it holds: spaces, accents, commas (a sweep, unquoted), brackets, quotes, `${`.

    Backslashes before a quote or the end are doubled, quotes escaped (Hydra's rule for quoted
    values), and `${` escaped so that OmegaConf does not read an interpolation into it."""
    # OmegaConf reads `\\` before `${` as one backslash: a run of them there is doubled, then `${` escaped
    escaped = re.sub(r"(\\*)\$\{", lambda run: run.group(1) * 2 + "\\${", value)
    body = re.sub(r"(\\+)(?='|$)", lambda run: run.group(1) * 2, escaped)
    return "'" + body.replace("'", "\\'") + "'"


def set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    """Set `key` (dotted) in nested plain `data`, creating the sections on the way."""
    node = data
    *parents, leaf = key.split(".")
    for part in parents:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[leaf] = copy.deepcopy(value)


def with_overrides(cfg: ForgeConfig, overrides: Mapping[str, Any]) -> ForgeConfig:
    """Return a new validated config: `cfg` with each dotted key of `overrides` set (ConfigError if invalid).

    A mapping value replaces the whole section (`tune.space` is set, not merged). Values that already
    have their key's type (a trial's sampled point, a checked plan) skip the schema merge, whose
    conversions would leave them as they are: only the range checks run.
    """
    if not overrides:
        return cfg
    if all(_typed_leaf(str(key), value) for key, value in overrides.items()):
        return _set_typed(cfg, overrides)
    data = config_to_dict(cfg)
    for key, value in overrides.items():
        set_dotted(data, str(key), value)
    return validate_config(data)


@functools.cache
def schema_type(key: str) -> type:
    """Return the Python type of a leaf key of the config schema; raise ConfigError when it is none."""
    node: Any = ForgeConfig
    for part in key.split("."):
        hints = typing.get_type_hints(node) if dataclasses.is_dataclass(node) else {}
        if part not in hints:
            raise ConfigError(f"'{key}' is not a config key ('{part}' unknown)")
        node = hints[part]
    if dataclasses.is_dataclass(node):
        raise ConfigError(f"'{key}' is a config group, not a value")
    args = [a for a in typing.get_args(node) if a is not type(None)]
    if typing.get_origin(node) in (typing.Union, types.UnionType) and len(args) == 1:
        node = args[0]
    return node


def typed_value(key: str, value: Any) -> Any:
    """Return `value` as the schema type of leaf `key` (an int for a float key, a whole float for an int
    key); ConfigError when it is of another kind (a bool is never a number here)."""
    kind = schema_type(key)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if kind is int and isinstance(value, float) and value.is_integer():
        return int(value)
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise ConfigError(f"'{key}' takes {kind.__name__} values, got {value!r}")
    return value


def _typed_leaf(key: str, value: Any) -> bool:
    """Whether `value` is a scalar of exactly the schema type of leaf `key` (bool is not an int here)."""
    try:
        kind = schema_type(key)
    except ConfigError:
        return False
    return kind in (int, float, bool, str) and type(value) is kind


def _set_typed(cfg: ForgeConfig, values: Mapping[str, Any]) -> ForgeConfig:
    new = copy.deepcopy(cfg)
    for key, value in values.items():
        *parents, leaf = str(key).split(".")
        node: Any = new
        for part in parents:
            node = getattr(node, part)
        setattr(node, leaf, value)
    problems = new.check()
    if problems:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(problems))
    return new
