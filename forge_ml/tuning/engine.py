"""The round engine: one search over a space, run as parallel Ray Tune trials, recorded in MLflow.

`run_round` reads top to bottom: check the space → prepare data and base once → start or
join Ray → preflight → open the round run → fit (searcher inside the space, ASHA or FIFO)
→ record the trials table, the best trial and the top-k adapters.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forge_ml.config import ForgeConfig
from forge_ml.console import console
from forge_ml.data.project_data import load_project_data, merge_seed
from forge_ml.data.tokens import in_memory, sft_datasets, token_cache
from forge_ml.errors import ConfigError, RuntimeFault, describe
from forge_ml.evaluation.room import check_answer_room
from forge_ml.evaluation.scorers import make_scorer
from forge_ml.heartbeat import TrialCounts
from forge_ml.hub import hub_snapshot
from forge_ml.models.loader import BaseModelRef, load_tokenizer, resolve_base
from forge_ml.models.source import is_local
from forge_ml.project import Project
from forge_ml.search import SearchParam, check_space, parse_space, tune_space
from forge_ml.tracking import TrackedRun, Tracker, config_params
from forge_ml.tuning.runtime import (
    check_local_cpus,
    fit_or_explain,
    note_trial_process,
    preflight,
    ray_runtime,
    storage_path,
)
from forge_ml.tuning.storage import (
    check_storage,
    checkpoint_location,
    copy_adapter,
    set_aside,
    share_base,
    storage_child,
    unreadable_experiment,
)
from trainables.sft import TrialContext, sft_trial

log = logging.getLogger(__name__)


@dataclass
class TrialRecord:
    trial_id: str
    run_id: str | None
    config: dict[str, Any]
    status: str  # FINISHED | STOPPED | FAILED
    metrics: dict[str, float]
    checkpoint: str | None = None


@dataclass
class RoundResult:
    round_run_id: str
    name: str
    trials: list[TrialRecord] = field(default_factory=list)
    best: TrialRecord | None = None
    wall_s: float = 0.0
    tracking_s: float = 0.0  # driver time spent writing trials to MLflow
    epochs_trained: int = 0  # epochs reported by all trials together
    restored: bool = False  # continued from Ray Tune's saved experiment state
    restore_problem: str | None = None  # why the saved state could not be continued (set aside)
    base: BaseModelRef | None = None  # the base model the trials trained on


def _inside(params: dict[str, SearchParam], point: dict[str, Any]) -> bool:
    return set(point) == set(params) and all(params[k].contains(v) for k, v in point.items())


def make_searcher(
    cfg: ForgeConfig,
    params: dict[str, SearchParam],
    warm_start: list[tuple[dict, float]],
    first_points: list[dict[str, Any]],
) -> Any:
    """Return the searcher: TPE told the scores of earlier trials inside this space, or random.

    `first_points` are tried before anything is sampled (in order); `warm_start` pairs of
    (config, score) from earlier rounds seed TPE without being run again.
    """
    known = [(c, r) for c, r in warm_start if _inside(params, c)]
    fresh = [p for p in first_points if _inside(params, p)]
    if cfg.tune.searcher == "optuna":
        from forge_ml.tuning.searchers import WarmStartedTPE

        return WarmStartedTPE(warm_start=known, first_points=fresh, seed=searcher_seed(cfg, warm_start))
    from ray.tune.search import BasicVariantGenerator

    return BasicVariantGenerator(
        points_to_evaluate=fresh or None,
        random_state=searcher_seed(cfg, warm_start),
        max_concurrent=cfg.tune.max_concurrent_trials,
    )


def searcher_seed(cfg: ForgeConfig, warm_start: list[tuple[dict, float]]) -> int:
    """Return the round's sampling seed: `tune.seed`, moved on by the number of trials scored so far.

    Every round builds a fresh searcher. Seeded alike, each would replay the same random stream:
    a random searcher over an unchanged space would draw the same points every round, and TPE
    the same start-up points. The same history still gives the same seed.
    """
    return (cfg.tune.seed + 7919 * len(warm_start)) % 2**32


def max_epochs(cfg: ForgeConfig, params: dict[str, SearchParam]) -> int:
    """Return the most epochs any trial of the space can train."""
    param = params.get("training.epochs")
    if param is None:
        return cfg.training.epochs
    return int(max(param.values) if param.kind == "choice" else param.high)


def make_scheduler(cfg: ForgeConfig, params: dict[str, SearchParam]) -> Any:
    """Return the round's trial scheduler: FIFO, or ASHA with rungs in epochs up to the space's most."""
    if cfg.tune.scheduler == "fifo":
        from ray.tune.schedulers import FIFOScheduler

        return FIFOScheduler()
    from ray.tune.schedulers import ASHAScheduler

    return ASHAScheduler(
        time_attr="epoch",
        max_t=max(max_epochs(cfg, params), cfg.tune.grace_period),
        grace_period=cfg.tune.grace_period,
        reduction_factor=cfg.tune.reduction_factor,
        stop_last_trials=False,  # a trial that reaches the last epoch still reports dev/accuracy
    )


STANDALONE_ROUND = "tune-"  # a round run by `forge-ml tune` or the tune sweeper, outside the flywheel


def next_round_name(tracker: Tracker) -> str:
    """The name of a round run outside the flywheel: `tune-001`, `tune-002`, … The flywheel numbers
    its own rounds `round-NNN` from its journal; one sequence for both gave a hand-run round and the
    flywheel's next round the same name, and the planner read them as one round."""
    runs = tracker.client.search_runs(
        [tracker.experiment_id],
        filter_string=f"tags.`forge.kind` = 'round' and tags.`forge.round` LIKE '{STANDALONE_ROUND}%'",
        max_results=10_000,
    )
    return f"{STANDALONE_ROUND}{len(runs) + 1:03d}"


def run_round(
    cfg: ForgeConfig,
    *,
    warm_start: list[tuple[dict, float]] | None = None,
    first_points: list[dict[str, Any]] | None = None,
    tags: dict[str, Any] | None = None,
    track: bool = True,
    round_run: TrackedRun | None = None,
    name: str | None = None,
    restore_from: str | None = None,
    on_experiment: Callable[[str], None] | None = None,
    on_trials: Callable[[TrialCounts], None] | None = None,
) -> RoundResult:
    """Run one round of `cfg` (its search space is `cfg.tune.space`); return its trials and best trial.

    `cfg` is the round's config, composed once by the caller: the round run's params, the
    trials' base config and the searcher all come from it. The round is recorded in `round_run`
    when given (the caller opened it and logged `cfg`'s params; it finishes it), else in a new
    round run. `restore_from` continues an interrupted round from Ray Tune's experiment
    directory when it can; `on_experiment(path)` learns that directory before trials start, and
    `on_trials(counts)` where the trials stand each time one ends.
    """
    started = time.perf_counter()
    project = Project(Path(cfg.project_dir))
    params = parse_space(cfg.tune.space)
    if not params:
        raise ConfigError("search space is empty: pass sweeps such as 'lora.r=choice(4,8)' or set tune.space")
    check_space(cfg, params)
    storage = storage_path(cfg.tune, project)
    check_storage(storage)
    check_local_cpus(cfg.tune)

    data = load_project_data(project, cfg.task, write_seed=False)
    make_scorer(cfg.eval, project.root, probe=data.gold)  # a scorer.py that raises fails before training
    base = resolve_base(cfg, project, data.training_text())
    tokenizer = load_tokenizer(base, cfg.model, project)
    check_answer_room(tokenizer, data.gold, cfg.eval, refuse=True)  # the round's best is gated on gold
    role = cfg.model.system_role
    # with training.max_seq_length in the space the limit differs by trial: not checked here
    limit = None if "training.max_seq_length" in params else cfg.training.max_seq_length
    tokens = sft_datasets(data, tokenizer, system_role=role, max_length=limit, cache=token_cache(project))
    context = TrialContext(
        config=cfg,
        base_source=base.source,
        base_revision=base.revision,
        tokenizer=tokenizer,
        train_dataset=tokens.train,
        dev_dataset=tokens.dev,
        dev_examples=data.dev,
        system_prompt=data.system_prompt,
    )
    merge_seed(project, cfg.task, data)  # the datasets passed their checks: the seed joins canonical
    tracker = Tracker(cfg, project)
    with ray_runtime(cfg.tune):
        nodes = preflight(cfg.tune, storage)
        if not is_local(base.source) and nodes == 1:
            context.base_source, commit = hub_snapshot(base.source, base.revision)
            context.base_revision = None
            base = base.with_commit(commit)  # versions name the commit trained on
        elif base.built_locally and nodes > 1:  # the tiny model exists on this machine only
            context.base_source = share_base(base.source, storage)
        if nodes > 1:  # the token cache is on this machine: the trials get the rows through the object store
            context.train_dataset = in_memory(context.train_dataset)
            context.dev_dataset = in_memory(context.dev_dataset)
        name = name or next_round_name(tracker)
        searcher = make_searcher(cfg, params, warm_start or [], first_points or [])
        fit = _Fit(
            cfg,
            params,
            context,
            tracker,
            storage,
            name,
            searcher,
            track,
            restore_from,
            on_experiment,
            on_trials,
        )
        base_tags = base.provenance.tags() if base.provenance else {}
        if round_run is not None:
            round_run.set_tags(base_tags)
            result = fit.run(round_run, started)
        else:
            round_tags = {"forge.kind": "round", "forge.round": name, **(tags or {}), **base_tags}
            with tracker.start_run(name, round_tags) as own_run:
                own_run.log_params(config_params(cfg))
                result = fit.run(own_run, started)
    result.base = base
    return result


@dataclass
class _Fit:
    """One round's Ray Tune run: a fresh Tuner, or one restored from an interrupted round's state."""

    cfg: ForgeConfig
    params: dict[str, SearchParam]
    context: TrialContext
    tracker: Tracker
    storage: str
    name: str
    searcher: Any
    track: bool
    restore_from: str | None
    on_experiment: Callable[[str], None] | None
    on_trials: Callable[[TrialCounts], None] | None = None
    restore_problem: str | None = None

    def run(self, round_run: TrackedRun, started: float) -> RoundResult:
        result = self.fit(round_run)
        result.wall_s = time.perf_counter() - started
        _record_round(self.cfg, self.params, round_run, self.tracker, result)
        return result

    def _restore(self, trainable: Any, callback: Any) -> Any:
        """Return a Tuner continuing `restore_from`, or None (with `restore_problem` set) when it cannot.

        Unreadable state is set aside under a new name, never overwritten: the round's trials
        start again in a new experiment directory.
        """
        from ray import tune

        path = self.restore_from
        problem = unreadable_experiment(path)
        if problem is None:
            try:
                tuner = tune.Tuner.restore(
                    path,
                    trainable=trainable,
                    resume_unfinished=True,
                    resume_errored=True,
                    param_space=tune_space(self.params),
                )
                run_config = tuner._local_tuner.get_run_config()  # the pickled callback holds a dead client
                run_config.callbacks = [callback]
                log.info("%s: continuing from Ray Tune's state in %s", self.name, path)
                return tuner
            except Exception as exc:
                problem = f"Ray Tune cannot restore it ({describe(exc)})"
        aside = set_aside(path)
        self.restore_problem = problem
        console.print(
            f"[yellow]{self.name}: the trials in {path} cannot be continued: {problem}; "
            f"{'kept as ' + aside if aside else 'left in place'}, the round's trials start again[/]",
            highlight=False,
            soft_wrap=True,
        )
        return None

    def _tuner(self, trainable: Any, callback: Any) -> tuple[Any, bool]:
        from ray import tune

        cfg = self.cfg
        if self.restore_from:
            tuner = self._restore(trainable, callback)
            if tuner is not None:
                return tuner, True
        run_name = f"{cfg.name}-{self.name}-{int(time.time())}"
        if self.on_experiment is not None:
            self.on_experiment(storage_child(self.storage, run_name))
        tuner = tune.Tuner(
            trainable,
            param_space=tune_space(self.params),
            tune_config=tune.TuneConfig(
                metric=cfg.tune.metric,
                mode=cfg.tune.mode,
                num_samples=cfg.tune.num_samples,
                # A Searcher is wrapped in Ray's concurrency limiter; the random generator limits itself.
                max_concurrent_trials=cfg.tune.max_concurrent_trials
                if cfg.tune.searcher == "optuna"
                else None,
                reuse_actors=True,  # a worker keeps torch & co. imported from one trial to the next
                search_alg=self.searcher,
                scheduler=make_scheduler(cfg, self.params),
            ),
            run_config=tune.RunConfig(
                name=run_name,
                storage_path=self.storage,
                callbacks=[callback],
                verbose=0,
                failure_config=tune.FailureConfig(max_failures=cfg.tune.max_failures),
                # A trial's model is its last checkpoint: the one its last report (the searcher's and
                # the scheduler's figure, and dev/accuracy's) describes. The newest are the ones kept.
                checkpoint_config=tune.CheckpointConfig(
                    num_to_keep=cfg.tune.num_to_keep,
                    checkpoint_score_attribute="epoch",
                    checkpoint_score_order="max",
                ),
            ),
        )
        return tuner, False

    def fit(self, round_run: TrackedRun) -> RoundResult:
        from forge_ml.tuning.steps import step_board

        with step_board() as board:
            self.context.board = board
            return self._fit(round_run, board)

    def _fit(self, round_run: TrackedRun, board: Any) -> RoundResult:
        from ray import tune

        from forge_ml.tuning.callback import RoundTracker

        cfg, name = self.cfg, self.name
        callback = RoundTracker(
            self.tracker,
            round_run,
            self.context.config,
            cfg.tune.metric,
            cfg.tune.mode,
            enabled=self.track,
            on_trials=self.on_trials,
            planned=cfg.tune.num_samples,
            board=board,
        )
        callback.round_run_name = name
        trainable = tune.with_resources(
            tune.with_parameters(sft_trial, context=self.context),
            {"cpu": cfg.tune.resources.cpu, "gpu": cfg.tune.resources.gpu},
        )
        tuner, restored = self._tuner(trainable, callback)
        grid = fit_or_explain(tuner, name)
        result = RoundResult(
            round_run_id=round_run.run_id, name=name, restored=restored, restore_problem=self.restore_problem
        )
        result.tracking_s = callback.seconds
        result.epochs_trained = callback.epochs_trained
        for trial_result in grid:
            last = trial_result.metrics or {}
            if last.get("pid"):  # Ray Tune's own: the process that ran the trial, on `hostname`
                note_trial_process(last["pid"], last.get("hostname"))
            trial_id = last.get("trial_id") or (trial_result.path or "").rsplit("/", 1)[-1]
            if trial_result.error is not None:
                status = "FAILED"
            else:
                status = "FINISHED" if last.get("forge/completed") else "STOPPED"
            checkpoint = None
            if status != "FAILED" and trial_result.checkpoint is not None:
                checkpoint = checkpoint_location(self.storage, trial_result.checkpoint)
            run = callback.runs.get(trial_id)
            metrics = {
                k: float(v)
                for k, v in last.items()
                if "/" in k and not k.startswith("forge/") and isinstance(v, (int, float))
            }
            result.trials.append(
                TrialRecord(
                    trial_id=trial_id,
                    run_id=run.run_id if run else None,
                    config=dict(trial_result.config or {}),
                    status=status,
                    metrics=metrics,
                    checkpoint=checkpoint,
                )
            )
        scored = rank_trials(result.trials, cfg.tune.metric, cfg.tune.mode)
        if not scored:
            raise RuntimeFault(f"{name}: every trial failed; see the trial runs in MLflow and {self.storage}")
        result.best = scored[0]
        return result


def rank_trials(trials: list[TrialRecord], metric: str, mode: str) -> list[TrialRecord]:
    """Return the trials that reported `metric` and did not fail, best first."""
    scored = [t for t in trials if t.status != "FAILED" and metric in t.metrics]
    return sorted(scored, key=lambda t: t.metrics[metric], reverse=mode == "max")


def trials_table(result: RoundResult, keys: list[str]) -> str:
    """Return the round's trials as CSV: id, status, each searched key, each metric."""
    metric_names = sorted({m for t in result.trials for m in t.metrics})
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["trial_id", "run_id", "status", *keys, *metric_names])
    for t in result.trials:
        writer.writerow(
            [
                t.trial_id,
                t.run_id or "",
                t.status,
                *(t.config.get(k, "") for k in keys),
                *(t.metrics.get(m, "") for m in metric_names),
            ]
        )
    return out.getvalue()


def _record_round(
    cfg: ForgeConfig,
    params: dict[str, SearchParam],
    round_run: TrackedRun,
    tracker: Tracker,
    result: RoundResult,
) -> None:
    keys = list(params)
    best = result.best
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "search_space.json").write_text(
            json.dumps({k: p.to_expression() for k, p in params.items()}, indent=2)
        )
        (folder / "trials.csv").write_text(trials_table(result, keys))
        (folder / "trials.json").write_text(
            json.dumps([t.__dict__ for t in result.trials], indent=2, default=str)
        )
        round_run.log_artifacts(folder, "round")
    round_run.set_tags({"forge.best_trial_id": best.trial_id, "forge.best_run_id": best.run_id or ""})
    round_run.log_metrics({f"best/{k}": v for k, v in best.metrics.items()} | {"round/wall_s": result.wall_s})
    counts = {s: sum(1 for t in result.trials if t.status == s) for s in ("FINISHED", "STOPPED", "FAILED")}
    round_run.log_metrics({f"round/trials_{s.lower()}": float(n) for s, n in counts.items()})
    ranked = [
        t for t in rank_trials(result.trials, cfg.tune.metric, cfg.tune.mode) if t.checkpoint and t.run_id
    ]
    for trial in ranked[: cfg.tune.top_k]:
        _log_adapter(tracker, trial)


def _log_adapter(tracker: Tracker, trial: TrialRecord) -> None:
    """Log the adapter files of a trial's checkpoint (not the optimizer state) to its run."""
    source = trial.checkpoint or ""
    if "://" not in source and not Path(source).is_dir():
        log.warning(
            "checkpoint %s of trial %s is not on this machine; adapter not logged", source, trial.trial_id
        )
        return
    with tempfile.TemporaryDirectory() as tmp:
        copy_adapter(source, Path(tmp))
        TrackedRun(tracker.client, trial.run_id).log_artifacts(Path(tmp), "adapter")
