"""What has been tried: earlier trials and rounds read back from MLflow, and the latest gold failures.

Both planners read the same `History`; the round engine's searcher is warm-started from it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forge_ml.config import ForgeConfig
from forge_ml.config.overrides import schema_type
from forge_ml.errors import ConfigError
from forge_ml.search import SearchParam

FAILURES_FILE = "eval_failures.jsonl"


@dataclass
class TrialRow:
    round: int  # the flywheel round; 0 for a round run outside it (`forge-ml tune`)
    trial_id: str
    status: str
    params: dict[str, Any]  # the planner.bounds keys, typed
    metrics: dict[str, float]
    round_name: str = ""  # the round run's name: round-003, or tune-001 outside the flywheel

    @property
    def where(self) -> str:
        """The round as a person finds it: `round 3`, or the run's name for one outside the flywheel."""
        return f"round {self.round}" if self.round else self.round_name or "a round outside the flywheel"


@dataclass
class RoundRow:
    round: int  # as TrialRow's: 0 outside the flywheel
    run_id: str
    hypothesis: str
    gold_accuracy: float | None
    promoted: bool
    wall_s: float | None
    num_trials: int
    cost_usd: float = 0.0
    name: str = ""  # round-003, or tune-001 outside the flywheel


@dataclass
class History:
    trials: list[TrialRow] = field(default_factory=list)
    rounds: list[RoundRow] = field(default_factory=list)
    failures: list[dict[str, Any]] = field(default_factory=list)  # latest gold failures

    def scored(self, metric: str) -> list[TrialRow]:
        return [t for t in self.trials if metric in t.metrics and math.isfinite(t.metrics[metric])]

    def best(self, metric: str, mode: str) -> TrialRow | None:
        scored = self.scored(metric)
        if not scored:
            return None
        pick = min if mode == "min" else max
        return pick(scored, key=lambda t: t.metrics[metric])

    def warm_start(self, params: dict[str, SearchParam], metric: str) -> list[tuple[dict, float]]:
        """Return (point, score) pairs of earlier trials whose searched keys are all known."""
        points = []
        for trial in self.scored(metric):
            if all(k in trial.params for k in params):
                points.append(({k: trial.params[k] for k in params}, trial.metrics[metric]))
        return points

    def failures_by_category(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for row in self.failures:
            name = str(row.get("category") or "uncategorized")
            counts[name] = counts.get(name, 0) + 1
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

    @property
    def spent_usd(self) -> float:
        return sum(r.cost_usd for r in self.rounds)


def parse_param_value(key: str, text: str) -> Any:
    """Return an MLflow param string as the schema type of `key`."""
    kind = schema_type(key)
    if kind is bool:
        return text.lower() == "true"
    try:
        return kind(float(text)) if kind is int else kind(text)
    except ValueError:
        return text


def _round_number(name: str | None) -> int:
    """The flywheel round a flywheel round run's `forge.round` tag names (`round-003`: 3)."""
    _, _, number = str(name).rpartition("-")
    try:
        return int(number)
    except ValueError:
        return 0


def read_history(cfg: ForgeConfig, client: Any, experiment_id: str, output_dir: Path) -> History:
    """Return the trials and rounds recorded in the project's experiment, oldest first."""
    history = History()
    rounds = client.search_runs(
        [experiment_id], filter_string="tags.`forge.kind` = 'round'", max_results=5000
    )
    round_of: dict[str, tuple[int, str]] = {}
    for run in rounds:
        in_flywheel = run.data.tags.get("forge.flywheel") == "true"
        number = _round_number(run.data.tags.get("forge.round")) if in_flywheel else 0
        round_of[run.info.run_id] = (number, run.data.tags.get("forge.round", ""))
        if run.info.status != "FINISHED":
            continue
        metrics = run.data.metrics
        history.rounds.append(
            RoundRow(
                round=number,
                run_id=run.info.run_id,
                hypothesis=run.data.tags.get("forge.hypothesis", ""),
                gold_accuracy=metrics.get("gold/accuracy"),
                promoted=run.data.tags.get("forge.gate.decision") == "promoted",
                wall_s=metrics.get("round/wall_s"),
                num_trials=int(
                    metrics.get("round/trials_finished", 0) + metrics.get("round/trials_stopped", 0)
                ),
                cost_usd=metrics.get("planner/cost_usd", 0.0),
                name=run.data.tags.get("forge.round", ""),
            )
        )
    history.rounds.sort(key=lambda r: r.round)
    trials = client.search_runs(
        [experiment_id], filter_string="tags.`forge.kind` = 'trial'", max_results=50_000
    )
    for run in trials:
        params = {}
        for key in cfg.planner.bounds:
            if key in run.data.params:
                try:
                    params[key] = parse_param_value(key, run.data.params[key])
                except ConfigError:
                    continue
        number, name = round_of.get(run.data.tags.get("mlflow.parentRunId", ""), (0, ""))
        history.trials.append(
            TrialRow(
                round=number,
                trial_id=run.data.tags.get("forge.trial_id", run.info.run_id),
                status=run.info.status,
                params=params,
                metrics=dict(run.data.metrics),
                round_name=name,
            )
        )
    history.trials.sort(key=lambda t: (t.round, t.trial_id))
    history.failures = read_failures(output_dir / FAILURES_FILE)
    return history


def read_failures(path: Path) -> list[dict[str, Any]]:
    """The last evaluation's failures (output/eval_failures.jsonl): advisory, so damaged lines are skipped."""
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows
