"""Driver-side Ray Tune callback: one nested MLflow run per trial, and progress lines."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ray.tune import Callback

from forge_ml.config import ForgeConfig
from forge_ml.config.overrides import with_overrides
from forge_ml.console import console
from forge_ml.faults import armed, failpoint
from forge_ml.heartbeat import TrialCounts
from forge_ml.progress import minutes
from forge_ml.tracking import TrackedRun, Tracker, config_params
from forge_ml.tuning.steps import describe, read_board

log = logging.getLogger(__name__)
LOGGED_METRICS = ("train/loss", "dev/loss", "dev/accuracy", "train/tokens_per_s")
# While trials run, a progress line at least this often: a real base's epoch on a CPU takes
# minutes, and a line only when a trial ends left a round silent for half an hour.
STATUS_EVERY_S = 60.0


def error_summary(error: BaseException | str | None) -> str:
    """Return the line of a (remote) traceback that names the exception."""
    lines = [line.strip() for line in str(error or "trial failed").splitlines() if line.strip()]
    named = [
        line for line in lines if "Error" in line.split(":", 1)[0] or "Exception" in line.split(":", 1)[0]
    ]
    return (named or lines or ["trial failed"])[-1][:500]


def _trial_error(trial: Any) -> str | None:
    # The local error file is written before this hook runs; the storage copy only later.
    local = getattr(trial, "error_file", None)
    if local and Path(local).is_file():
        return Path(local).read_text(errors="replace")
    return str(trial.get_error() or "") or None


def _experiment_saved(trial: Any) -> bool:
    experiment = Path(trial.local_experiment_path)
    return experiment.is_dir() and any(experiment.glob("experiment_state-*.json"))


def existing_steps(client: Any, run_id: str) -> list[int]:
    """Return the epochs a run already has `train/loss` for (so a restored trial does not log them twice)."""
    return [int(m.step) for m in client.get_metric_history(run_id, "train/loss")]


def _timed(hook):
    """Accumulate the driver time a hook takes: the round's tracking overhead."""

    @functools.wraps(hook)
    def wrapper(self, *args, **kwargs):
        started = time.perf_counter()
        try:
            return hook(self, *args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - started

    return wrapper


class RoundTracker(Callback):
    """Writes each trial to MLflow as a child of the round run; the only MLflow writer of a round."""

    def __init__(
        self,
        tracker: Tracker,
        round_run: TrackedRun,
        round_config: ForgeConfig,
        metric: str,
        mode: str,
        *,
        enabled: bool = True,
        on_trials: Callable[[TrialCounts], None] | None = None,
        planned: int = 0,
        board: Any = None,
    ) -> None:
        self.tracker = tracker
        self.round_run = round_run
        self.round_config = round_config
        self.metric = metric
        self.mode = mode
        self.enabled = enabled
        self.on_trials = on_trials
        # the round's trials (tune.num_samples): Ray creates them as the concurrency limit lets it,
        # so its list holds only those started so far
        self.planned = planned
        self.board = board  # the round's step board (forge_ml/tuning/steps.py): positions inside epochs
        self.runs: dict[str, TrackedRun] = {}
        self.logged_epochs: dict[str, set[int]] = {}
        self.best: tuple[float, str] | None = None  # (value, trial id) of the best latest figure
        self.latest: dict[str, float] = {}
        self.counts = {"finished": 0, "stopped": 0, "failed": 0}
        self.seconds = 0.0  # driver time spent in these hooks
        self.epochs_trained = 0
        self._epochs_seen: dict[str, set[int]] = {}
        self._started: float | None = None  # the round's clock (time.monotonic), from its first step
        self._last_line = 0.0

    def __getstate__(self) -> dict[str, Any]:
        """Ray Tune saves its callbacks with the experiment; a restored round is given a new tracker,
        so the progress hook (it holds the flywheel's heartbeat and its lock) is left out, and so are
        the clock (a monotonic time means nothing in another process) and the step board (an actor
        of the run that saved it)."""
        return {**self.__dict__, "on_trials": None, "_started": None, "board": None}

    # -- Ray Tune hooks --------------------------------------------------------------------
    def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
        """Ray Tune's loop comes here every 0.1 s or so: the clock of the periodic progress line."""
        now = time.monotonic()
        if self._started is None:
            self._started = self._last_line = now
        elif now - self._last_line >= STATUS_EVERY_S and any(
            t.status in ("RUNNING", "PENDING") for t in trials
        ):
            self._progress(trials, None)

    @_timed
    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        if trial.trial_id in self.runs or not self.enabled:
            return
        existing = self._existing_run(trial.trial_id)
        if existing is not None:  # a restored round: the trial keeps its run
            self.runs[trial.trial_id] = existing
            self.logged_epochs[trial.trial_id] = set(existing_steps(self.tracker.client, existing.run_id))
            return
        run = self.tracker.start_run(
            f"{self.round_run_name}-{trial.trial_id}",
            {
                "mlflow.parentRunId": self.round_run.run_id,
                "forge.kind": "trial",
                "forge.trial_id": trial.trial_id,
            },
        )
        run.log_params(config_params(with_overrides(self.round_config, trial.config)))
        self.runs[trial.trial_id] = run
        self.logged_epochs[trial.trial_id] = set()

    @_timed
    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
        seen = self._epochs_seen.setdefault(trial.trial_id, set())
        if "epoch" in result and int(result["epoch"]) not in seen:
            seen.add(int(result["epoch"]))
            self.epochs_trained += 1
        value = result.get(self.metric)
        if value is not None:  # a trial counts with its latest figure, as the round ranks it
            self.latest[trial.trial_id] = float(value)
            ranked = sorted(self.latest.items(), key=lambda kv: kv[1], reverse=self.mode == "max")
            self.best = (ranked[0][1], ranked[0][0])
        run = self.runs.get(trial.trial_id)
        if run is None:
            return
        epoch = int(result.get("epoch", 0))
        done = self.logged_epochs[trial.trial_id]
        if not done and result.get("forge/node_id"):  # where the trial ran
            run.set_tags(
                {
                    "forge.node_id": result["forge/node_id"],
                    "forge.node_ip": result.get("node_ip"),
                    "forge.base_path": result.get("forge/base_path"),
                }
            )
        names = LOGGED_METRICS if epoch not in done else ("dev/accuracy", "train/tokens_per_s")
        metrics = {k: float(result[k]) for k in names if k in result}
        if metrics:
            run.log_metrics(metrics, step=epoch)
        done.add(epoch)
        if result.get("forge/restored"):
            run.set_tags({"forge.restored_from_checkpoint": "true"})

    @_timed
    def on_trial_recover(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        """A trial that raised and will be retried from its last checkpoint (tune.max_failures)."""
        run = self.runs.get(trial.trial_id)
        if run is not None:
            run.set_tags(
                {
                    "forge.retries": str(trial.num_failures),
                    "forge.last_error": error_summary(_trial_error(trial)),
                }
            )
        console.print(
            f"trial {trial.trial_id} failed (attempt {trial.num_failures}); retrying from its last checkpoint",
            highlight=False,
        )

    def on_checkpoint(self, iteration: int, trials: list, trial: Any, checkpoint: Any, **info: Any) -> None:
        if armed("tune.checkpoint") and _experiment_saved(trial):  # resumable from Ray Tune's state
            failpoint("tune.checkpoint")

    @_timed
    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        completed = bool((trial.last_result or {}).get("forge/completed"))
        self.counts["finished" if completed else "stopped"] += 1
        run = self.runs.get(trial.trial_id)
        if run is not None:
            if not completed:
                run.set_tags({"forge.stopped_early": "true"})
            run.finish("FINISHED")
        self._progress(trials, trial)

    @_timed
    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self.counts["failed"] += 1
        run = self.runs.get(trial.trial_id)
        if run is not None:
            run.set_tags({"forge.error": error_summary(_trial_error(trial))})
            run.finish("FAILED")
        self._progress(trials, trial)

    # -- helpers ---------------------------------------------------------------------------
    round_run_name = "trial"

    def _existing_run(self, trial_id: str) -> TrackedRun | None:
        runs = self.tracker.client.search_runs(
            [self.tracker.experiment_id],
            filter_string=f"tags.`forge.trial_id` = '{trial_id}' and tags.`mlflow.parentRunId` = '{self.round_run.run_id}'",
            max_results=1,
        )
        if not runs:
            return None
        self.tracker.client.update_run(runs[0].info.run_id, status="RUNNING")
        return TrackedRun(self.tracker.client, runs[0].info.run_id)

    def _progress(self, trials: list, ended: Any) -> None:
        """One line of where the round stands: when a trial ends (`ended`), and every
        STATUS_EVERY_S while trials run (`ended` None)."""
        now = time.monotonic()
        self._last_line = now
        running = sum(1 for t in trials if t.status == "RUNNING" and t is not ended)
        pending = sum(1 for t in trials if t.status == "PENDING")  # on a cluster: waiting for a free GPU
        waiting = f", {pending} pending" if pending else ""  # Ray Tune's word: not started yet
        total = max(len(trials), self.planned)
        best = f"best {self.metric} {self.best[0]:.4f} ({self.best[1]})" if self.best else "no result yet"
        clock = f", {minutes(now - self._started)} in" if self._started is not None else ""
        epochs = f"{self.epochs_trained} epoch{'' if self.epochs_trained == 1 else 's'} reported{clock}"
        where = ""
        if ended is None and self.board is not None:  # the periodic line: where the running trials are
            now_running = [t.trial_id for t in trials if t.status == "RUNNING"]
            where = describe(read_board(self.board), now_running)
        console.print(
            f"trials: {running} running{waiting}, {self.counts['finished']} finished, {self.counts['stopped']} stopped early, "
            f"{self.counts['failed']} failed of {total} — {best}; {epochs}" + (f"; {where}" if where else ""),
            highlight=False,
        )
        if self.on_trials is not None:  # the heartbeat: `forge-ml status` shows the same counts
            self.on_trials(TrialCounts(running, **self.counts, total=total))
