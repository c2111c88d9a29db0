"""Where the current round stands, typed: `output/flywheel_state.json`.

It names the round in progress and its last completed stage (planned → augmented → tuned →
gated), the plan, the round's config (fixed when its MLflow run opens), its round run and its
Ray Tune experiment directory, so a killed run resumes where it stopped. A round counts as done
once its line is in experiments.jsonl. State written by earlier versions (the same keys, with
`{}` for a stage not reached) is read as it is.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal, get_args

from forge_ml.config import ForgeConfig, config_to_dict
from forge_ml.errors import ConfigError, InputError, describe
from forge_ml.fileio import atomic_write_json
from forge_ml.llm import Usage
from forge_ml.models.loader import BaseModelRef
from forge_ml.planner import PlanOutcome, PlanSource
from forge_ml.planner.plan import ExperimentPlan
from forge_ml.project import Project
from forge_ml.search import SearchParam
from forge_ml.secrets import flatten

STATE = "flywheel_state.json"
Stage = Literal["new", "planned", "augmented", "tuned", "gated"]
STAGES: tuple[Stage, ...] = ("planned", "augmented", "tuned", "gated")


@dataclass
class PlannerRecord:
    """Who planned the round, whether the offline plan stood in for Claude's and why, and what it cost."""

    source: PlanSource
    fallback: bool = False
    reason: str = ""
    usage: Usage = field(default_factory=Usage)
    cost_usd: float = 0.0

    @classmethod
    def of(cls, outcome: PlanOutcome, cfg: ForgeConfig) -> PlannerRecord:
        return cls(
            outcome.source,
            outcome.fallback,
            outcome.reason,
            outcome.usage,
            outcome.usage.cost_usd(cfg.planner),
        )

    @property
    def label(self) -> str:
        return self.source + (" (fallback)" if self.fallback else "")


@dataclass
class AugmentSummary:
    """What the round's augmentation added to canonical.jsonl."""

    added: int
    size: int
    hash: str
    writer: str


@dataclass
class BestTrial:
    """The round's best trial: where its adapter is and what it was trained on."""

    trial_id: str
    run_id: str | None
    checkpoint: str | None
    metrics: dict[str, float]
    base: BaseModelRef
    restored: bool = False


@dataclass
class GateRecord:
    """The gate's decision on the round's registry version."""

    version: str
    promoted: bool
    reasons: list[str]
    gold_accuracy: float
    gold_per_category: dict[str, float]
    champion_accuracy: float | None


@dataclass
class RoundState:
    round: int
    stage: Stage = "new"
    round_run_id: str | None = None
    plan: ExperimentPlan | None = None
    planner: PlannerRecord | None = None
    config: dict[str, Any] | None = None  # the round's config as its run logged it
    experiment_path: str | None = None
    checkpoint_shape: dict[str, Any] = field(default_factory=dict)  # what its trial checkpoints need
    augment: AugmentSummary | None = None
    best: BestTrial | None = None
    gate: GateRecord | None = None
    started: float = field(default_factory=time.time)

    def reached(self, stage: Stage) -> bool:
        return self.stage in STAGES and STAGES.index(self.stage) >= STAGES.index(stage)


def _part(cls: type, data: Any) -> Any:
    """Return the dataclass `cls` built from its saved form; None for a stage not reached (`{}`/null)."""
    if not data:
        return None
    if cls is PlannerRecord:
        data = {**data, "usage": Usage(**data.get("usage", {}))}
    if cls is BestTrial:
        data = {**data, "base": BaseModelRef.from_dict(data["base"])}
    known = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in known})


def state_from_dict(data: dict[str, Any]) -> RoundState:
    """Return the typed state of its saved form (this version's or an earlier one); TypeError/KeyError if damaged."""
    if data.get("stage", "new") not in get_args(Stage):
        raise ValueError(f"unknown stage {data.get('stage')!r}")
    parts = {
        "plan": ExperimentPlan,
        "planner": PlannerRecord,
        "augment": AugmentSummary,
        "best": BestTrial,
        "gate": GateRecord,
    }
    known = {f.name for f in fields(RoundState)}
    plain = {k: v for k, v in data.items() if k in known and k not in parts}
    return RoundState(**plain, **{name: _part(cls, data.get(name)) for name, cls in parts.items()})


def load_state(project: Project) -> RoundState | None:
    path = project.output / STATE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8")).get("current")
        return state_from_dict(data) if data else None
    except (json.JSONDecodeError, AttributeError, TypeError, KeyError, ValueError) as exc:
        raise InputError(
            f"{path}: unreadable flywheel state ({describe(exc)}); remove it to start the round again"
        ) from None


def save_state(project: Project, state: RoundState | None) -> None:
    atomic_write_json(project.output / STATE, {"current": asdict(state) if state else None})


# -- resuming trials: a Ray Tune experiment continues only under the config its checkpoints need --
# Keys that shape a trial's checkpoint (the adapter's tensors, the base under it, the optimizer
# state and step count): a restored trial with a different value cannot load its checkpoint.
CHECKPOINT_KEYS = ("model.", "lora.", "training.batch_size", "training.grad_accum", "training.precision")


def checkpoint_shape(cfg: ForgeConfig, params: dict[str, SearchParam]) -> dict[str, Any]:
    """Return the round's values of CHECKPOINT_KEYS that are not searched (trials keep their own)."""
    flat = flatten(config_to_dict(cfg))
    return {k: v for k, v in sorted(flat.items()) if k.startswith(CHECKPOINT_KEYS) and k not in params}


def changed_keys(old: dict[str, Any], new: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Return {key: (old, new)} for every flat key whose value differs."""
    return {k: (old.get(k), new.get(k)) for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)}


def check_resumable(state: RoundState, shape: dict[str, Any]) -> None:
    """Refuse to continue trials whose checkpoints were written under a different shape."""
    changed = changed_keys(state.checkpoint_shape, shape)
    if changed:
        details = ", ".join(f"{k}: {old!r} → {new!r}" for k, (old, new) in changed.items())
        raise ConfigError(
            f"round {state.round}: the config changed since its trials wrote their checkpoints in "
            f"{state.experiment_path} ({details}); they cannot be resumed with it. Put the "
            f"value{'s' if len(changed) > 1 else ''} back to continue the round, or delete "
            f"output/{STATE} to run round {state.round} again from its plan."
        )
