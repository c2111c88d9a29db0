"""Claude through the `anthropic` SDK: the one module that talks to the Messages API.

One forced tool per job (`propose_experiment`, `write_examples`, `review_examples`). The SDK
reads ANTHROPIC_API_KEY and ANTHROPIC_BASE_URL from the environment; this module sets the
timeout and the retries (the SDK retries 408, 409, 429, 5xx and 529 with backoff, honouring
retry-after) and sorts what is left into errors that end Claude's part of the run (bad key,
no permission, spend limit) and errors that only end this request.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forge_ml.config import PlannerConfig
from forge_ml.errors import ConfigError, describe
from forge_ml.secrets import redact_text

if TYPE_CHECKING:
    from forge_ml.data.gold_guard import GoldGuard

log = logging.getLogger(__name__)

API_KEY_ENV = "ANTHROPIC_API_KEY"
_FATAL_NAMES = (
    "AuthenticationError",
    "PermissionDeniedError",
    "PaymentRequiredError",
    "EnforcedSpendLimitReachedError",
    "ContractSpendLimitReachedError",
    "OrganizationOnHoldError",
)
_SPEND_WORDS = ("credit balance", "spend limit", "billing")


def claude_available() -> bool:
    return bool(os.environ.get(API_KEY_ENV, "").strip())


def claude_enabled(planner: PlannerConfig) -> bool:
    """Return whether Claude takes part: planner.backend=claude, or auto with ANTHROPIC_API_KEY set.

    The one rule for the planner, the data commands, audit and probe. backend=claude without the
    key is a ConfigError (exit 1) rather than a silent fall-back: the config asked for Claude.
    """
    backend = planner.backend
    if backend == "claude" and not claude_available():
        raise ConfigError(f"planner.backend=claude needs {API_KEY_ENV} in the environment")
    return backend == "claude" or (backend == "auto" and claude_available())


@dataclass
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0
    requests: int = 0

    def add(self, usage: Any) -> None:
        self.requests += 1
        if usage is None:
            return
        self.input_tokens += int(getattr(usage, "input_tokens", 0) or 0)
        self.output_tokens += int(getattr(usage, "output_tokens", 0) or 0)
        self.cache_write_tokens += int(getattr(usage, "cache_creation_input_tokens", 0) or 0)
        self.cache_read_tokens += int(getattr(usage, "cache_read_input_tokens", 0) or 0)

    def merge(self, other: Usage) -> None:
        for name in ("input_tokens", "output_tokens", "cache_write_tokens", "cache_read_tokens", "requests"):
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def cost_usd(self, planner: PlannerConfig) -> float:
        p = planner.prices
        return (
            self.input_tokens * p.input
            + self.output_tokens * p.output
            + self.cache_write_tokens * p.cache_write
            + self.cache_read_tokens * p.cache_read
        ) / 1e6

    def metrics(self, planner: PlannerConfig, prefix: str = "planner") -> dict[str, float]:
        return {
            f"{prefix}/input_tokens": float(self.input_tokens),
            f"{prefix}/output_tokens": float(self.output_tokens),
            f"{prefix}/cache_write_tokens": float(self.cache_write_tokens),
            f"{prefix}/cache_read_tokens": float(self.cache_read_tokens),
            f"{prefix}/requests": float(self.requests),
            f"{prefix}/cost_usd": self.cost_usd(planner),
        }


@dataclass
class ToolCall:
    """The forced tool's input, with what came around it."""

    name: str
    input: Any
    stop_reason: str | None
    tool_use_id: str | None
    content: list[Any] = field(default_factory=list)  # the assistant turn, to send back with errors


class ClaudeUnavailable(Exception):
    """Claude cannot be used for the rest of this run (bad key, no permission, spend limit)."""


class ClaudeRequestFailed(Exception):
    """This request failed after the SDK's retries (timeout, overload, server error, bad reply)."""


def make_client(planner: PlannerConfig) -> Any:
    """The Anthropic client: explicit timeout and retry count, no wait longer than `max_retry_wait_s`."""
    import anthropic

    http = anthropic.DefaultHttpxClient(transport=_capped_retry_after_transport(planner.max_retry_wait_s))
    return anthropic.Anthropic(timeout=planner.timeout_s, max_retries=planner.max_retries, http_client=http)


def _capped_retry_after_transport(cap_s: float) -> Any:
    """An HTTP transport that caps the `retry-after` a response asks for.

    The SDK waits as long as `retry-after` says before it retries (hours, if told so); a flywheel
    round would stall. Capped, the retries end within minutes, and then the round plans offline.
    """
    import httpx2

    class CappedRetryAfter(httpx2.HTTPTransport):
        def handle_request(self, request: Any) -> Any:
            response = super().handle_request(request)
            for header, cap in (
                ("retry-after", cap_s),
                ("retry-after-ms", cap_s * 1000),
            ):
                value = response.headers.get(header)
                try:
                    too_long = value is not None and float(value) > cap
                except ValueError:  # an HTTP date: waited as the cap
                    too_long = True
                if too_long:
                    response.headers[header] = f"{cap:g}"
            return response

    return CappedRetryAfter()


def classify(exc: BaseException) -> Exception:
    """Return ClaudeUnavailable or ClaudeRequestFailed for an SDK exception."""
    import anthropic

    fatal = tuple(getattr(anthropic, name) for name in _FATAL_NAMES if hasattr(anthropic, name))
    message = redact_text(f"{type(exc).__name__}: {getattr(exc, 'message', None) or exc}")
    if isinstance(exc, fatal):
        return ClaudeUnavailable(message)
    if isinstance(exc, anthropic.BadRequestError) and any(w in str(exc).lower() for w in _SPEND_WORDS):
        return ClaudeUnavailable(message)
    return ClaudeRequestFailed(message)


def call_tool(
    client: Any,
    planner: PlannerConfig,
    *,
    system: list[dict[str, Any]],
    messages: list[dict[str, Any]],
    tool: dict[str, Any],
    usage: Usage,
    model: str | None = None,
) -> ToolCall:
    """Send one request that must answer with `tool` (to `model`, default `planner.model`); return
    its input (raise Claude* on failure)."""
    import anthropic

    try:
        response = client.messages.create(
            model=model or planner.model,
            max_tokens=planner.max_tokens,
            system=system,
            messages=messages,
            tools=[tool],
            tool_choice={"type": "tool", "name": tool["name"]},
        )
    except anthropic.APIError as exc:
        usage.requests += 1
        raise classify(exc) from exc
    except ValueError as exc:  # a 200 whose body is not JSON
        usage.requests += 1
        raise ClaudeRequestFailed(f"malformed reply ({describe(exc)})") from exc
    if not hasattr(response, "content"):  # a non-JSON content type (e.g. a proxy's page) comes back as text
        usage.requests += 1
        raise ClaudeRequestFailed(f"the reply is not a message: {str(response)[:200]!r}")
    usage.add(getattr(response, "usage", None))
    blocks = [
        b for b in response.content if getattr(b, "type", None) == "tool_use" and b.name == tool["name"]
    ]
    content = [b.model_dump(exclude_none=True) for b in response.content]
    if not blocks:
        raise ClaudeRequestFailed(
            f"the reply has no {tool['name']} call (stop_reason {response.stop_reason})"
        )
    return ToolCall(tool["name"], blocks[0].input, response.stop_reason, blocks[0].id, content)


def cached(text: str) -> dict[str, Any]:
    """A system block marked as the end of the cached static prefix."""
    return {"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}


def quoted(name: str, value: Any) -> str:
    """Wrap project data so the model reads it as data: JSON-encoded inside a named tag."""
    import json

    body = value if isinstance(value, str) else json.dumps(value, indent=1, ensure_ascii=False)
    body = json.dumps(body, ensure_ascii=False) if isinstance(value, str) else body
    return f'<data name="{name}">\n{body}\n</data>'


# The project's notes every request carries, as data, in its cached prefix: what the task is and
# what the domain knows. (file, title)
PROJECT_NOTES = (("mission.md", "Task description"), ("BACKGROUND.md", "Domain background"))


def project_notes(root: Path, guard: GoldGuard | None = None) -> str:
    """mission.md and BACKGROUND.md of the project at `root`, each titled and quoted (empty when absent).

    The planner reads them whole. A data writer or reviewer gets them through `guard`, which cuts
    out quotes of the gold set (a planner's note in BACKGROUND.md may quote a gold failure).
    """
    parts = []
    for name, title in PROJECT_NOTES:
        path = root / name
        text = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
        if guard is not None:
            text, quotes = guard.withhold(text)
            if quotes:
                log.warning(
                    "%s quotes the gold set (%d place(s)): withheld from the data writer, which never sees gold",
                    path,
                    quotes,
                )
        parts.append(f"{title} ({name}):\n{quoted(name, text)}")
    return "\n\n".join(parts)


# --- Message Batches: the same forced-tool requests at half the price, answered within 24 hours ---

BATCH_PRICE_FACTOR = 0.5  # a Message Batch costs half the standard price of its requests
BATCH_FIRST_POLL_S = 0.5
BATCH_MAX_POLL_S = 60.0


class BatchNotEnded(ClaudeRequestFailed):
    """A Message Batch was still processing when the caller's wait ran out."""


@dataclass
class BatchResults:
    """What came back from one Message Batch, by `custom_id`."""

    batch_id: str
    calls: dict[str, ToolCall] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)  # custom_id -> why it has no call


def batch_cost_usd(usage: Usage, planner: PlannerConfig) -> float:
    """The cost of tokens used through the Message Batches API."""
    return usage.cost_usd(planner) * BATCH_PRICE_FACTOR


def submit_tool_batch(
    client: Any,
    planner: PlannerConfig,
    requests: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]],
    *,
    tool: dict[str, Any],
    model: str | None = None,
) -> str:
    """Create a Message Batch of forced-`tool` requests (`custom_id -> (system, messages)`) to `model`
    (default `planner.model`); return its id."""
    import anthropic

    items = [
        {
            "custom_id": custom_id,
            "params": {
                "model": model or planner.model,
                "max_tokens": planner.max_tokens,
                "system": system,
                "messages": messages,
                "tools": [tool],
                "tool_choice": {"type": "tool", "name": tool["name"]},
            },
        }
        for custom_id, (system, messages) in requests.items()
    ]
    try:
        return client.messages.batches.create(requests=items).id
    except anthropic.APIError as exc:
        raise classify(exc) from exc


def wait_for_batch(
    client: Any,
    batch_id: str,
    *,
    max_wait_s: float,
    first_poll_s: float = BATCH_FIRST_POLL_S,
    max_poll_s: float = BATCH_MAX_POLL_S,
) -> None:
    """Poll until the batch has ended, the pause doubling up to `max_poll_s`; never past `max_wait_s`.

    Raises BatchNotEnded when the wait runs out (the batch goes on at Anthropic until it ends or
    expires), ClaudeUnavailable/ClaudeRequestFailed when polling itself fails.
    """
    import time

    import anthropic

    deadline = time.monotonic() + max_wait_s
    pause = first_poll_s
    while True:
        time.sleep(max(0.0, min(pause, deadline - time.monotonic())))
        try:
            batch = client.messages.batches.retrieve(batch_id)
        except anthropic.APIError as exc:
            raise classify(exc) from exc
        if batch.processing_status == "ended":
            return
        if time.monotonic() >= deadline:
            raise BatchNotEnded(
                f"Message Batch {batch_id} is still {batch.processing_status} after {max_wait_s:g}s; "
                "it goes on at Anthropic until it ends or expires (24 h)"
            )
        pause = min(pause * 2, max_poll_s)


def tool_batch_results(client: Any, batch_id: str, *, tool: dict[str, Any], usage: Usage) -> BatchResults:
    """Fetch an ended batch's results: each succeeded request's `tool` call; why the others have none."""
    import anthropic

    out = BatchResults(batch_id)
    try:
        for item in client.messages.batches.results(batch_id):
            result = item.result
            if result.type != "succeeded":
                error = getattr(getattr(getattr(result, "error", None), "error", None), "message", None)
                out.errors[item.custom_id] = result.type + (f": {error}" if error else "")
                continue
            message = result.message
            usage.add(message.usage)
            blocks = [b for b in message.content if b.type == "tool_use" and b.name == tool["name"]]
            if not blocks:
                out.errors[item.custom_id] = f"no {tool['name']} call (stop_reason {message.stop_reason})"
                continue
            content = [b.model_dump(exclude_none=True) for b in message.content]
            out.calls[item.custom_id] = ToolCall(
                tool["name"], blocks[0].input, message.stop_reason, blocks[0].id, content
            )
    except anthropic.APIError as exc:
        raise classify(exc) from exc
    return out
