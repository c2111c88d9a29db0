"""`flywheel` group: when the loop stops, and what it records after each round."""

from __future__ import annotations

from dataclasses import dataclass, field

from forge_ml.config.checks import Problems


@dataclass
class FlywheelConfig:
    max_rounds: int = field(default=5, metadata={"help": "rounds in all, counting earlier runs (resume)"})
    wall_budget_min: float | None = field(
        default=None, metadata={"help": "stop starting rounds after this many minutes of this run"}
    )
    planner_budget_usd: float | None = field(
        default=None, metadata={"help": "stop when the planner has spent this much (all runs)"}
    )
    git_commit: bool = field(
        default=True, metadata={"help": "commit the project after each round if a git repo"}
    )
    context_max_chars: int = field(
        default=20_000, metadata={"help": "AGENT_CONTEXT.md keeps its newest part"}
    )
    heartbeat_s: float = field(
        default=30.0, metadata={"help": "seconds between beats of output/flywheel_heartbeat.json"}
    )

    def check(self, p: Problems) -> None:
        p.range("max_rounds", self.max_rounds, 1, 10_000)
        if self.wall_budget_min is not None:
            p.range("wall_budget_min", self.wall_budget_min, 0.0, 1e6, low_open=True)
        if self.planner_budget_usd is not None:
            p.range("planner_budget_usd", self.planner_budget_usd, 0.0, 1e6)
        p.range("context_max_chars", self.context_max_chars, 1000, 10_000_000)
        p.range("heartbeat_s", self.heartbeat_s, 0.0, 3600.0, low_open=True)
