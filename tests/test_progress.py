"""Progress lines: a long step reports counts and rates on stderr; a short one stays silent; --json silences all."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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
    # the last batch completes the count: the closing line says so, not a "so far" line before it
    assert [line.split(" examples")[0] for line in lines] == [
        "tokenising: 100 of 300",
        "tokenising: 200 of 300",
        "tokenising: 300 of 300",
    ]


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


def _read_rate(text: str) -> float:
    """Items a second, as a reader of the printed rate takes it."""
    if text.endswith(" s each"):
        return 1 / float(text.removesuffix(" s each"))
    if text.endswith("k/s"):
        return float(text.removesuffix("k/s")) * 1000
    return float(text.removesuffix("/s"))


@settings(max_examples=300, deadline=None)
@given(count=st.integers(1, 10_000_000), seconds=st.floats(1e-3, 1e6, allow_nan=False))
def test_a_rate_reads_back_as_the_true_rate_to_its_printed_precision(count, seconds):
    """Any count over any time prints a rate that reads back within 5 % (two significant figures at
    least); a slow step, a real model generating on a CPU at 0.4 examples a second, is never '0/s'."""
    printed = progress._rate(count, seconds)
    true = count / seconds
    assert printed != "0/s"
    assert _read_rate(printed) == pytest.approx(true, rel=0.05), printed


def test_a_slow_step_prints_seconds_for_each():
    assert progress._rate(24, 57.7) == "2.4 s each"
    assert progress._rate(3, 450.0) == "150 s each"
    assert progress._rate(24, 5.0) == "4.8/s"
    assert progress._rate(0, 5.0) == "0/s"
