"""The `write_examples` requests of one data job, sent all at once (bounded concurrency) or as a Message Batch.

A job asks for `n` examples, split over its focus categories in proportion to their gold failures
(`allocate`), then into requests of at most `per_request` examples. Everything from the project
(examples, failures, categories, a `patch` description) reaches Claude as quoted data, inside the
cached system prompt of forge_ml/augment/claude.py. Gold examples are never sent.
"""

from __future__ import annotations

import json
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from forge_ml.augment.claude import WRITE_EXAMPLES, _request
from forge_ml.augment.round import allocate
from forge_ml.augment.validate import failure_counts
from forge_ml.config import PlannerConfig
from forge_ml.data.examples import Example
from forge_ml.errors import RuntimeFault
from forge_ml.llm import (
    BatchNotEnded,
    ClaudeRequestFailed,
    ClaudeUnavailable,
    ToolCall,
    Usage,
    call_tool,
    quoted,
    submit_tool_batch,
    tool_batch_results,
    wait_for_batch,
)

log = logging.getLogger(__name__)
CHARS_PER_TOKEN = 4  # for estimates only: English text and JSON run at about 4 characters a token
DEFAULT_EXAMPLE_TOKENS = 60  # an example's estimated size when the project has none to measure
CALL_OVERHEAD_TOKENS = 40  # the tool_use wrapper around the examples of one answer


@dataclass(frozen=True)
class Brief:
    """What a job asks Claude for."""

    n: int
    per_request: int
    focus: list[str]  # categories to aim at; empty: every category (or the description)
    description: str | None  # `patch`: the plain-English request
    samples: list[Example]  # existing training examples, shown for the format
    failures: list[dict[str, Any]]  # gold failures: they split `n` over the focus categories
    split: bool = True  # False: one share for all the focus (a top-up of a few examples)


@dataclass(frozen=True)
class ExampleRequest:
    custom_id: str
    size: int
    text: str


@dataclass
class Written:
    """The rows Claude wrote and how the requests went."""

    rows: list[Any] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # custom_id -> reason
    batch_id: str | None = None


def system_blocks(notes: str, system_prompt: str) -> list[dict[str, Any]]:
    """The cached system prompt of `write_examples`: instructions, the model's system prompt, the
    project's notes (`project_notes`: mission.md and BACKGROUND.md)."""
    return _request(notes, system_prompt)


def _what(size: int, focus: list[str], description: str | None) -> str:
    if description is not None:
        return (
            f"Write {size} new examples of the kind the project owner describes in this request "
            "(a description of the examples wanted):\n" + quoted("request", description) + "\n"
        )
    if focus:
        return f"Write {size} new examples for these categories:\n" + quoted("categories", focus) + "\n"
    return f"Write {size} new examples across all categories.\n"


def build_requests(brief: Brief, kind: str) -> list[ExampleRequest]:
    """Split the brief into requests of at most `per_request` examples each, with their user text."""
    shown = [{"user": e.user, "assistant": e.assistant, "category": e.category} for e in brief.samples]
    parts: list[tuple[list[str], int]] = []
    shares = allocate(brief.n, brief.focus, brief.failures) if brief.split else [(brief.focus, brief.n)]
    for focus, n in shares:
        parts += [(focus, min(brief.per_request, n - start)) for start in range(0, n, brief.per_request)]
    requests = []
    for index, (focus, size) in enumerate(parts):
        failures = failure_counts([f for f in brief.failures if not focus or f.get("category") in focus])
        text = (
            _what(size, focus, brief.description)
            + f"(Request {index + 1} of {len(parts)}: make them differ from the other requests' examples.)\n\n"
            + "Existing examples (format reference):\n"
            + quoted("examples", shown)
            + "\n\nGold failures per category (the locked gold set itself is never shown):\n"
            + quoted("failure_counts", failures)
        )
        requests.append(ExampleRequest(f"{kind}-{index:04d}", size, text))
    return requests


def estimate_tokens(
    requests: list[ExampleRequest], system: list[dict[str, Any]], samples: list[Example]
) -> tuple[int, int]:
    """Return (input, output) token estimates: prompt length in characters, and examples asked for."""
    fixed = sum(len(block["text"]) for block in system) + len(json.dumps(WRITE_EXAMPLES))
    input_tokens = sum(fixed + len(r.text) for r in requests) // CHARS_PER_TOKEN
    sizes = [
        len(json.dumps({"user": e.user, "assistant": e.assistant, "category": e.category})) for e in samples
    ]
    per_example = sum(sizes) / len(sizes) / CHARS_PER_TOKEN if sizes else DEFAULT_EXAMPLE_TOKENS
    output_tokens = round(sum(r.size for r in requests) * per_example) + CALL_OVERHEAD_TOKENS * len(requests)
    return input_tokens, output_tokens


def _rows(call: ToolCall) -> list[Any]:
    rows = call.input.get("examples") if isinstance(call.input, dict) else None
    if not isinstance(rows, list):
        return []
    return rows[:-1] if call.stop_reason == "max_tokens" else rows  # the last one may be cut off


def _messages(request: ExampleRequest) -> list[dict[str, Any]]:
    return [{"role": "user", "content": request.text}]


def send_concurrent(
    client: Any,
    planner: PlannerConfig,
    system: list[dict[str, Any]],
    requests: list[ExampleRequest],
    usage: Usage,
) -> Written:
    """Send every request, `planner.augment_concurrency` at a time; a failed request is skipped and noted.

    Raises ClaudeUnavailable when Claude cannot be used at all and nothing came back.
    """
    usages = [Usage() for _ in requests]

    def one(index: int) -> ToolCall:
        return call_tool(
            client,
            planner,
            system=system,
            messages=_messages(requests[index]),
            tool=WRITE_EXAMPLES,
            usage=usages[index],
            model=planner.writer_model,
        )

    written, fatal = Written(), None
    with ThreadPoolExecutor(max_workers=planner.augment_concurrency) as pool:
        futures = [pool.submit(one, i) for i in range(len(requests))]
        for request, future in zip(requests, futures):
            try:
                written.rows += _rows(future.result())
            except ClaudeUnavailable as exc:
                fatal = exc
                written.failed[request.custom_id] = str(exc)
            except ClaudeRequestFailed as exc:
                log.warning("write_examples: request %s failed (%s)", request.custom_id, exc)
                written.failed[request.custom_id] = str(exc)
    for own in usages:
        usage.merge(own)
    if fatal is not None and not written.rows:
        raise fatal
    return written


def send_batch(
    client: Any,
    planner: PlannerConfig,
    system: list[dict[str, Any]],
    requests: list[ExampleRequest],
    usage: Usage,
    *,
    max_wait_s: float,
    on_submit: Any = None,
) -> Written:
    """Send every request in one Message Batch, wait for it (at most `max_wait_s`), parse the results."""
    batch_id = submit_tool_batch(
        client,
        planner,
        {r.custom_id: (system, _messages(r)) for r in requests},
        tool=WRITE_EXAMPLES,
        model=planner.writer_model,
    )
    if on_submit is not None:
        on_submit(batch_id)
    try:
        wait_for_batch(client, batch_id, max_wait_s=max_wait_s)
    except BatchNotEnded as exc:
        raise RuntimeFault(f"{exc}; nothing was added (--batch-wait sets the wait)") from exc
    results = tool_batch_results(client, batch_id, tool=WRITE_EXAMPLES, usage=usage)
    written = Written(batch_id=batch_id, failed=dict(results.errors))
    for request in requests:
        call = results.calls.get(request.custom_id)
        if call is not None:
            written.rows += _rows(call)
        elif request.custom_id not in written.failed:
            written.failed[request.custom_id] = "missing from the batch results"
    for custom_id, reason in written.failed.items():
        log.warning("write_examples: batch request %s failed (%s)", custom_id, reason)
    return written
