"""Progress lines: a long step reports counts and rates on stderr; a short one stays silent; --json silences all."""

from __future__ import annotations

import time

import pytest

from forge_ml import progress
from forge_ml.progress import Stage


@pytest.fixture(autouse=True)
def _fast_reports(monkeypatch):
    monkeypatch.setattr(progress, "FIRST_REPORT_S", 0.05)
    monkeypatch.setattr(progress, "REPORT_EVERY_S", 0.05)
    progress.set_quiet(False)
    yield
    progress.set_quiet(False)


def test_a_long_step_reports_counts_and_rates_on_stderr(capsys):
    with Stage("tokenising", unit="examples", total=300) as stage:
        for _ in range(3):
            time.sleep(0.06)
            stage.advance(100)
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.strip().splitlines()
    assert "tokenising: 100 of 300 examples so far (" in lines[0] and "/s)" in lines[0]
    assert lines[-1].startswith("tokenising: 300 of 300 examples in 0.") and lines[-1].endswith("/s)")


def test_a_step_without_counts_reports_its_time(capsys):
    with Stage("loading the base model", unit="models"):
        time.sleep(0.06)
    assert capsys.readouterr().err.strip().startswith("loading the base model: done in 0.")


def test_a_short_step_is_silent(capsys, monkeypatch):
    monkeypatch.setattr(progress, "FIRST_REPORT_S", 5.0)
    with Stage("reading canonical.jsonl", unit="lines") as stage:
        stage.advance(10)
    assert capsys.readouterr().err == ""


def test_quiet_under_json_and_silent_on_errors(capsys):
    progress.set_quiet(True)
    with Stage("tokenising", total=10) as stage:
        time.sleep(0.06)
        stage.advance(10)
    progress.set_quiet(False)
    with pytest.raises(ValueError), Stage("reading", unit="lines") as stage:
        time.sleep(0.06)
        raise ValueError("bad line")
    assert capsys.readouterr().err == ""
