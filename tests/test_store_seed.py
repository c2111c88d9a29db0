"""A new project's sqlite store is copied from a migrated template, and MLflow takes it as its own."""

from __future__ import annotations

import multiprocessing
import sqlite3
from pathlib import Path

import pytest
from mlflow import MlflowClient

from forge_ml.config import ForgeConfig
from forge_ml.fileio import writer_tag
from forge_ml.project import Project
from forge_ml.tracking import Tracker, seed_sqlite_store


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("FORGE_ML_CACHE", str(root))
    return root


def schema(db: Path) -> tuple[dict[str, list[str]], list[str]]:
    """(every table and index with the lines of its SQL, the alembic revision) of a sqlite store.

    The lines are sorted: MLflow's migrations write a table's CHECK constraints in an order that
    varies from one build to the next.
    """
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'").fetchall()
        revision = [r[0] for r in conn.execute("SELECT version_num FROM alembic_version")]
    objects = {
        name: sorted(line.strip().rstrip(",") for line in (sql or "").splitlines()) for name, sql in rows
    }
    return objects, revision


def test_a_seeded_store_has_the_schema_mlflow_builds_and_mlflow_uses_it(tmp_path, cache):
    own = tmp_path / "own.db"
    MlflowClient(tracking_uri=f"sqlite:///{own}").search_experiments()  # MLflow's own migrations

    root = tmp_path / "project"
    root.mkdir()
    tracker = Tracker(ForgeConfig(name="seeded", project_dir=str(root)), Project(root))
    db = root / "mlflow.db"
    (template,) = (cache / "mlflow-stores").iterdir()
    assert schema(db) == schema(own) == schema(template)
    with tracker.start_run("first") as run:
        run.log_metrics({"dev/loss": 0.5}, step=1)
    client = MlflowClient(tracking_uri=f"sqlite:///{db}")
    assert client.get_run(run.run_id).data.metrics["dev/loss"] == 0.5
    assert {e.name for e in client.search_experiments()} == {"Default", "seeded"}
    assert client.get_experiment("0").artifact_location != str(cache)  # MLflow made its own Default
    assert [p.name for p in root.iterdir() if p.name.endswith(".tmp")] == []


def test_an_existing_store_is_never_touched(tmp_path, cache):
    db = tmp_path / "mlflow.db"
    client = MlflowClient(tracking_uri=f"sqlite:///{db}")
    client.create_experiment("kept")
    before = (db.read_bytes(), db.stat().st_mtime_ns)
    seed_sqlite_store(f"sqlite:///{db}")
    assert (db.read_bytes(), db.stat().st_mtime_ns) == before
    assert not (cache / "mlflow-stores").exists()  # no template built for nothing


@pytest.mark.parametrize("uri", ["http://127.0.0.1:9", "sqlite:///:memory:", "postgresql://u@h/db"])
def test_other_stores_are_left_to_mlflow(tmp_path, cache, uri):
    seed_sqlite_store(uri)
    assert not cache.exists()


def test_an_unusable_cache_leaves_the_store_to_mlflow(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache would be")
    monkeypatch.setenv("FORGE_ML_CACHE", str(blocker))
    root = tmp_path / "project"
    root.mkdir()
    tracker = Tracker(ForgeConfig(name="unseeded", project_dir=str(root)), Project(root))
    with tracker.start_run("first"):
        pass
    assert "unseeded" in {e.name for e in tracker.client.search_experiments()}


def _seed_each(paths: list[str], barrier) -> None:
    for path in paths:  # every worker starts each copy at the same moment
        barrier.wait(60)
        seed_sqlite_store(f"sqlite:///{path}")


def test_racing_first_commands_leave_one_whole_store(tmp_path, cache):
    seed_sqlite_store(f"sqlite:///{tmp_path / 'warm.db'}")  # the template exists: the race is on the copy
    paths = [str(tmp_path / f"race-{attempt}.db") for attempt in range(8)]
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(4)
    procs = [ctx.Process(target=_seed_each, args=(paths, barrier)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    for path in paths:
        assert schema(Path(path)) == schema(tmp_path / "warm.db")
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_a_seeding_killed_before_its_link_leaves_nothing_behind(tmp_path, cache):
    import subprocess

    dead = subprocess.Popen(["true"])
    dead.wait()  # a pid no process has now
    host = writer_tag().partition("@")[2]  # this host, as the project's temp names spell it
    orphan = tmp_path / f".mlflow.db.{dead.pid}@{host}.tmp"
    orphan.write_bytes(b"half a copy")
    seed_sqlite_store(f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert not orphan.exists() and (tmp_path / "mlflow.db").is_file()
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
