"""Redaction of anything that looks like a credential before it reaches logs or trackers."""

from __future__ import annotations

import logging
import os
import re
from typing import Any

REDACTED = "***redacted***"
# A key names a secret when one of its words is one of these (`hf_token`, `api-key`), not when a
# word merely contains one (`max_new_tokens`, `author`).
_SECRET_KEY = re.compile(
    r"(?:^|[._-])(api[_-]?key|token|secret|password|passwd|credentials?|auth|authorization)(?:[._-]|$)",
    re.IGNORECASE,
)
_SECRET_VALUE = re.compile(
    r"(sk-ant-[\w-]{8,}|sk-[A-Za-z0-9_-]{16,}|hf_[A-Za-z0-9]{16,}|gh[pousr]_[A-Za-z0-9]{20,}"
    r"|AKIA[0-9A-Z]{16}|xox[abpr]-[\w-]{10,}|://[^/\s:@]+:[^/\s@]+@)"
)


def looks_secret(key: str, value: Any) -> bool:
    if _SECRET_KEY.search(key.rsplit(".", 1)[-1]) and value not in (None, "", False):
        return True
    return isinstance(value, str) and bool(_SECRET_VALUE.search(value))


MIN_SECRET_LENGTH = 8  # shorter values of secret-named variables are not searched for (too many false hits)


def environment_secrets() -> list[str]:
    """The values of this process's secret-named environment variables (`HF_TOKEN`,
    `MLFLOW_TRACKING_PASSWORD`, `ANTHROPIC_API_KEY`, ...), longest first."""
    found = {
        value
        for name, value in os.environ.items()
        if len(value) >= MIN_SECRET_LENGTH and _SECRET_KEY.search(name.lower())
    }
    return sorted(found, key=len, reverse=True)


def redact_text(text: str) -> str:
    """Return `text` with secret-looking substrings, and the values of secret-named environment
    variables whatever they look like (a password is any string), replaced."""
    for value in environment_secrets():
        text = text.replace(value, REDACTED)
    return _SECRET_VALUE.sub(REDACTED, text)


class RedactingFilter(logging.Filter):
    """A handler filter: every record is formatted once and redacted before any handler writes it."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = redact_text(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and record.exc_info[1] is not None:
            text = logging.Formatter().formatException(record.exc_info)
            record.exc_text, record.exc_info = redact_text(text), None
        return True


def redact_mapping(flat: dict[str, Any]) -> dict[str, Any]:
    """Return a copy of a flat mapping with secret-looking keys or values replaced."""
    return {k: (REDACTED if looks_secret(k, v) else v) for k, v in flat.items()}


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """Return a nested mapping flattened to dotted keys (lists kept as values)."""
    if not isinstance(data, dict):
        return {prefix: data}
    flat: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict) and value:
            flat.update(flatten(value, name))
        else:
            flat[name] = value
    return flat
