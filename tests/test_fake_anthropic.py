"""The fake Anthropic API speaks the wire format the real `anthropic` SDK expects."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest
from fake_anthropic import DEFAULT_USAGE, FakeAnthropic, Reply, error_reply

MODEL = "claude-sonnet-4-5"
PLAN_TOOL = {
    "name": "plan_round",
    "description": "Plan the next fine-tuning round.",
    "input_schema": {"type": "object", "properties": {"learning_rate": {"type": "number"}}},
}
PLAN = {"learning_rate": 2e-4, "epochs": 3, "notes": "raise the rank"}


@pytest.fixture
def fake() -> Iterator[FakeAnthropic]:
    before = set(threading.enumerate())
    with FakeAnthropic() as server:
        yield server
    assert set(threading.enumerate()) <= before, "the fake left threads running"


def client(fake: FakeAnthropic, max_retries: int = 0, timeout: float = 3.0) -> anthropic.Anthropic:
    """A real SDK client pointed at `fake`."""
    return anthropic.Anthropic(
        api_key="sk-ant-test", base_url=fake.base_url, max_retries=max_retries, timeout=timeout
    )


def plan(sdk: anthropic.Anthropic) -> anthropic.types.Message:
    """One forced `plan_round` call."""
    return sdk.messages.create(
        model=MODEL,
        max_tokens=1024,
        tools=[PLAN_TOOL],
        tool_choice={"type": "tool", "name": "plan_round"},
        messages=[{"role": "user", "content": "Plan round 2."}],
    )


def test_forced_tool_round_trip(fake: FakeAnthropic) -> None:
    seen: list[dict[str, Any]] = []
    fake.on_tool("plan_round", lambda body: seen.append(body) or PLAN)

    with client(fake) as sdk:
        message = plan(sdk)

    assert message.stop_reason == "tool_use"
    assert message.model == MODEL
    [block] = message.content
    assert block.type == "tool_use"
    assert block.name == "plan_round"
    assert block.input == PLAN
    assert block.id.startswith("toolu_")
    assert message.usage.input_tokens == DEFAULT_USAGE["input_tokens"]
    assert message.usage.cache_read_input_tokens == DEFAULT_USAGE["cache_read_input_tokens"]
    assert message.usage.cache_creation_input_tokens == 0
    [request] = fake.requests
    assert (request.method, request.path) == ("POST", "/v1/messages")
    assert request.headers["authorization"] == "Bearer sk-ant-test"  # this SDK sends no x-api-key
    assert "anthropic-version" in request.headers
    assert request.body["tool_choice"] == {"type": "tool", "name": "plan_round"}
    assert seen == [request.body]


def test_overloaded_then_ok_is_retried(fake: FakeAnthropic) -> None:
    fake.script(
        error_reply(529, "overloaded_error", "Overloaded", {"retry-after-ms": "10"}),
        Reply(tool="plan_round", tool_input=PLAN),
    )

    with client(fake, max_retries=2) as sdk:
        message = plan(sdk)

    assert message.content[0].input == PLAN
    assert fake.count("/v1/messages") == 2
    assert [r.headers["x-stainless-retry-count"] for r in fake.requests] == ["0", "1"]


def test_rate_limit_exhausts_retries(fake: FakeAnthropic) -> None:
    limited = error_reply(429, "rate_limit_error", "Slow down", {"retry-after": "0.01"})
    fake.script(limited, limited, limited)

    with client(fake, max_retries=2) as sdk, pytest.raises(anthropic.RateLimitError) as caught:
        plan(sdk)

    assert caught.value.type == "rate_limit_error"
    assert fake.count("/v1/messages") == 3


def test_should_retry_false_stops_retries(fake: FakeAnthropic) -> None:
    fake.script(error_reply(529, "overloaded_error", "Overloaded", {"x-should-retry": "false"}))

    with client(fake, max_retries=2) as sdk, pytest.raises(anthropic.OverloadedError):
        plan(sdk)

    assert fake.count() == 1


def test_authentication_error_is_not_retried(fake: FakeAnthropic) -> None:
    fake.script(error_reply(401, "authentication_error", "invalid x-api-key"))

    with client(fake, max_retries=2) as sdk, pytest.raises(anthropic.AuthenticationError) as caught:
        plan(sdk)

    assert caught.value.status_code == 401
    assert caught.value.api_message == "invalid x-api-key"
    assert fake.count() == 1


def test_unscripted_request_fails_loudly_once(fake: FakeAnthropic) -> None:
    with client(fake, max_retries=2) as sdk, pytest.raises(anthropic.InternalServerError) as caught:
        plan(sdk)

    assert "no on_tool handler" in str(caught.value.api_message)
    assert fake.count() == 1


def test_slow_reply_times_out(fake: FakeAnthropic) -> None:
    fake.script(Reply(tool="plan_round", tool_input=PLAN, delay_s=3.0))

    start = time.monotonic()
    with client(fake, timeout=0.5) as sdk, pytest.raises(anthropic.APITimeoutError):
        plan(sdk)

    assert time.monotonic() - start < 2.0
    assert fake.count() == 1


def test_malformed_json_raises_decode_error_without_retry(fake: FakeAnthropic) -> None:
    fake.script(Reply(body='{"id": "msg_1", "content": ['))

    with client(fake, max_retries=2) as sdk, pytest.raises(json.JSONDecodeError):
        plan(sdk)

    assert fake.count() == 1


def test_non_json_content_type_returns_raw_text(fake: FakeAnthropic) -> None:
    fake.script(Reply(body="<html>bad gateway</html>", headers={"content-type": "text/html"}))

    with client(fake) as sdk:
        message = plan(sdk)

    assert message == "<html>bad gateway</html>"  # a str, not a Message: callers must check


def test_max_tokens_truncated_tool_input_reaches_client(fake: FakeAnthropic) -> None:
    usage = {**DEFAULT_USAGE, "output_tokens": 1024}
    fake.script(
        Reply(tool="plan_round", tool_input={"notes": "raise the"}, stop_reason="max_tokens", usage=usage)
    )

    with client(fake) as sdk:
        message = plan(sdk)

    assert message.stop_reason == "max_tokens"
    assert message.content[0].input == {"notes": "raise the"}
    assert message.usage.output_tokens == 1024


def test_batch_create_poll_and_results(fake: FakeAnthropic) -> None:
    def grade(body: dict[str, Any]) -> dict[str, Any] | Reply:
        prompt = body["messages"][0]["content"]
        if prompt == "bad":
            return error_reply(400, "invalid_request_error", "prompt is too long")
        return {"score": len(prompt)}

    fake.on_tool("grade", grade)
    params = {
        "model": MODEL,
        "max_tokens": 256,
        "tools": [{"name": "grade", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "tool", "name": "grade"},
    }
    requests = [
        {"custom_id": "ok", "params": {**params, "messages": [{"role": "user", "content": "good"}]}},
        {"custom_id": "no", "params": {**params, "messages": [{"role": "user", "content": "bad"}]}},
    ]

    with client(fake) as sdk:
        batch = sdk.messages.batches.create(requests=requests)
        assert batch.processing_status == "in_progress"
        assert batch.request_counts.processing == 2
        assert batch.results_url is None

        assert sdk.messages.batches.retrieve(batch.id).processing_status == "in_progress"
        ended = sdk.messages.batches.retrieve(batch.id)
        assert ended.processing_status == "ended"
        assert (ended.request_counts.succeeded, ended.request_counts.errored) == (1, 1)
        assert ended.results_url == f"{fake.base_url}/v1/messages/batches/{batch.id}/results"

        results = {line.custom_id: line.result for line in sdk.messages.batches.results(batch.id)}

    assert results["ok"].type == "succeeded"
    assert results["ok"].message.content[0].input == {"score": 4}
    assert results["no"].type == "errored"
    assert results["no"].error.error.type == "invalid_request_error"
    assert fake.count("/v1/messages/batches", "POST") == 1
    assert fake.count(f"/v1/messages/batches/{batch.id}", "GET") == 3  # `results()` retrieves first
    assert fake.count(f"/v1/messages/batches/{batch.id}/results", "GET") == 1
