"""Claude as judge without a model: replies checked score by score, the valid ones kept, the
answers left unscored asked for once more, then a fault. Hand-made gold reports, the real SDK
against the fake Messages API; replies are generated, as a model writes them, slips and all."""

from __future__ import annotations

import json
import re

import anthropic
import pytest
from command_checks import judge_handler
from fake_anthropic import FakeAnthropic, error_reply
from hypothesis import given, settings
from hypothesis import strategies as st

from forge_ml.config import EvalConfig, PlannerConfig
from forge_ml.data.examples import Example
from forge_ml.errors import ConfigError, RuntimeFault
from forge_ml.evaluation.judge import judge_answers, parse_scores
from forge_ml.evaluation.report import score_outputs
from forge_ml.evaluation.scorers import exact

API_KEY = "sk-ant-test-judge-0123456789"

# One row of a reply: the index it names, and the score as a model may write it.
GOOD_SCORE = st.one_of(
    st.floats(0, 1, allow_nan=False), st.sampled_from([0, 1]), st.sampled_from(["0", "0.5", "1"])
)
BAD_SCORE = st.one_of(
    st.floats(1.01, 100),
    st.floats(-100, -0.01),
    st.booleans(),
    st.none(),
    st.sampled_from(["high", "", "1/2"]),
)


def _as_number(score) -> float:
    return float(score)


@settings(max_examples=300, deadline=None)
@given(
    indices=st.lists(st.integers(0, 40), min_size=1, max_size=8, unique=True),
    rows=st.lists(
        st.tuples(
            st.integers(-2, 45),
            st.one_of(GOOD_SCORE.map(lambda s: ("good", s)), BAD_SCORE.map(lambda s: ("bad", s))),
        ),
        max_size=12,
    ),
)
def test_a_reply_keeps_each_index_scored_once_validly_and_names_the_rest(indices, rows):
    reply = {"scores": [{"index": i, "score": s, "reason": f"r{i}"} for i, (_, s) in rows]}
    found, problems = parse_scores(reply, indices)
    named = [i for i, _ in rows]
    once_valid = {
        i: _as_number(s) for i, (kind, s) in rows if i in indices and named.count(i) == 1 and kind == "good"
    }
    assert {i: j.score for i, j in found.items()} == once_valid
    assert all(j.index == i and j.reason == f"r{i}" for i, j in found.items())
    assert (problems == []) == (set(found) == set(indices) and len(rows) == len(indices))
    unscored = [i for i in indices if i not in found]
    if unscored:
        assert problems[-1] == f"no score for index {', '.join(map(str, unscored))}"


def test_a_reply_without_a_list_of_scores_scores_nothing():
    for reply in ({"score": []}, [], None, {"scores": "all 1"}):
        assert parse_scores(reply, [3, 4]) == ({}, ["the reply has no list 'scores'"])


def _report(outputs: list[str]):
    gold = [Example(f"q{i}", "yes", {"category": "c"}) for i in range(len(outputs))]
    cfg = EvalConfig(forbidden_outputs=["rm -rf"])
    return gold, cfg, score_outputs(gold, outputs, exact, cfg)


def _client(fake: FakeAnthropic):
    return anthropic.Anthropic(api_key=API_KEY, base_url=fake.base_url, max_retries=0)


def _indices(request: dict) -> list[int]:
    body = re.search(r'<data name="answers">\n(.*)\n</data>', request["messages"][0]["content"], re.S)[1]
    return [item["index"] for item in json.loads(body)]


def test_a_replys_valid_scores_are_kept_and_only_the_unscored_answers_asked_for_again():
    """The slips of the walk's judge: a score as a string (kept), an index scored twice, one out of
    the request, one left out. Only the answers left unscored go out again, in one request."""
    gold, cfg, report = _report(["yes", "no", "yes", "yes", "maybe", "no"])
    asked: list[list[int]] = []

    def judge(request: dict) -> dict:
        indices = _indices(request)
        asked.append(indices)
        if len(asked) > 1:  # the second request: every answer it holds, validly
            return {"scores": [{"index": i, "score": 1.0, "reason": "second look"} for i in indices]}
        return {
            "scores": [
                {"index": 0, "score": "1", "reason": "a string score"},
                {"index": 1, "score": 0, "reason": "first"},
                {"index": 1, "score": 1, "reason": "second"},
                {"index": 2, "score": 0.5, "reason": "half"},
                {"index": 9, "score": 1, "reason": "no such answer"},
                {"index": 4, "score": 0, "reason": "wrong"},
                {"index": 5, "score": 2, "reason": "out of range"},
            ]
        }

    with FakeAnthropic() as fake:
        fake.on_tool("judge_answers", judge)
        result = judge_answers(
            _client(fake), PlannerConfig(max_retries=0), gold, report, system_prompt="p", eval_cfg=cfg
        )
    assert asked == [[0, 1, 2, 3, 4, 5], [1, 3, 5]]
    assert [(j.index, j.score, j.reason) for j in result.judgements] == [
        (0, 1.0, "a string score"),
        (1, 1.0, "second look"),
        (2, 0.5, "half"),
        (3, 1.0, "second look"),
        (4, 0.0, "wrong"),
        (5, 1.0, "second look"),
    ]
    assert result.retried == 1 and result.usage.requests == 2
    assert result.report.accuracy == pytest.approx(4.5 / 6)


def test_the_judge_gives_up_after_a_second_invalid_reply_and_stops_on_a_bad_key():
    gold, cfg, report = _report(["yes", "no", "rm -rf /", "yes", "maybe"])
    planner = PlannerConfig(max_retries=0)
    with FakeAnthropic() as fake:
        client = _client(fake)
        seen: list[list[int]] = []
        fake.on_tool("judge_answers", judge_handler(seen, drop_once=set()))
        judged = judge_answers(
            client, planner, gold, report, system_prompt="p", eval_cfg=cfg, items_per_request=2
        )
        assert sorted(seen) == [[0, 1], [3, 4]]  # the forbidden answer is never sent: it scores 0
        assert [j.index for j in judged.judgements] == [0, 1, 3, 4]
        assert [it.score for it in judged.report.items] == [1.0, 0.0, 0.0, 1.0, 0.0]
        assert judged.report.forbidden_count == 1 and judged.report.accuracy == pytest.approx(0.4)

        fake.on_tool("judge_answers", lambda request: {"scores": []})
        fault = r"4 answer\(s\) still unscored after a second request \(invalid judge_answers: no score for index 0, 1\)"
        with pytest.raises(RuntimeFault, match=fault):
            judge_answers(client, planner, gold, report, system_prompt="p", eval_cfg=cfg, items_per_request=2)
        fake.script(error_reply(401, "authentication_error", "invalid x-api-key"))
        with pytest.raises(ConfigError, match=r"Claude is unavailable .*invalid x-api-key"):
            judge_answers(client, planner, gold, report, system_prompt="p", eval_cfg=cfg)
