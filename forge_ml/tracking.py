"""Every MLflow write goes through here: experiments, runs, params, metrics, datasets, artifacts."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import socket
import subprocess
import time
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from forge_ml import stopping
from forge_ml.config import ForgeConfig, config_hash, config_to_dict
from forge_ml.data.examples import Example
from forge_ml.errors import RuntimeFault, describe, first_line
from forge_ml.fileio import TEMP_SUFFIX, cache_root, pid_alive, remove_orphans, writer_tag
from forge_ml.project import Project
from forge_ml.secrets import flatten, redact_mapping, redact_text

log = logging.getLogger(__name__)

MAX_PARAM_VALUE = 6000
BATCH = 100  # MLflow's limit of params per log_batch call
# A server URI is asked `GET /health` before use: MLflow's own client retries a refused connection
# for minutes. Any HTTP answer will do; only no answer at all (refused, unresolved, silent) fails.
HEALTH_ATTEMPTS = 3
HEALTH_TIMEOUT_S = 5.0
_ANSWERED: set[str] = set()  # server URIs that answered in this process
_NO_ANSWER = re.compile(r"\[Errno -?\d+\] [^\"')]+|(?:read|connect) timeout=[\d.]+")  # why, in requests' text


def tracking_uri(cfg: ForgeConfig, project: Project) -> str:
    return cfg.tracking.uri or project.default_tracking_uri


def experiment_name(cfg: ForgeConfig) -> str:
    return cfg.tracking.experiment or cfg.name


def _no_answer_reason(exc: Exception) -> str:
    """The network cause inside a failed request's message, e.g. "[Errno 111] Connection refused"."""
    found = _NO_ANSWER.search(str(exc))
    return found[0] if found else describe(exc)


def check_server(
    uri: str, key: str = "tracking.uri", attempts: int = HEALTH_ATTEMPTS, timeout_s: float = HEALTH_TIMEOUT_S
) -> None:
    """Raise RuntimeFault when no server answers at an http(s) URI, set by config `key` (once per process)."""
    if not uri.startswith(("http://", "https://")) or uri in _ANSWERED:
        return
    from mlflow.tracking._tracking_service.utils import get_default_host_creds
    from mlflow.utils.rest_utils import http_request

    creds = get_default_host_creds(uri)  # MLflow's own request: its TLS and auth settings apply
    started, reason = time.monotonic(), ""
    for attempt in range(attempts):
        if attempt:
            time.sleep(0.5 * attempt)
        try:
            http_request(creds, "/health", "GET", max_retries=0, timeout=timeout_s, raise_on_status=False)
        except Exception as exc:
            reason = _no_answer_reason(exc)
            continue
        _ANSWERED.add(uri)
        return
    raise RuntimeFault(
        redact_text(
            f"{key}={uri}: no MLflow server answers ({reason}; {attempts} attempts in "
            f"{time.monotonic() - started:.1f}s); start it or fix {key}"
        )
    )


def client_for(cfg: ForgeConfig, project: Project):
    """Return an MlflowClient on the project's tracking (and registry) URI; fail fast if no server answers."""
    from mlflow import MlflowClient

    uri = tracking_uri(cfg, project)
    registry = cfg.tracking.registry_uri or uri
    check_server(uri)
    if registry != uri:
        check_server(registry, "tracking.registry_uri")
    for store in {uri, registry}:
        seed_sqlite_store(store)
    return MlflowClient(tracking_uri=uri, registry_uri=registry)


def seed_sqlite_store(uri: str) -> None:
    """Give a sqlite store that does not exist yet MLflow's tables from a template, not by migration.

    MLflow builds a new sqlite store by running every schema migration since its first release (a
    new project's first write takes 1.6 s, against 0.8 s from the copy: bench/store_seed.py). The
    same empty schema, built once per MLflow version in forge-ml's cache, is copied instead; MLflow
    then opens it as one it made (it checks the schema's revision) and adds its Default
    experiment. Anything unexpected leaves the store to MLflow.
    """
    if not uri.startswith("sqlite:///") or "?" in uri or uri.endswith(":memory:"):
        return
    db = Path(uri[len("sqlite:///") :])
    if db.exists() or not db.parent.is_dir():
        return
    template = _store_template()
    if template is None:
        return
    remove_orphans(db)  # a seeding killed between its copy and its link
    tmp = db.with_name(f".{db.name}.{writer_tag()}{TEMP_SUFFIX}")
    try:
        shutil.copyfile(template, tmp)
        os.link(tmp, db)  # never replaces a store another process created meanwhile
    except OSError as exc:  # FileExistsError: it did; others: MLflow creates the store itself
        log.debug("sqlite store %s not seeded: %s", db, describe(exc))
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)


def _store_template() -> Path | None:
    """The empty, fully migrated sqlite store of the installed MLflow, built on first use."""
    import mlflow

    template = cache_root() / "mlflow-stores" / f"empty-{mlflow.__version__}.db"
    if template.is_file():
        return template
    tmp = template.with_name(f".{template.name}.{os.getpid()}{TEMP_SUFFIX}")  # no '@': it goes in a URL
    try:
        template.parent.mkdir(parents=True, exist_ok=True)
        tmp.unlink(missing_ok=True)
        _create_tables(f"sqlite:///{tmp}")
        os.replace(tmp, template)
    except Exception as exc:  # a private MLflow API moved, a read-only cache, ...: no template
        log.debug("no MLflow store template: %s", describe(exc))
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        return None
    return template


def _create_tables(uri: str) -> None:
    """MLflow's own first-use initialisation of an empty database (its tables, migrated to head)."""
    import sqlalchemy
    from mlflow.store.db import utils

    engine = sqlalchemy.create_engine(uri)
    try:
        utils._initialize_tables(engine)
        utils._verify_schema(engine)
    finally:
        engine.dispose()


def artifact_location(cfg: ForgeConfig, project: Project) -> str | None:
    """Return where a new experiment keeps artifacts: inside the project for a local store.

    MLflow's default for a database store is `./mlruns` under the working directory of whoever
    creates the experiment; a server-backed store chooses for itself (None).
    """
    uri = tracking_uri(cfg, project)
    if uri.startswith(("sqlite:", "file:")) or "://" not in uri:
        return (project.root / "mlartifacts").as_uri()
    return None


# What the MLflow UI shows for a new experiment: the classic runs view (it asks otherwise), and a note.
EXPERIMENT_TAGS = {
    "mlflow.experimentKind": "custom_model_development",
    "mlflow.note.content": (
        "forge-ml: `flywheel` rounds are runs named round-NNN with their Ray Tune trials nested under them "
        "(expand a round), and a `tune` round outside the flywheel is tune-NNN; `train`, `eval`, "
        "`generate` and `promote` add runs of their own "
        "(tag forge.kind). Chart `gold/accuracy` by step to see it round by round; the registered model "
        "of the same name holds the versions and the `champion` alias."
    ),
}


def ensure_experiment(client: Any, name: str, location: str | None = None) -> str:
    """Return the id of experiment `name`, creating (or restoring) it."""
    from mlflow.exceptions import MlflowException

    exp = client.get_experiment_by_name(name)
    if exp is None:
        try:
            return client.create_experiment(name, artifact_location=location, tags=EXPERIMENT_TAGS)
        except MlflowException:  # created concurrently by another job
            exp = client.get_experiment_by_name(name)
    if exp.lifecycle_stage == "deleted":
        client.restore_experiment(exp.experiment_id)
    return exp.experiment_id


def git_commit(path: Path) -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(path), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


SCHEMA_SAMPLE_ROWS = 1000  # rows of a large dataset MLflow's schema of it is inferred from


class TrackedRun:
    """One MLflow run; as a context manager it ends FINISHED, FAILED on error, KILLED on Ctrl-C."""

    def __init__(self, client: Any, run_id: str) -> None:
        self.client = client
        self.run_id = run_id

    def __enter__(self) -> TrackedRun:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.finish("FINISHED")
            return
        stopped = issubclass(exc_type, KeyboardInterrupt)  # Ctrl-C or SIGTERM (forge_ml/stopping.py)
        self.set_tags({"forge.error": stopping.reason(exc) if stopped else describe(exc)})
        self.end_children()  # trials the round opened end with it: nothing is left RUNNING
        self.finish("KILLED" if stopped else "FAILED")

    def end_children(self, status: str = "KILLED") -> None:
        """End this run's child runs still RUNNING."""
        experiment = self.client.get_run(self.run_id).info.experiment_id
        for child in self.client.search_runs(
            [experiment],
            filter_string=f"tags.`mlflow.parentRunId` = '{self.run_id}' and attributes.status = 'RUNNING'",
            max_results=10_000,
        ):
            self.client.set_terminated(child.info.run_id, status=status)

    def finish(self, status: str) -> None:
        self.client.set_terminated(self.run_id, status=status)

    def log_params(self, params: Mapping[str, Any]) -> None:
        from mlflow.entities import Param

        items = [
            Param(k, str(v)[:MAX_PARAM_VALUE])
            for k, v in redact_mapping(dict(params)).items()
            if k and v is not None
        ]
        for start in range(0, len(items), BATCH):
            self.client.log_batch(self.run_id, params=items[start : start + BATCH])

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(k, float(v), now, step or 0) for k, v in metrics.items()]
        if items:
            self.client.log_batch(self.run_id, metrics=items)

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        from mlflow.entities import RunTag

        clean = redact_mapping({k: v for k, v in tags.items() if v is not None})
        self.client.log_batch(self.run_id, tags=[RunTag(k, str(v)[:5000]) for k, v in clean.items()])

    def log_dataset(
        self, name: str, examples: list[Example] | Any, digest: str, source: Path, context: str
    ) -> None:
        """Record a dataset (Examples, or a DataFrame of user, assistant and category) as an MLflow
        dataset input, with its content hash as digest."""
        import mlflow.data
        import pandas as pd
        from mlflow.entities import DatasetInput, InputTag

        frame = examples
        if not isinstance(examples, pd.DataFrame):
            frame = pd.DataFrame(
                {
                    "user": [e.user for e in examples],
                    "assistant": [e.assistant for e in examples],
                    "category": [e.category for e in examples],
                }
            )

        with warnings.catch_warnings():  # a local path matches two equivalent source types
            warnings.simplefilter("ignore", UserWarning)
            dataset = mlflow.data.from_pandas(frame, source=str(source), name=name, digest=digest[:36])
        if len(frame) > SCHEMA_SAMPLE_ROWS:  # MLflow infers the schema from every row: 0.9 s per 100k
            from mlflow.types.utils import _infer_schema

            dataset.__dict__["schema"] = _infer_schema(frame.head(SCHEMA_SAMPLE_ROWS))  # its cached_property
        tag = InputTag(key="mlflow.data.context", value=context)
        self.client.log_inputs(self.run_id, datasets=[DatasetInput(dataset._to_mlflow_entity(), tags=[tag])])

    def log_artifacts(self, local_dir: Path, artifact_path: str) -> None:
        self.client.log_artifacts(self.run_id, str(local_dir), artifact_path)

    def log_artifact(self, local_file: Path, artifact_path: str | None = None) -> None:
        self.client.log_artifact(self.run_id, str(local_file), artifact_path)


class Tracker:
    """The project's MLflow experiment; starts runs in it."""

    def __init__(self, cfg: ForgeConfig, project: Project) -> None:
        self.cfg = cfg
        self.project = project
        self._swept = False  # closed the runs dead processes left RUNNING (on the first start_run)
        try:
            self.client = client_for(cfg, project)
            self.experiment_id = ensure_experiment(
                self.client, experiment_name(cfg), artifact_location(cfg, project)
            )
        except RuntimeFault:
            raise
        except Exception as exc:
            uri = tracking_uri(cfg, project)
            raise RuntimeFault(
                redact_text(f"MLflow tracking at {uri} is unavailable ({describe(exc)})")
            ) from exc

    def reopen(self, run_id: str) -> TrackedRun:
        """Return run `run_id` marked RUNNING again (a resumed round keeps its run), now owned by this process."""
        self.client.update_run(run_id, status="RUNNING")
        run = TrackedRun(self.client, run_id)
        run.set_tags({"forge.pid": os.getpid(), "forge.host": socket.gethostname()})
        return run

    def close_dead_runs(self) -> int:
        """End KILLED the top-level runs left RUNNING by a process of this host that is gone; return how many.

        A command killed with SIGKILL (or a power cut) cannot end its own run; the next command to
        start a run in the experiment does. Runs of other hosts, of live processes, and the
        flywheel's round runs (the flywheel resumes those itself, under its lock) are left alone.
        """
        host = socket.gethostname()
        stale = self.client.search_runs(
            [self.experiment_id],
            filter_string=f"attributes.status = 'RUNNING' and tags.`forge.host` = '{host}'",
            max_results=10_000,
        )
        closed = 0
        for run in stale:
            tags = run.data.tags
            pid = tags.get("forge.pid", "")
            if "mlflow.parentRunId" in tags or tags.get("forge.flywheel") == "true" or not pid.isdigit():
                continue
            if pid_alive(int(pid)):
                continue
            closed_run = TrackedRun(self.client, run.info.run_id)
            closed_run.set_tags(
                {"forge.error": f"left RUNNING by a process that is gone (pid {pid} on {host})"}
            )
            closed_run.end_children()
            closed_run.finish("KILLED")
            closed += 1
        if closed:
            log.info("closed %d run(s) left RUNNING by stopped processes", closed)
        return closed

    def end_children(self, run_id: str, status: str = "KILLED") -> None:
        """End the child runs of `run_id` still RUNNING (trial runs of an attempt that was not restored)."""
        TrackedRun(self.client, run_id).end_children(status)

    def finish_with_children(self, run_id: str) -> None:
        """Mark run `run_id` FINISHED, and its children still RUNNING as KILLED."""
        self.end_children(run_id)
        self.client.set_terminated(run_id, status="FINISHED")

    def close_stale_runs(self, filter_string: str, reason: str, *, keep: str | None = None) -> int:
        """Mark runs matching `filter_string` that are still RUNNING (and their children) KILLED; return how many.

        Only for runs whose process is known to be gone: `keep` (a run being resumed) is left alone.
        """
        stale = self.client.search_runs(
            [self.experiment_id],
            filter_string=f"{filter_string} and attributes.status = 'RUNNING'",
            max_results=10_000,
        )
        closed = 0
        for run in stale:
            if run.info.run_id == keep:
                continue
            self.end_children(run.info.run_id)
            self.client.set_tag(run.info.run_id, "forge.error", reason)
            self.client.set_terminated(run.info.run_id, status="KILLED")
            closed += 1
        return closed

    def start_run(
        self, run_name: str, tags: Mapping[str, Any] | None = None, *, cfg: ForgeConfig | None = None
    ) -> TrackedRun:
        """Return a new run in the experiment, tagged with the hash of `cfg` (default: the tracker's config).

        The first run a tracker starts first closes the runs that dead processes of this host left
        RUNNING (see `close_dead_runs`).
        """
        if not self._swept:
            self._swept = True
            try:
                self.close_dead_runs()
            except Exception as exc:  # tidying up never stops the command's own work
                log.warning("could not close runs left RUNNING by stopped processes: %s", describe(exc))
        base = {
            "forge.config_hash": config_hash(cfg or self.cfg),
            "forge.git_commit": git_commit(self.project.root),
            "forge.project": str(self.project.root),
            "forge.pid": os.getpid(),
            "forge.host": socket.gethostname(),
        }
        clean = {k: str(v) for k, v in {**base, **(tags or {})}.items() if v is not None}
        run = self.client.create_run(self.experiment_id, run_name=run_name, tags=redact_mapping(clean))
        return TrackedRun(self.client, run.info.run_id)


def config_params(cfg: ForgeConfig) -> dict[str, Any]:
    """Return the resolved config flattened to MLflow params (secrets redacted on logging)."""
    return flatten(config_to_dict(cfg))


def runs_table(client: Any, experiment_ids: Iterable[str], max_results: int = 10) -> list[Any]:
    return client.search_runs(
        list(experiment_ids), order_by=["attributes.start_time DESC"], max_results=max_results
    )


def tracking_unreachable(exc: BaseException) -> bool:
    """Whether `exc` (or what caused it) is an MLflow request that found no server."""
    return _unanswered_request(exc) is not None


def unreachable_reason(exc: BaseException) -> str:
    """Why the MLflow request inside `exc` found no server, e.g. "[Errno 111] Connection refused"
    (Ray Tune wraps a callback's error in a TuneError whose first line is "Traceback ...")."""
    found = _unanswered_request(exc)
    reason = _no_answer_reason(found) if found is not None else first_line(exc)
    return reason.splitlines()[0].strip()  # the pattern can run on past the end of the line


def _unanswered_request(exc: BaseException | None) -> BaseException | None:
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        text = str(exc)
        if "API request to" in text and any(
            s in text for s in ("Max retries exceeded", "Connection refused", "ConnectionError", "timed out")
        ):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None
