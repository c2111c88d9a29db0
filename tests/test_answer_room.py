"""eval.max_new_tokens against the gold answers: measured with the model's tokenizer, warned about
before a training, refused before a round or a flywheel spends anything; cut outputs are counted."""

from __future__ import annotations

import json
import logging
from contextlib import contextmanager

import pytest
from conftest import FAST, run_cli
from hypothesis import given, settings
from hypothesis import strategies as st

from forge_ml.config import EvalConfig
from forge_ml.config.evaluation import SCORERS
from forge_ml.data.examples import Example
from forge_ml.errors import ConfigError
from forge_ml.evaluation import room as room_module
from forge_ml.evaluation.report import score_outputs, write_report
from forge_ml.evaluation.room import ROUND_UP, answer_room, check_answer_room
from forge_ml.evaluation.scorers import exact
from forge_ml.models.tiny import train_tokenizer

# answers as a task's gold holds them: JSON, words, digits, punctuation, other scripts, long and short
ANSWERS = st.one_of(
    st.text(min_size=1, max_size=200),
    st.dictionaries(st.text(max_size=12), st.one_of(st.integers(), st.text(max_size=30)), max_size=8).map(
        json.dumps
    ),
    st.lists(st.sampled_from(["hover", "land", "at", "12", "m", "north", "é", "—", "😀"]), max_size=80).map(
        " ".join
    ),
).filter(str.strip)


@pytest.fixture(scope="module")
def tokenizer():
    """A real byte-level BPE tokenizer (the tiny model's), learnt from a few drone commands."""
    texts = ['{"cmd": "hover", "args": {"seconds": 10}}', "take off to 15 meters", "land now please"] * 20
    return train_tokenizer(texts, 300)


def _gold(answers: list[str]) -> list[Example]:
    return [Example(user=f"q{i}", assistant=a) for i, a in enumerate(answers)]


@contextmanager
def _warnings():
    """The warnings the answer-room check logs, as text."""
    said: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: said.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("forge_ml.evaluation.room")
    logger.addHandler(handler)
    try:
        yield said
    finally:
        logger.removeHandler(handler)


@settings(max_examples=150, deadline=None)
@given(
    answers=st.lists(ANSWERS, min_size=1, max_size=25),
    limit=st.integers(1, 160),
    target=st.floats(0.0, 1.0),
    scorer=st.sampled_from(SCORERS),
    refuse=st.booleans(),
)
def test_answer_room_measures_each_answer_and_refuses_only_an_unreachable_target(
    tokenizer, answers, limit, target, scorer, refuse
):
    room_module._warned.clear()  # a process warns of a limit once; each draw is a new process here
    gold = _gold(answers)
    room = answer_room(tokenizer, gold, limit)
    lengths = [len(tokenizer(a.strip(), add_special_tokens=False)["input_ids"]) for a in answers]
    assert room.lengths == tuple(lengths)
    assert room.over == sum(1 for n in lengths if n > limit)
    assert room.ceiling == pytest.approx((len(lengths) - room.over) / len(lengths))
    # the suggested limit fits every answer with a margin, in steps of ROUND_UP
    assert room.suggested % ROUND_UP == 0 and room.suggested >= 1.25 * max(lengths)
    assert answer_room(tokenizer, gold, room.suggested).over == 0

    cfg = EvalConfig(scorer=scorer, max_new_tokens=limit, target_accuracy=target)
    refused = refuse and room.over > 0 and scorer != "custom" and room.ceiling < target
    if refused:
        with pytest.raises(ConfigError) as raised:
            check_answer_room(tokenizer, gold, cfg, refuse=refuse)
        said = str(raised.value)
    else:
        with _warnings() as warned:
            assert check_answer_room(tokenizer, gold, cfg, refuse=refuse) == room
        said = " ".join(warned)
    if room.over:
        assert f"eval.max_new_tokens={limit} is shorter than {room.over} of the {len(gold)} gold" in said
        assert f"up to {max(lengths)} tokens" in said and f"set eval.max_new_tokens={room.suggested}" in said
        assert f"cannot pass {room.ceiling:.2f}" in said
    else:
        assert said == ""
    if room.over and not refused:  # asked again (the next round of a flywheel): nothing new to say
        with _warnings() as again:
            check_answer_room(tokenizer, gold, cfg, refuse=refuse)
        assert again == []


@given(ended=st.lists(st.booleans(), min_size=1, max_size=30))
def test_cut_outputs_are_counted_logged_and_marked_in_the_failures_file(tmp_path_factory, ended):
    gold = _gold([f"answer {i}" for i in range(len(ended))])
    outputs = [ex.assistant if done else ex.assistant[:3] for ex, done in zip(gold, ended)]
    report = score_outputs(gold, outputs, exact, EvalConfig(), ended=ended)
    cut = ended.count(False)
    assert report.unfinished == cut and report.correct == len(ended) - cut
    assert report.metrics("gold")["gold/unfinished"] == cut
    assert report.summary()["unfinished"] == cut
    out = tmp_path_factory.mktemp("report")
    _, failures = write_report(report, out)
    rows = [json.loads(line) for line in failures.read_text().splitlines()]
    assert [row.get("unfinished", False) for row in rows] == [True] * cut
    # without the flags (a scorer of outputs from elsewhere) nothing is counted as cut
    assert score_outputs(gold, outputs, exact, EvalConfig()).unfinished == 0


def test_tune_refuses_a_limit_gold_answers_cannot_fit_before_any_trial(small_project):
    result = run_cli("tune", *FAST, "lora.r=choice(4,8)", "eval.max_new_tokens=4", cwd=small_project.root)
    assert result.returncode == 1, result.stderr[-3000:]
    said = " ".join(result.stderr.split())
    assert "eval.max_new_tokens=4 is shorter than 18 of the 18 gold answers" in said
    assert "cannot pass 0.00 (eval.target_accuracy=0.9; eval.scorer=json_cmd scores a cut answer 0)" in said
    assert "set eval.max_new_tokens=" in said and "Traceback" not in result.stderr
    assert not (small_project.root / "output" / "ray").exists()
    assert not (small_project.root / "mlflow.db").exists()


def test_flywheel_refuses_it_before_its_first_plan(small_project):
    result = run_cli("flywheel", *FAST, "eval.max_new_tokens=4", cwd=small_project.root)
    assert result.returncode == 1, result.stderr[-3000:]
    said = " ".join(result.stderr.split())
    assert "eval.max_new_tokens=4 is shorter than 18 of the 18 gold answers" in said
    output = small_project.root / "output"
    # nothing planned, written or tuned: no round state, no round recorded, no MLflow run
    assert not (output / "flywheel_state.json").exists() and not (output / "experiments.jsonl").exists()
    assert not (output / "round-1").exists() and "round 1" not in result.stdout
    assert _runs(small_project) == []


def _runs(project) -> list:
    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{project.root / 'mlflow.db'}")
    return client.search_runs([e.experiment_id for e in client.search_experiments()])
