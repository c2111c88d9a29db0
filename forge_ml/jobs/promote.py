"""`forge-ml promote`: run the promotion gate on a registry version by hand, or force a promotion.

The gate (`Registry.gate` with `registry.gate`) compares the version's recorded gold outcome with
the champion's, records its decision as version tags and moves `champion` when it passes. `force`
skips the gate: the reason, the OS user and the time become version tags (`forge.force.*`), then
`champion` moves (and the stage transitions happen when `registry.stages`). `rebaseline` re-measures
the champion on the current gold set under the current scorer, so that later candidates compare
with it. Each is also an MLflow run (forge.kind=promote), so there is provenance beside the tags.
"""

from __future__ import annotations

import getpass
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from forge_ml.config import ForgeConfig
from forge_ml.console import console, titled_table
from forge_ml.errors import InputError
from forge_ml.gate import GoldOutcome
from forge_ml.project import Project, ProjectLock
from forge_ml.registry import CHALLENGER, Registry
from forge_ml.tracking import Tracker

Decision = Literal["promoted", "refused", "forced", "rebaselined", "unchanged"]


@dataclass
class Rebaselined:
    """The champion re-measured: its outcome before and after."""

    version: str
    old: GoldOutcome
    new: GoldOutcome

    def line(self) -> str:
        return (
            f"re-baselined champion v{self.version}: gold accuracy {self.old.accuracy:.3f} → "
            f"{self.new.accuracy:.3f} on gold {self.new.gold_hash[:12]}, scored by {self.new.scoring}"
        )


@dataclass
class PromoteResult:
    model: str
    version: str
    decision: Decision
    reasons: list[str]
    run_id: str
    p_value: float | None = None
    compared_to: str | None = None  # the champion before
    champion: str | None = None  # the champion after
    tags: dict[str, str] = field(default_factory=dict)  # version tags written by a forced promotion

    @property
    def refused(self) -> bool:
        return self.decision == "refused"


def os_user() -> str:
    """The OS user running the command, as recorded with a forced promotion."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no login name and no passwd entry (some containers)
        return "unknown"


def run_promote(
    cfg: ForgeConfig,
    *,
    version: int | None = None,
    force: bool = False,
    reason: str | None = None,
    rebaseline: bool = False,
) -> PromoteResult:
    """Gate version `version` (default: the `challenger`), promote it regardless with `force`, or
    re-measure the champion with `rebaseline`."""
    if rebaseline and (force or reason is not None or version is not None):
        raise InputError("--rebaseline re-measures the champion: it takes no --version, --force or --reason")
    if force and not (reason or "").strip():
        raise InputError("--force needs --reason TEXT: say why the gate is overridden (it is recorded)")
    if reason is not None and not force:
        raise InputError("--reason goes with --force (a gated promotion records the gate's own reasons)")
    project = Project(Path(cfg.project_dir))
    with ProjectLock(
        project, "promote"
    ):  # the champion alias is the flywheel's gate's too: one writer at a time
        if rebaseline:
            return _rebaseline(cfg, project)
        return _promote(cfg, project, version, force, reason)


def _rebaseline(cfg: ForgeConfig, project: Project) -> PromoteResult:
    from forge_ml.data.project_data import load_project_data

    registry = Registry.for_project(cfg, project)
    number = registry.champion_number()
    if number is None:
        raise InputError(f"--rebaseline: {registry.name} has no champion to re-measure")
    gold_hash = load_project_data(project, cfg.task, write_seed=False).hashes["gold"]
    tags = {"forge.kind": "promote", "forge.promote.model": registry.name, "forge.promote.version": number}
    with Tracker(cfg, project).start_run(f"rebaseline-v{number}", tags) as run:
        done = rebaseline_champion(cfg, project, registry, gold_hash)
        reasons = [done.line()] if done else ["the champion was measured on this gold set under this scorer"]
        decision = "rebaselined" if done else "unchanged"
        result = PromoteResult(
            registry.name, number, decision, reasons, run.run_id, compared_to=number, champion=number
        )
        run.set_tags({"forge.promote.decision": result.decision, "forge.promote.reasons": reasons[0]})
    return result


def _promote(
    cfg: ForgeConfig, project: Project, version: int | None, force: bool, reason: str | None
) -> PromoteResult:
    registry = Registry.for_project(cfg, project)
    found = registry.version(version, alias=None if version is not None else CHALLENGER)
    number = str(found.version)
    outcome = None if force else GoldOutcome.from_tags(found.tags)
    tags = {
        "forge.kind": "promote",
        "forge.promote.model": registry.name,
        "forge.promote.version": number,
        "forge.promote.forced": str(force).lower(),
    }
    with Tracker(cfg, project).start_run(f"promote-v{number}", tags) as run:
        before = registry.champion_number()
        if force:
            result = _forced(registry, number, (reason or "").strip(), before, run.run_id)
        else:
            decision = registry.gate(found, outcome, cfg.registry.gate)
            result = PromoteResult(
                registry.name,
                number,
                "promoted" if decision.promote else "refused",
                decision.reasons,
                run.run_id,
                decision.p_value,
                decision.compared_to,
            )
        result.champion = registry.champion_number()
        run.set_tags(
            {
                "forge.promote.decision": result.decision,
                "forge.promote.reasons": "; ".join(result.reasons),
                "forge.promote.p_value": result.p_value,
                "forge.promote.compared_to": result.compared_to or "none",
                "forge.promote.champion": result.champion or "none",
                **result.tags,
            }
        )
    return result


def _forced(registry: Registry, number: str, reason: str, before: str | None, run_id: str) -> PromoteResult:
    user = os_user()
    tags = {
        "forge.force.reason": reason,
        "forge.force.user": user,
        "forge.force.time": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "forge.force.run_id": run_id,
    }
    registry.force_promote(number, tags)
    reasons = [f"forced by {user}: {reason}"]
    return PromoteResult(registry.name, number, "forced", reasons, run_id, compared_to=before, tags=tags)


def describe(result: PromoteResult) -> Any:
    """A rich renderable of the decision and its reasons."""
    colour = {
        "promoted": "green",
        "forced": "yellow",
        "refused": "red",
        "rebaselined": "green",
        "unchanged": "green",
    }[result.decision]
    table = titled_table(
        f"{result.model} v{result.version}: [{colour}]{result.decision}[/]", show_header=False
    )
    table.add_column("what")
    table.add_column("value")
    for reason in result.reasons:
        table.add_row("reason", reason)
    if result.p_value is not None:
        table.add_row("McNemar p", f"{result.p_value:.4g}")
    table.add_row("champion before", f"v{result.compared_to}" if result.compared_to else "none")
    table.add_row("champion now", f"v{result.champion}" if result.champion else "none")
    return table


def rebaseline_champion(
    cfg: ForgeConfig, project: Project, registry: Registry, gold_hash: str
) -> Rebaselined | None:
    """Re-measure the champion on the current gold set under the current scorer (`promote
    --rebaseline`, `flywheel --rebaseline`), so later candidates compare like with like; None when
    there is no champion, or it was measured so already."""
    from forge_ml.data.project_data import load_project_data
    from forge_ml.evaluation.report import score_outputs
    from forge_ml.evaluation.scorers import make_scorer, scoring_rule

    scoring = scoring_rule(cfg.eval, project.root)
    champion = registry.champion()
    if champion is None or (champion.outcome.gold_hash == gold_hash and champion.outcome.scoring == scoring):
        return None
    version, old = champion.version, champion.outcome
    data = load_project_data(project, cfg.task)
    outputs = registry.load(version.version).predict([ex.user for ex in data.gold])
    report = score_outputs(data.gold, list(outputs), make_scorer(cfg.eval, project.root), cfg.eval)
    new = GoldOutcome.from_report(report, gold_hash, scoring)
    registry.rebaseline(version, new, previous=old)
    return Rebaselined(str(version.version), old, new)


def rebaseline_before_rounds(cfg: ForgeConfig, project: Project, registry: Registry, gold_hash: str) -> None:
    """`flywheel --rebaseline`: re-measure the champion, and say what changed."""
    done = rebaseline_champion(cfg, project, registry, gold_hash)
    line = done.line() if done else "re-baseline: nothing to do (no champion, or gold and scorer unchanged)"
    console.print(line, highlight=False, soft_wrap=True)
