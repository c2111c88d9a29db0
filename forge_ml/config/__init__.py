"""The structured config schema: one dataclass per Hydra group, validated before anything loads.

`validate_config` merges a composed `DictConfig` into the schema (unknown keys and wrong
types fail there, naming the key), then checks every range and raises one `ConfigError`
that lists all problems.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

from forge_ml.config.checks import Problems
from forge_ml.config.evaluation import EvalConfig
from forge_ml.config.flywheel import FlywheelConfig
from forge_ml.config.keys import config_value
from forge_ml.config.lora import LoraConfig
from forge_ml.config.model import ModelConfig, OfflineCopyConfig, TinyModelConfig
from forge_ml.config.planner import BoundConfig, PlannerConfig
from forge_ml.config.registry import GateConfig, RegistryConfig
from forge_ml.config.task import TaskConfig
from forge_ml.config.tracking import TrackingConfig
from forge_ml.config.training import TrainingConfig
from forge_ml.config.tune import TrialResources, TuneConfig
from forge_ml.errors import ConfigError, first_line

__all__ = [
    "BoundConfig",
    "EvalConfig",
    "FlywheelConfig",
    "ForgeConfig",
    "GateConfig",
    "LoraConfig",
    "ModelConfig",
    "OfflineCopyConfig",
    "PlannerConfig",
    "RegistryConfig",
    "TaskConfig",
    "TinyModelConfig",
    "TrackingConfig",
    "TrainingConfig",
    "TrialResources",
    "TuneConfig",
    "config_hash",
    "did_you_mean",
    "validate_config",
]


GROUPS = ("model", "lora", "training", "eval", "task", "tracking", "tune", "planner", "registry", "flywheel")


@dataclass
class ForgeConfig:
    name: str = field(
        default="???", metadata={"help": "project name: MLflow experiment and registered model"}
    )
    project_dir: str = field(default="???", metadata={"help": "absolute project directory (set by the CLI)"})
    model: ModelConfig = field(default_factory=ModelConfig)
    lora: LoraConfig = field(default_factory=LoraConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    tune: TuneConfig = field(default_factory=TuneConfig)
    planner: PlannerConfig = field(default_factory=PlannerConfig)
    registry: RegistryConfig = field(default_factory=RegistryConfig)
    flywheel: FlywheelConfig = field(default_factory=FlywheelConfig)

    def check(self) -> list[str]:
        p = Problems("")
        if not self.name or not self.name.strip():
            p.add("name", "must not be empty")
        elif any(c in self.name for c in "/\\:@"):
            p.add("name", f"{self.name!r} must not contain '/', '\\', ':' or '@'")
        for group in GROUPS:
            sub = Problems(group)
            getattr(self, group).check(sub)
            p.extend(sub)
        for key in self.planner.bounds:
            try:
                config_value(self, key)
            except KeyError:
                p.add(f"planner.bounds.{key}", f"'{key}' is not a config key")
        if self.lora.method == "qlora" and self.model.is_tiny:
            p.add("lora.method", "qlora quantizes a pretrained base; use lora with model=tiny")
        return p.messages


@functools.cache
def _schema() -> DictConfig:
    """The schema as OmegaConf sees it, built once: merges copy it, never change it."""
    return OmegaConf.structured(ForgeConfig)


def _describe(exc: OmegaConfBaseException, cfg: dict[str, Any]) -> str:
    key = getattr(exc, "full_key", None) or ""
    message = first_line(exc)
    if not key:  # a merge error names no key: find the value of the wrong kind
        return _wrong_kind(_schema(), cfg) or message
    if "not in" in message or ("Key '" in message and "not" in message):
        return f"unknown key '{key}'" + did_you_mean(key)
    if isinstance(exc, MissingMandatoryValue):
        return f"{key}: missing: forge.yaml must set it ({_help(key)})"
    return f"{key}: {message}" if key else message


def _help(key: str) -> str:
    """The schema's help text of a top-level key."""
    fields = {f.name: f for f in dataclasses.fields(ForgeConfig)}
    return fields[key].metadata.get("help", key) if key in fields else key


def _wrong_kind(schema: DictConfig, data: dict[str, Any], prefix: str = "") -> str | None:
    """Name the first key whose value is not a mapping where the schema holds a section, or not a list
    where it holds a list; None when every value has the right kind."""
    for key, value in data.items():
        if value is None or not isinstance(key, str) or key not in schema:
            continue
        node = schema._get_node(key)
        name = f"{prefix}{key}"
        if isinstance(node, DictConfig):
            if not isinstance(value, dict):
                return f"{name}: expected a mapping of settings, got {type(value).__name__} {value!r}"
            found = _wrong_kind(node, value, f"{name}.")
            if found:
                return found
        elif isinstance(node, ListConfig) and not isinstance(value, list | tuple):
            return f"{name}: expected a list, got {type(value).__name__} {value!r}"
    return None


def did_you_mean(full_key: str) -> str:
    """Return " (did you mean 'a.b.closest'?)" for a key the schema lacks, or "" when nothing is close."""
    import difflib

    parent, _, leaf = full_key.rpartition(".")
    node: Any = _schema()
    for part in filter(None, parent.split(".")):
        node = node.get(part) if isinstance(node, DictConfig) else None
    if not isinstance(node, DictConfig):
        return ""
    close = difflib.get_close_matches(leaf, [str(k) for k in node], n=1)
    return f" (did you mean '{parent + '.' if parent else ''}{close[0]}'?)" if close else ""


def _literal(value: Any) -> Any:
    """`value` (resolved: plain containers) with `${` escaped in its strings, so that the schema
    merge reads a path or text holding `${` as written, not as an interpolation."""
    if isinstance(value, str):
        return value.replace("${", "\\${")
    if isinstance(value, dict):
        return {k: _literal(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_literal(v) for v in value]
    return value


def validate_config(cfg: DictConfig | dict) -> ForgeConfig:
    """Return the typed config, or raise ConfigError naming every bad key."""
    if isinstance(cfg, DictConfig):
        cfg = OmegaConf.to_container(cfg, resolve=True)
    cfg = {k: _literal(v) for k, v in cfg.items() if k != "hydra"}
    try:
        merged = OmegaConf.merge(_schema(), cfg)
        typed: ForgeConfig = OmegaConf.to_object(merged)
    except OmegaConfBaseException as exc:
        raise ConfigError(f"invalid configuration: {_describe(exc, cfg)}") from None
    problems = typed.check()
    if problems:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(problems))
    return typed


def config_to_dict(cfg: ForgeConfig) -> dict[str, Any]:
    """Return the config as plain containers (JSON-serialisable)."""
    return dataclasses.asdict(cfg)


def config_hash(cfg: ForgeConfig) -> str:
    """Return a short content hash of the resolved config (project_dir excluded)."""
    data = config_to_dict(cfg)
    data.pop("project_dir", None)
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:12]
