"""Scorers as a table, plus forbidden outputs, categories and the report files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forge_ml.config import EvalConfig
from forge_ml.data.examples import Example, metric_name, parse_record, safe_category
from forge_ml.errors import InputError
from forge_ml.evaluation.report import score_outputs, write_report
from forge_ml.evaluation.scorers import make_scorer

CMD = '{"cmd": "hover", "args": {"duration_s": 10}}'


@pytest.mark.parametrize(
    ("scorer", "expected", "actual", "score"),
    [
        ("exact", "yes", " yes\n", 1.0),
        ("exact", "yes", "Yes", 0.0),
        ("json_cmd", CMD, '{"cmd": "hover", "args": {}}', 1.0),
        ("json_cmd", CMD, '{"cmd": "land", "args": {"duration_s": 10}}', 0.0),
        ("json_cmd", CMD, "hover please", 0.0),
        ("json_cmd", CMD, '{"args": {}}', 0.0),
        ("json_cmd", CMD, '{"cmd": "hover"} trailing words', 1.0),
        ("json_match", CMD, '{"args": {"duration_s": 10}, "cmd": "hover"}', 1.0),
        ("json_match", CMD, '{"cmd": "hover", "args": {"duration_s": 11}}', 0.0),
        ("json_match", CMD, "[not json", 0.0),
    ],
)
def test_builtin_scorers(tmp_path, scorer, expected, actual, score):
    assert make_scorer(EvalConfig(scorer=scorer), tmp_path)(expected, actual) == score


def test_json_cmd_compares_the_configured_field(tmp_path):
    score = make_scorer(EvalConfig(scorer="json_cmd", json_field="action"), tmp_path)
    assert score('{"action": "a", "cmd": "x"}', '{"action": "a", "cmd": "y"}') == 1.0


def test_custom_scorer_from_project_file(tmp_path):
    (tmp_path / "scorer.py").write_text("def score(expected, actual):\n    return 0.5 if actual else 0.0\n")
    score = make_scorer(EvalConfig(scorer="custom"), tmp_path)
    assert score("a", "b") == 0.5 and score("a", "") == 0.0


@pytest.mark.parametrize(
    ("body", "error", "fragment"),
    [
        (None, InputError, "needs this file"),
        ("x = 1\n", InputError, "defines no function score"),
        ("raise ImportError('boom')\n", InputError, "failed to import"),
    ],
)
def test_broken_custom_scorer_is_an_input_error(tmp_path, body, error, fragment):
    if body is not None:
        (tmp_path / "scorer.py").write_text(body)
    with pytest.raises(error, match=fragment):
        make_scorer(EvalConfig(scorer="custom"), tmp_path)


def test_custom_scorer_that_raises_or_leaves_range_is_reported(tmp_path):
    (tmp_path / "scorer.py").write_text("def score(e, a):\n    return 1 / 0 if a == 'x' else 7\n")
    score = make_scorer(EvalConfig(scorer="custom"), tmp_path)
    with pytest.raises(InputError, match="score\\(\\) raised ZeroDivisionError: division by zero"):
        score("e", "x")
    with pytest.raises(InputError, match=r"\[0, 1\]"):
        score("e", "y")


def test_report_counts_categories_and_forbidden_outputs(tmp_path):
    cfg = EvalConfig(scorer="json_cmd", forbidden_outputs=[r"(?i)as an ai"])
    examples = [
        Example("a", '{"cmd": "land"}', {"category": "land"}),
        Example("b", '{"cmd": "land"}', {"category": "land"}),
        Example("c", '{"cmd": "rtl"}'),  # category from the json field
        Example("d", '{"cmd": "rtl"}'),
    ]
    outputs = ['{"cmd": "land"}', '{"cmd": "rtl"}', '{"cmd": "rtl"}', 'As an AI {"cmd": "rtl"}']
    report = score_outputs(examples, outputs, make_scorer(cfg, tmp_path), cfg)
    assert (report.correct, report.total, report.failure_count, report.forbidden_count) == (2, 4, 2, 1)
    assert report.accuracy == 0.5
    assert report.per_category == {
        "land": {"accuracy": 0.5, "correct": 1, "total": 2},
        "rtl": {"accuracy": 0.5, "correct": 1, "total": 2},
    }
    results, failures = write_report(report, tmp_path, {"run_id": "r1"})
    summary = json.loads(results.read_text())
    assert {k: summary[k] for k in ("accuracy", "correct", "total", "failure_count", "run_id")} == {
        "accuracy": 0.5,
        "correct": 2,
        "total": 4,
        "failure_count": 2,
        "run_id": "r1",
    }
    rows = [json.loads(line) for line in failures.read_text().splitlines()]
    assert [r["input"] for r in rows] == ["b", "d"]
    assert rows[1]["forbidden"] == "(?i)as an ai" and rows[1]["category"] == "rtl"
    assert set(rows[0]) >= {"input", "expected", "actual", "category"}


@settings(max_examples=300, deadline=None)
@given(st.text(min_size=1, max_size=64))
def test_a_category_name_is_one_mlflow_takes_as_a_metric_and_a_param_in_any_script(name):
    """`safe_category` admits a name exactly when MLflow takes it in a metric and a param name and it
    is not a path: letters and digits of any script ("réservation", "予約") included."""
    from mlflow.exceptions import MlflowException
    from mlflow.utils.validation import _validate_metric_name, _validate_param_name

    def mlflow_takes(name: str) -> bool:
        try:
            _validate_metric_name(f"gold/accuracy/{name}")
            _validate_param_name(f"data.by_category.{name}")
        except MlflowException:
            return False
        return True

    plain = name[0].isalnum() and all(c.isalnum() or c in "_ .:-" for c in name)
    assert safe_category(name) == (plain and len(name) <= 64 and ".." not in name)
    if safe_category(name):
        assert mlflow_takes(name)
    assert mlflow_takes(metric_name(name))


def test_categories_in_other_scripts_are_read_and_kept():
    for name in ["réservation", "予約", "Ünterwegs 2", "бронь:отмена"]:
        assert safe_category(name), name
        assert metric_name(name) == name
        record = {"prompt": "annuler ma réservation", "completion": "annulation", "meta": {"category": name}}
        assert parse_record(record, "canonical.jsonl:1").category == name
    assert not safe_category("c++") and not safe_category("a/b") and not safe_category("x\ny")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(min_size=1, max_size=80), min_size=1, max_size=12, unique=True))
def test_any_category_becomes_a_distinct_mlflow_metric_name(categories):
    from mlflow.utils.validation import _validate_metric_name

    cfg = EvalConfig(scorer="exact")
    examples = [Example(f"q{i}", "a", {"category": c}) for i, c in enumerate(categories)]
    report = score_outputs(examples, ["a"] * len(examples), make_scorer(cfg, Path(".")), cfg)
    names = [k for k in report.metrics("gold") if k.startswith("gold/accuracy/")]
    assert len(names) == len(categories)  # none merged into another
    for name in names:
        _validate_metric_name(name)  # raises MlflowException for a name MLflow refuses
    assert set(report.metric_names) == {c for c in categories if not safe_category(c)} - {
        c for c in categories if metric_name(c) == c
    }
    assert report.summary().get("metric_names", {}) == report.metric_names


@given(scores=st.lists(st.sampled_from([0.0, 0.25, 0.5, 1.0]), min_size=1, max_size=40))
@settings(max_examples=200, deadline=None)
def test_the_tally_beside_the_accuracy_says_when_the_figure_is_a_mean_of_partial_scores(
    scores, tmp_path_factory
):
    """A scorer of 0 or 1: `correct/total`, the accuracy itself. Partial credit: the count of full
    scores, named as such, beside a mean score that no longer equals it."""
    root = tmp_path_factory.mktemp("scorer")
    by_answer = {f"a{i}": s for i, s in enumerate(scores)}
    (root / "scorer.py").write_text(
        f"SCORES = {by_answer!r}\n\ndef score(expected, actual):\n    return SCORES[actual]\n"
    )
    cfg = EvalConfig(scorer="custom")
    examples = [Example(f"q{i}", "x") for i in range(len(scores))]
    report = score_outputs(examples, list(by_answer), make_scorer(cfg, root), cfg)
    full = sum(1 for s in scores if s == 1.0)
    assert report.accuracy == pytest.approx(sum(scores) / len(scores)) and report.correct == full
    if all(s in (0.0, 1.0) for s in scores):
        assert report.tally == f"{full}/{len(scores)}"
    else:
        assert report.tally == f"mean score; {full}/{len(scores)} scored 1"
