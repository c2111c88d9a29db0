"""Error types and the exit codes they map to (see docs/cli.md)."""

from __future__ import annotations

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
    if isinstance(error, KeyboardInterrupt):
        return 130
    return EXIT_RUNTIME
