"""tracking.py against a real MLflow sqlite store: run status, params, redaction."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from mlflow import MlflowClient

from forge_ml.config import ForgeConfig
from forge_ml.project import Project
from forge_ml.secrets import REDACTED, flatten, redact_mapping, redact_text
from forge_ml.tracking import Tracker, config_params


@pytest.fixture
def tracker(tmp_path):
    cfg = ForgeConfig(name="track-test", project_dir=str(tmp_path))
    return Tracker(cfg, Project(tmp_path))


def status(tracker, run_id):
    return MlflowClient(tracking_uri=tracker.client.tracking_uri).get_run(run_id).info.status


def test_run_finishes_fails_or_is_killed(tracker):
    with tracker.start_run("ok") as ok:
        ok.log_metrics({"dev/loss": 1.5}, step=1)
    with pytest.raises(RuntimeError), tracker.start_run("boom") as failed:
        raise RuntimeError("training exploded")
    with pytest.raises(KeyboardInterrupt), tracker.start_run("ctrl-c") as killed:
        raise KeyboardInterrupt
    assert status(tracker, ok.run_id) == "FINISHED"
    assert status(tracker, failed.run_id) == "FAILED"
    assert status(tracker, killed.run_id) == "KILLED"
    run = tracker.client.get_run(failed.run_id)
    assert run.data.tags["forge.error"] == "RuntimeError: training exploded"


def test_experiment_is_the_project_name_on_sqlite_in_the_project(tracker, tmp_path):
    assert tracker.client.tracking_uri == f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert tracker.client.get_experiment(tracker.experiment_id).name == "track-test"
    with tracker.start_run("r") as run:
        pass
    tags = tracker.client.get_run(run.run_id).data.tags
    assert len(tags["forge.config_hash"]) == 12
    artifact_uri = tracker.client.get_run(run.run_id).info.artifact_uri
    assert artifact_uri.startswith((tmp_path / "mlartifacts").as_uri())  # never ./mlruns in the cwd


def test_params_are_the_flattened_config_with_secrets_redacted(tracker):
    params = config_params(tracker.cfg)
    assert params["lora.r"] == 8 and params["training.learning_rate"] == 2e-4
    params |= {
        "extra.api_key": "abc",
        "extra.note": "token sk-ant-api03-abcdefghijklmnop",
        "extra.plain": "fine",
    }
    with tracker.start_run("p") as run:
        run.log_params(params)
    logged = tracker.client.get_run(run.run_id).data.params
    assert logged["lora.r"] == "8"
    assert logged["extra.api_key"] == REDACTED and logged["extra.note"] == REDACTED
    assert logged["extra.plain"] == "fine"
    assert logged["eval.max_new_tokens"] == "64"  # a word that merely contains "token" is no secret


def test_redaction_helpers():
    assert redact_text("key=hf_abcdefghijklmnopqrstu and more") == f"key={REDACTED} and more"
    assert redact_text("http://bob:hunter2@host:5000") == f"http{REDACTED}host:5000"
    assert redact_mapping({"tracking.password": "x", "tracking.token": None, "a": 1}) == {
        "tracking.password": REDACTED,
        "tracking.token": None,
        "a": 1,
    }
    assert flatten({"a": {"b": 1, "c": {"d": [1, 2]}}, "e": {}}) == {"a.b": 1, "a.c.d": [1, 2], "e": {}}


@given(
    password=st.text(
        alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"], exclude_characters="\x00"),
        min_size=8,
        max_size=40,
    )
)
@settings(max_examples=60, deadline=None)
def test_the_value_of_a_secret_named_variable_is_redacted_whatever_it_looks_like(password):
    """A password is any string: found by value, in text, in errors and in any library's log records."""
    import logging
    import os

    from forge_ml.errors import describe
    from forge_ml.secrets import RedactingFilter

    assume(password not in REDACTED and password.strip("\x00"))  # what the placeholder itself reads
    saved = os.environ.get("MLFLOW_TRACKING_PASSWORD")
    os.environ["MLFLOW_TRACKING_PASSWORD"] = password
    try:
        assert password not in redact_text(f"GET http://u:{password}@h/ failed: {password}!")
        assert password not in describe(RuntimeError(f"the server said: bad password {password}"))
        record = logging.LogRecord(
            "anthropic", logging.DEBUG, "f.py", 1, "headers %s", ({"key": password},), None
        )
        RedactingFilter().filter(record)
        assert password not in record.getMessage()
        os.environ["MLFLOW_TRACKING_PASSWORD"] = "short"  # under 8 characters: not searched for
        assert redact_text("a short answer") == "a short answer"
    finally:
        if saved is None:
            os.environ.pop("MLFLOW_TRACKING_PASSWORD", None)
        else:
            os.environ["MLFLOW_TRACKING_PASSWORD"] = saved
