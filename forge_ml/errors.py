"""Error types and the exit codes they map to (see docs/cli.md)."""

from __future__ import annotations

import traceback
from pathlib import Path

from forge_ml.secrets import redact_text

EXIT_OK = 0
EXIT_BAD_INPUT = 1  # bad configuration or input: do not retry
EXIT_RUNTIME = 2  # runtime failure: a retry may help
EXIT_GATE = 3  # gate refused / target not reached


class ForgeError(Exception):
    """Base class: an error forge-ml reports to the user with an exit code."""

    exit_code = EXIT_RUNTIME


class ConfigError(ForgeError):
    """A configuration value or key is wrong; the message names the key."""

    exit_code = EXIT_BAD_INPUT


class InputError(ForgeError):
    """A project file or argument is wrong; the message names the file (and line)."""

    exit_code = EXIT_BAD_INPUT


class RuntimeFault(ForgeError):
    """Something failed while running (training crashed, a service is down)."""

    exit_code = EXIT_RUNTIME


def error_exit_code(error: BaseException | None) -> int:
    """The exit code of an error: its own for ForgeError, 130 for Ctrl-C, else a runtime failure."""
    if isinstance(error, ForgeError):
        return error.exit_code
    if isinstance(error, KeyboardInterrupt):  # Ctrl-C 130; SIGTERM 143 (forge_ml/stopping.py)
        return 128 + getattr(error, "signum", 2)
    return EXIT_RUNTIME


def first_line(exc: BaseException, limit: int = 300) -> str:
    """The first non-blank line of an exception's message; for one raised without a message, where it was raised."""
    for line in str(exc).splitlines():
        if line.strip():
            return redact_text(line.strip())[:limit]  # an API may echo a credential in its error
    return _no_message(exc)


def describe(exc: BaseException) -> str:
    """`Class: first line` of an exception, never empty."""
    line = first_line(exc)
    return line if not str(exc).strip() else f"{type(exc).__name__}: {line}"


def _no_message(exc: BaseException) -> str:
    """`Class with no message, raised at dir/file.py:N (function)`: the innermost frame says what failed."""
    frames = traceback.extract_tb(exc.__traceback__) if exc.__traceback__ else []
    if not frames:
        return f"{type(exc).__name__} with no message"
    frame = frames[-1]
    where = "/".join(Path(frame.filename).parts[-2:])
    return f"{type(exc).__name__} with no message, raised at {where}:{frame.lineno} ({frame.name})"
