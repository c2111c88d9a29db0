"""`forge-ml flywheel`: plan → augment → tune round → gold eval → gate → record, round after round.

Stops when the champion reaches `eval.target_accuracy`, after `flywheel.max_rounds` rounds (all
runs together), or when the wall-time or planner-dollar budget runs out. Running it again
resumes: the round in progress continues from its last completed stage, its trials from Ray
Tune's saved state when that can be restored; runs a crash left RUNNING are marked KILLED.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import time
from collections import Counter
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path

from forge_ml import journal, stopping
from forge_ml.augment import augment_data
from forge_ml.compose import compose_config
from forge_ml.config import ForgeConfig, config_to_dict, validate_config
from forge_ml.console import console, print_round
from forge_ml.data.project_data import load_project_data
from forge_ml.errors import ForgeError, RuntimeFault, describe
from forge_ml.evaluation.report import write_report
from forge_ml.evaluation.scorers import scoring_rule
from forge_ml.faults import failpoint
from forge_ml.flywheel_preflight import check_answer_room_here, check_gold_eval_here
from forge_ml.flywheel_state import (
    AugmentSummary,
    BestTrial,
    GateRecord,
    PlannerRecord,
    RoundState,
    changed_keys,
    check_resumable,
    checkpoint_shape,
    load_state,
    save_state,
)
from forge_ml.heartbeat import Heartbeat
from forge_ml.jobs.evaluate import evaluate_adapter
from forge_ml.jobs.promote import rebaseline_before_rounds
from forge_ml.llm import make_client
from forge_ml.models.loader import load_tokenizer
from forge_ml.planner import RoundPlanner, read_history
from forge_ml.planner.history import FAILURES_FILE, read_failures
from forge_ml.project import Project, ProjectLock, patch_config
from forge_ml.registry import GoldOutcome, Registry
from forge_ml.search import parse_space
from forge_ml.tracking import TrackedRun, Tracker, config_params, tracking_unreachable, unreachable_reason
from forge_ml.tuning.engine import run_round
from forge_ml.tuning.runtime import ray_runtime
from forge_ml.tuning.storage import copy_adapter

log = logging.getLogger(__name__)


@dataclass
class FlywheelResult:
    rounds_done: int
    stop_reason: str
    champion_accuracy: float | None
    target_reached: bool
    records: list[journal.RoundRecord] = field(default_factory=list)


class Flywheel:
    """One `forge-ml flywheel` run over a project."""

    def __init__(
        self,
        project: Project,
        overrides: list[str],
        *,
        max_rounds: int | None = None,
        more_rounds: int | None = None,
        skip_train: bool = False,
    ) -> None:
        """`max_rounds`: rounds in all (default `flywheel.max_rounds`); `more_rounds`: this many
        more than the project has recorded when `run` starts (a round being resumed is one of them)."""
        self.project = project
        self.overrides = overrides
        self.skip_train = skip_train
        self.cfg = compose_config(project, overrides)
        self.max_rounds = max_rounds or self.cfg.flywheel.max_rounds
        self.more_rounds = more_rounds
        self.tracker = Tracker(self.cfg, project)
        self.registry = Registry.for_project(self.cfg, project)
        self.planner = RoundPlanner(self.cfg, project)
        self.started = time.monotonic()
        self.heartbeat = Heartbeat(project, self.cfg.flywheel.heartbeat_s)

    # -- the loop -----------------------------------------------------------------------------
    def run(self, *, rebaseline: bool = False) -> FlywheelResult:
        if not self.skip_train:
            check_gold_eval_here(self.cfg)
        with ProjectLock(self.project) as lock, ExitStack() as self._resources, self.heartbeat:
            if lock.recovered:
                console.print(
                    f"recovered the lock of a stopped flywheel (pid {lock.recovered_from or 'unknown'})"
                )
            data = load_project_data(self.project, self.cfg.task)
            gold_hash = data.hashes["gold"]
            if rebaseline:
                rebaseline_before_rounds(self.cfg, self.project, self.registry, gold_hash)
            self.registry.check_gold(gold_hash, scoring_rule(self.cfg.eval, self.project.root))
            if not self.skip_train:
                check_answer_room_here(self.cfg, self.project, data)
            state = load_state(self.project)
            if self.more_rounds is not None:
                recorded = max((r.round for r in journal.read_records(self.project)), default=0)
                self.max_rounds = recorded + self.more_rounds
            # round runs (and their trials) a killed flywheel left RUNNING; the round being resumed keeps its run
            self.tracker.close_stale_runs(
                "tags.`forge.flywheel` = 'true'",
                "left RUNNING by a stopped flywheel",
                keep=state.round_run_id if state else None,
            )
            while True:
                records = journal.read_records(self.project)
                done = max((r.round for r in records), default=0)
                if state is not None and state.round <= done:  # recorded, killed before the state was cleared
                    if state.round_run_id:
                        self.tracker.finish_with_children(state.round_run_id)
                    state = None
                    save_state(self.project, None)
                stop = self._stop_reason(done)
                if stop and state is None:
                    return self._result(done, stop, records)
                number = state.round if state else done + 1
                state = state or RoundState(round=number)
                self._round(state)
                state = None

    def _stop_reason(self, done: int) -> str | None:
        champion = self.registry.champion()
        fw = self.cfg.flywheel
        if champion and champion.accuracy >= self.cfg.eval.target_accuracy:
            return f"target reached: the champion's gold accuracy ≥ eval.target_accuracy {self.cfg.eval.target_accuracy:g}"
        if done > self.max_rounds:  # `--rounds 1` on a project that has run 3: they count, and are done
            return f"{done} rounds done already, {self.max_rounds} asked for (--iters N runs N more)"
        if done >= self.max_rounds:
            return f"{done} of {self.max_rounds} rounds done"
        if fw.wall_budget_min is not None and self._remaining_s() <= 0:
            return f"wall-time budget of {fw.wall_budget_min:g} min spent"
        if fw.planner_budget_usd is not None:
            spent = read_history(
                self.cfg, self.tracker.client, self.tracker.experiment_id, self.project.output
            ).spent_usd
            if spent >= fw.planner_budget_usd:
                return f"planner budget spent: ${spent:.2f} of ${fw.planner_budget_usd:.2f}"
        return None

    def _remaining_s(self) -> float | None:
        budget = self.cfg.flywheel.wall_budget_min
        return None if budget is None else budget * 60 - (time.monotonic() - self.started)

    def _result(self, done: int, stop: str, records: list[journal.RoundRecord]) -> FlywheelResult:
        champion = self.registry.champion()
        accuracy = champion.accuracy if champion else None
        reached = accuracy is not None and accuracy >= self.cfg.eval.target_accuracy
        self.heartbeat.beat(done, "completed", accuracy=accuracy, stop_reason=stop)
        return FlywheelResult(done, stop, accuracy, reached, records)

    # -- one round ------------------------------------------------------------------------------
    def _round(self, state: RoundState) -> None:
        number = state.round
        beat = self.heartbeat
        beat.beat(number, "running", stage=state.stage)
        try:
            if not state.reached("planned"):  # forge.yaml may carry last round's patches
                beat.step("plan")
                self._plan(compose_config(self.project, self.overrides), state)
            cfg = self._round_config(state)
            run = self._open_run(state, cfg)
            if not state.reached("augmented"):
                beat.step("augment")
                self._augment(cfg, state, run)
            if not self.skip_train:
                if not state.reached("tuned"):
                    beat.step("tune")
                    self._tune(cfg, state, run)
                if not state.reached("gated"):
                    beat.step("gate")
                    self._gate(cfg, state, run)
            beat.step("record")
            self._record(cfg, state, run)
        except BaseException as exc:
            shown = None  # what the user is told, when it is not `exc` itself
            if tracking_unreachable(exc):
                shown = RuntimeFault(
                    f"round {number}: the tracking server stopped answering ({unreachable_reason(exc)}); "
                    "the round is kept as it stands: run `forge-ml flywheel` again once it is back"
                )
            self._fail(state, exc, shown)
            if shown is not None:
                raise shown from exc
            raise

    def _plan(self, cfg: ForgeConfig, state: RoundState) -> None:
        history = read_history(cfg, self.tracker.client, self.tracker.experiment_id, self.project.output)
        console.print(f"[bold]round {state.round}[/]: planning ({self.planner.backend})")
        outcome = self.planner.plan(cfg, history, state.round, self._remaining_s())
        plan = outcome.plan
        if plan.forge_yaml_patches:
            patch_config(self.project.config_file, plan.forge_yaml_patches)
        journal.append_background(self.project, state.round, plan.background_additions)
        failpoint("flywheel.plan")
        state.plan, state.planner = plan, PlannerRecord.of(outcome, cfg)
        state.stage = "planned"
        save_state(self.project, state)
        console.print(f"  {plan.hypothesis}", highlight=False)
        if outcome.fallback:
            console.print(f"  [yellow]offline plan used[/]: {outcome.reason}", highlight=False)

    def _round_config(self, state: RoundState) -> ForgeConfig:
        """Return the round's one config: forge.yaml (the plan's patches written), the command line, the plan.

        A round whose run is already open keeps the config that run logged: a setting changed
        since applies from the next round, except one its trials' checkpoints depend on (refused).
        """
        fresh = state.plan.apply(compose_config(self.project, self.overrides))
        if state.experiment_path and state.checkpoint_shape:
            check_resumable(state, checkpoint_shape(fresh, parse_space(fresh.tune.space)))
        if state.config is None:
            return fresh
        saved = validate_config({**state.config, "project_dir": str(self.project.root)})
        changed = changed_keys(config_params(saved), config_params(fresh))
        if not changed:
            return fresh
        console.print(
            f"[yellow]round {state.round} continues under the config its run logged; changed since: "
            f"{', '.join(changed)} (from round {state.round + 1} on)[/]",
            highlight=False,
            soft_wrap=True,
        )
        return saved

    def _open_run(self, state: RoundState, cfg: ForgeConfig) -> TrackedRun:
        """Return the round run: the one this round already has (reopened), or a new one logging `cfg`."""
        if state.round_run_id:
            return self.tracker.reopen(state.round_run_id)
        plan, planner = state.plan, state.planner
        run = self.tracker.start_run(
            f"round-{state.round:03d}",
            {
                "forge.kind": "round",
                "forge.round": f"round-{state.round:03d}",
                "forge.flywheel": "true",
                "forge.hypothesis": plan.hypothesis[:4000],
                "forge.planner": planner.source,
                "forge.planner.fallback": str(planner.fallback).lower(),
                "forge.planner.fallback_reason": planner.reason[:4000] or None,
            },
            cfg=cfg,
        )
        run.log_params(config_params(cfg))
        run.log_metrics(planner.usage.metrics(cfg.planner))
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "plan.json").write_text(
                json.dumps({"plan": asdict(plan), "planner": asdict(planner)}, indent=2)
            )
            run.log_artifacts(Path(tmp), "round")
        state.round_run_id, state.config = run.run_id, config_to_dict(cfg)
        save_state(self.project, state)
        return run

    def _augment(self, cfg: ForgeConfig, state: RoundState, run: TrackedRun) -> None:
        claude = make_client(cfg.planner) if self.planner.backend == "claude" else None
        failures = read_failures(self.project.output / FAILURES_FILE)
        result = augment_data(
            cfg, self.project, state.plan, state.round, failures=failures, claude=claude, run_id=run.run_id
        )
        failpoint("flywheel.augment")
        data = load_project_data(self.project, cfg.task)
        run.log_metrics(result.metrics() | result.usage.metrics(cfg.planner, prefix="augment"))
        run.log_params(
            {f"data.by_source.{k}": v for k, v in result.by_source.items()}
            | {f"data.by_category.{k}": v for k, v in result.by_category.items()}
            | {"data.writer": result.writer, "data.canonical_hash": result.dataset_hash}
        )
        run.set_tags({"forge.data.canonical_hash": result.dataset_hash})
        if cfg.tracking.log_datasets:
            canonical = self.project.resolve(cfg.task.canonical_path)
            run.log_dataset("canonical", data.frame("all"), result.dataset_hash, canonical, "training")
        state.augment = AugmentSummary(result.added, result.size, result.dataset_hash, result.writer)
        state.stage = "augmented"
        save_state(self.project, state)
        for line in result.report():
            console.print(line, highlight=False)

    def _tune(self, cfg: ForgeConfig, state: RoundState, run: TrackedRun) -> None:
        history = read_history(cfg, self.tracker.client, self.tracker.experiment_id, self.project.output)
        params = parse_space(cfg.tune.space)
        shape = checkpoint_shape(cfg, params)

        def remember(path: str) -> None:  # a new Ray Tune experiment: its checkpoints have this shape
            state.experiment_path, state.checkpoint_shape = path, shape
            save_state(self.project, state)

        # Ray starts at the first round that trains and stays up for the next (then this is a no-op)
        self._resources.enter_context(ray_runtime(self.cfg.tune))
        result = run_round(
            cfg,
            warm_start=history.warm_start(params, cfg.tune.metric),
            first_points=state.plan.first_points if state.plan else [],
            round_run=run,
            name=f"round-{state.round:03d}",
            restore_from=state.experiment_path,
            on_experiment=remember,
            on_trials=self.heartbeat.trials,
        )
        print_round(result, cfg.tune.metric)
        if result.restored:
            run.set_tags({"forge.restored": "true"})
        if result.restore_problem:
            run.set_tags({"forge.restore_failed": result.restore_problem[:4000]})
        best = result.best
        state.best = BestTrial(
            best.trial_id, best.run_id, best.checkpoint, best.metrics, result.base, result.restored
        )
        state.stage = "tuned"
        save_state(self.project, state)

    def _gate(self, cfg: ForgeConfig, state: RoundState, run: TrackedRun) -> None:
        best = state.best
        data = load_project_data(self.project, cfg.task)
        adapter_dir = self._adapter_dir(cfg, best)
        report = evaluate_adapter(
            cfg, self.project, best.base, adapter_dir, data.gold, system_prompt=data.system_prompt
        )
        scoring = scoring_rule(cfg.eval, self.project.root)
        outcome = GoldOutcome.from_report(report, data.hashes["gold"], scoring)
        metrics = report.metrics("gold")
        run.log_metrics(metrics, step=state.round)  # step = round: the UI's charts put rounds on the x axis
        if best.run_id:
            TrackedRun(self.tracker.client, best.run_id).log_metrics(metrics)
        results, failures = write_report(
            report, self.project.output, {"run_id": best.run_id, "round": state.round, "split": "gold"}
        )
        run.log_artifact(results, "round/gold")
        run.log_artifact(failures, "round/gold")
        failpoint("flywheel.gold_eval")
        version = self.registry.register_trained(
            cfg,
            best.run_id,
            adapter_dir=adapter_dir,
            base=best.base,
            system_prompt=data.system_prompt,
            outcome=outcome,
            tags={
                "forge.round": state.round,
                "forge.round_run_id": run.run_id,
                "forge.hypothesis": state.plan.hypothesis[:4000],
            },
            mission=self.project.mission_summary(),
        )
        failpoint("flywheel.register")
        decision = self.registry.gate(version, outcome, cfg.registry.gate)
        run.set_tags(
            {
                "forge.version": version.version,
                "forge.gate.decision": "promoted" if decision.promote else "refused",
                "forge.gate.reasons": "; ".join(decision.reasons),
            }
        )
        champion = self.registry.champion()
        state.gate = GateRecord(
            version=str(version.version),
            promoted=decision.promote,
            reasons=decision.reasons,
            gold_accuracy=report.accuracy,
            gold_per_category=outcome.per_category,
            champion_accuracy=champion.accuracy if champion else None,
        )
        state.stage = "gated"
        save_state(self.project, state)
        verdict = "[green]promoted to champion[/]" if decision.promote else "[yellow]not promoted[/]"
        cut = f" ({report.unfinished} cut at eval.max_new_tokens)" if report.unfinished else ""
        console.print(
            f"  gold accuracy {report.accuracy:.3f}{cut} — v{version.version} {verdict} ({'; '.join(decision.reasons)})"
        )

    def _adapter_dir(self, cfg: ForgeConfig, best: BestTrial) -> Path:
        """Copy the best trial's adapter (its last checkpoint, without the optimizer state) to
        output/adapters/<run id>."""
        target = self.project.output / "adapters" / (best.run_id or best.trial_id)
        source = best.checkpoint or ""
        tmp = target.with_name(target.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        try:
            copy_adapter(source, tmp)  # from the round's storage, an s3:// URI or the like, if not local
        except OSError as exc:
            raise RuntimeFault(f"cannot fetch the best trial's adapter from {source}: {exc}") from exc
        if not (tmp / "adapter_config.json").is_file():
            raise RuntimeFault(f"the best trial's checkpoint {source} holds no adapter")
        if not (tmp / "tokenizer_config.json").is_file():
            load_tokenizer(best.base, cfg.model, self.project).save_pretrained(str(tmp))
        shutil.rmtree(target, ignore_errors=True)
        tmp.rename(target)
        return target

    def _record(self, cfg: ForgeConfig, state: RoundState, run: TrackedRun) -> None:
        gate, best, augment = state.gate, state.best, state.augment
        failures = read_failures(self.project.output / FAILURES_FILE) if gate else []
        by_category = Counter(str(row.get("category") or "uncategorized") for row in failures)
        record = journal.RoundRecord(
            round=state.round,
            hypothesis=state.plan.hypothesis,
            plan=state.plan,
            planner=state.planner.label,
            dev_accuracy=best.metrics.get("dev/accuracy") if best else None,
            gold_accuracy=gate.gold_accuracy if gate else None,
            gold_per_category=gate.gold_per_category if gate else {},
            promoted=bool(gate and gate.promoted),
            gate_reasons=gate.reasons if gate else [],
            champion_accuracy=gate.champion_accuracy if gate else None,
            dataset_hash=augment.hash if augment else "",
            dataset_size=augment.size if augment else 0,
            examples_added=augment.added if augment else 0,
            round_run_id=run.run_id,
            best_run_id=best.run_id if best else None,
            version=gate.version if gate else None,
            wall_s=time.time() - state.started,
            failures_by_category=dict(by_category.most_common()),
        )
        records = [r for r in journal.read_records(self.project) if r.round != state.round] + [record]
        journal.write_context(self.project, records, cfg.eval.target_accuracy, cfg.flywheel.context_max_chars)
        journal.write_plan(self.project, records, cfg.eval.target_accuracy)
        plot = journal.plot_rounds(records, self.project.output / "plots" / "gold_accuracy.png")
        if plot is not None:
            run.log_artifact(plot, "round/plots")
        run.log_metrics(
            {"round/wall_s_total": record.wall_s, "round/examples_added": float(record.examples_added)}
        )
        if cfg.flywheel.git_commit:
            accuracy = f"{record.gold_accuracy * 100:.1f}%" if record.gold_accuracy is not None else "no eval"
            journal.git_commit(
                self.project,
                f"forge iter {state.round}: {accuracy} — {record.hypothesis[:120]}",
                journal.round_files(self.project, self.project.resolve(cfg.task.canonical_path)),
            )
        self.tracker.end_children(run.run_id)  # trial runs of an attempt that was not restored
        journal.append_record(self.project, record)  # the round counts as done from here
        failpoint("flywheel.record")
        run.finish("FINISHED")
        save_state(self.project, None)
        self.heartbeat.beat(
            state.round,
            "running",
            accuracy=record.champion_accuracy,
            last_round_gold=record.gold_accuracy,
        )

    # -- recovery -------------------------------------------------------------------------------
    def _fail(self, state: RoundState, exc: BaseException, shown: BaseException | None = None) -> None:
        """Record a round that raised, so the next run knows what to redo.

        Ctrl-C, bad input (exit 1: fix it, run again) and a tracking server that stopped
        answering keep the round as it stands: its run, its Ray Tune state, its stage. Any other
        fault fails the round's run and its trials start afresh next time.
        """
        stopped = stopping.reason(exc) if isinstance(exc, KeyboardInterrupt) else None
        kept = (
            stopped is not None
            or (isinstance(exc, ForgeError) and exc.exit_code == 1)
            or tracking_unreachable(exc)
        )
        # the heartbeat keeps the step the round failed in, or was stopped in
        if stopped is not None:
            self.heartbeat.update(status="stopped", stage=state.stage, reason=stopped)
        else:
            self.heartbeat.update(status="error", stage=state.stage, error=describe(shown or exc))
        run_id = state.round_run_id
        if not kept:
            state.round_run_id, state.config = None, None
            state.experiment_path, state.checkpoint_shape = None, {}
            if state.reached("tuned"):
                state.stage = "augmented"
        save_state(self.project, state)  # the local record first: MLflow may be the thing that failed
        # said now: a command stopped together with its Ray runtime may not live to its last line
        if stopped is not None:
            console.print(
                f"[yellow]round {state.round}: {stopped}[/]; kept as it stood, `forge-ml flywheel` resumes it",
                highlight=False,
            )
        if run_id is None:
            return
        try:
            run = TrackedRun(self.tracker.client, run_id)
            run.set_tags({"forge.error": stopped or describe(exc)})
            run.finish("KILLED" if kept else "FAILED")
            self.tracker.end_children(run_id)
        except Exception as mlflow_exc:  # the round is already recorded locally; the next run tidies up
            log.warning("could not mark round run %s: %s", run_id, mlflow_exc)
