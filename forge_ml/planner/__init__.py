"""Planning a round: Claude when a key is set, the offline planner otherwise or as the fallback.

`RoundPlanner.plan` never fails a round: an invalid Claude plan (after one repair turn), an API
error or a timeout gives the offline plan, with `fallback` and its reason recorded. A bad key,
missing permission or a spend limit stops asking Claude for the rest of the run.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Literal

from forge_ml.config import ForgeConfig
from forge_ml.llm import ClaudeRequestFailed, ClaudeUnavailable, Usage, claude_enabled, make_client
from forge_ml.planner.history import History, read_history
from forge_ml.planner.offline import offline_plan
from forge_ml.planner.plan import ExperimentPlan, PlanError, validate_plan
from forge_ml.project import GENERATOR_FILE, Project

__all__ = [
    "ExperimentPlan",
    "History",
    "PlanOutcome",
    "PlanSource",
    "RoundPlanner",
    "read_history",
    "validate_plan",
]
log = logging.getLogger(__name__)
PlanSource = Literal["claude", "offline"]


@dataclass
class PlanOutcome:
    plan: ExperimentPlan
    source: PlanSource
    fallback: bool = False
    reason: str = ""
    usage: Usage = field(default_factory=Usage)


class RoundPlanner:
    """Plans the rounds of one flywheel run; remembers when Claude stopped being usable."""

    def __init__(self, cfg: ForgeConfig, project: Project) -> None:
        self.project = project
        self.use_claude = claude_enabled(cfg.planner)
        self.disabled_reason: str | None = None
        self._client = None

    @property
    def backend(self) -> str:
        return "claude" if self.use_claude and not self.disabled_reason else "offline"

    def _offline(
        self, cfg: ForgeConfig, history: History, round_number: int, remaining_s: float | None
    ) -> ExperimentPlan:
        """The offline plan; with no new examples where nothing can write them (the round's data
        comes from Claude when it plans, else from the project's generator.py)."""
        writes = self.backend == "claude" or (self.project.root / GENERATOR_FILE).is_file()
        plan = offline_plan(
            cfg, history, round_number=round_number, remaining_s=remaining_s, writes_data=writes
        )
        return validate_plan(plan.to_dict(), cfg)

    def plan(
        self, cfg: ForgeConfig, history: History, round_number: int, remaining_s: float | None = None
    ) -> PlanOutcome:
        offline = self._offline(cfg, history, round_number, remaining_s)
        if not self.use_claude:
            return PlanOutcome(offline, "offline")
        usage = Usage()
        if self.disabled_reason:
            return PlanOutcome(
                offline, "offline", True, f"Claude disabled for this run: {self.disabled_reason}", usage
            )
        from forge_ml.planner.claude import claude_plan

        if self._client is None:
            self._client = make_client(cfg.planner)
        try:
            plan = claude_plan(self._client, cfg, self.project, history, round_number, remaining_s, usage)
            return PlanOutcome(plan, "claude", usage=usage)
        except PlanError as exc:
            reason = "invalid plan after one repair turn: " + "; ".join(exc.problems)
        except ClaudeUnavailable as exc:
            self.disabled_reason = str(exc)
            reason = f"Claude unavailable, not asked again this run: {exc}"
            offline = self._offline(cfg, history, round_number, remaining_s)  # Claude writes no data either
        except ClaudeRequestFailed as exc:
            reason = f"request failed: {exc}"
        log.info("planner: falling back to the offline plan (%s)", reason)  # the round prints why
        return PlanOutcome(offline, "offline", True, reason, usage)
