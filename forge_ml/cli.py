"""`forge-ml` command line: global flags, dispatch to forge_ml/commands, exit codes, `--json` envelopes.

Exit codes: 0 success · 1 bad configuration or input · 2 runtime failure · 3 gate refused.
With `--json`, people-facing output goes to stderr and stdout carries one JSON envelope:
`{command, success, exit_code, run_id, config_hash, <the command's keys>, error}` where
`error` is null or `{class, message}` (docs/cli.md lists every command's keys).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import warnings
from typing import Any

from forge_ml import __version__, stopping
from forge_ml.commands import Command, Context, all_commands
from forge_ml.console import console, results
from forge_ml.errors import ForgeError, RuntimeFault, describe, error_exit_code
from forge_ml.models.generation import PEFT_ALIAS_WARNING
from forge_ml.progress import set_quiet
from forge_ml.secrets import RedactingFilter, redact_text

log = logging.getLogger("forge_ml")
QUIET_ENV = {
    "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "TRANSFORMERS_VERBOSITY": "error",
    "TOKENIZERS_PARALLELISM": "false",
}
COMMON_KEYS = ("command", "success", "exit_code", "run_id", "config_hash")


class UsageError(Exception):
    """The command line does not parse (argparse's message); exit 1."""


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad option or command is bad input: exit 1 (argparse's own 2 means a runtime fault here).

    Errors are raised as `UsageError` so that `--json` can answer with an envelope.
    """

    def error(self, message: str):  # type: ignore[override]
        self.print_usage(sys.stderr)
        raise UsageError(f"{self.prog}: {message}")


def _global_flags(parser: argparse.ArgumentParser, *, after_command: bool) -> None:
    """-p/-v/--json, before the command or after it (after it, absent flags keep the values given before)."""
    default = {"default": argparse.SUPPRESS} if after_command else {}
    parser.add_argument(
        "-p", "--project", help="project directory (default: the current directory or a parent)", **default
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging", **default)
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON envelope on stdout (for scripts and CI)",
        **default,
    )


def _parser(commands: list[Command]) -> argparse.ArgumentParser:
    parser = _Parser(prog="forge-ml", description="Self-improving fine-tuning of small models.")
    parser.add_argument("--version", action="version", version=f"forge-ml {__version__}")
    _global_flags(parser, after_command=False)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
    for command in commands:
        child = sub.add_parser(command.name, help=command.help)
        command.configure(child)
        _global_flags(child, after_command=True)
    return parser


def envelope(
    command: str | None, keys: tuple[str, ...], ctx: Context | None, code: int, error: BaseException | None
) -> dict[str, Any]:
    """The JSON envelope of one invocation: the common keys, the command's keys (null when unknown), error."""
    fields = ctx.fields if ctx else {}
    data: dict[str, Any] = {
        "command": command,
        "success": code == 0,
        "exit_code": code,
        "run_id": ctx.run_id if ctx else None,
        "config_hash": ctx.config_hash if ctx else None,
    }
    data |= {key: fields.get(key) for key in keys}
    data["error"] = None if error is None else {"class": type(error).__name__, "message": _message(error)}
    return data


def _message(error: BaseException) -> str:
    """What the user reads: a forge-ml error's own text; for anything else `Class: first line`, never
    empty; a credential in it (a URI's password, a key) redacted."""
    if isinstance(error, ForgeError | UsageError) and str(error).strip():
        return redact_text(str(error))
    if isinstance(error, KeyboardInterrupt):
        return stopping.reason(error)
    return redact_text(describe(error))


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    for handler in logging.getLogger().handlers:  # what any library logs, too (the SDKs' debug logs)
        handler.addFilter(RedactingFilter())
    logging.getLogger("forge_ml").setLevel(logging.DEBUG if verbose else logging.INFO)
    for noisy in ("alembic", "urllib3", "httpx", "filelock"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # MLflow and Optuna set their own loggers' level when imported (later, lazily), over any set here:
    # MLflow reads it from this variable; Optuna's is set where forge-ml imports it (tuning/searchers.py)
    if not verbose:
        os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")


def _run(command: Command, ctx: Context) -> tuple[int, BaseException | None]:
    try:
        return command.run(ctx), None
    except ForgeError as exc:
        console.print(f"[red]error:[/] {_message(exc)}", highlight=False, soft_wrap=True)
        return exc.exit_code, exc
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM/SIGHUP (forge_ml/stopping.py)
        console.print(
            f"[yellow]{stopping.reason(exc)}[/]: runs ended KILLED, state saved; run again to resume"
        )
        return stopping.exit_code(exc), exc
    except Exception as exc:
        log.debug("unexpected failure", exc_info=True)
        console.print(
            f"[red]error:[/] {_message(exc)} (run with -v for the traceback)", highlight=False, soft_wrap=True
        )
        return error_exit_code(RuntimeFault()), exc


def _command_named(argv: list[str], commands: list[Command]) -> Command | None:
    names = {c.name: c for c in commands}
    return next((names[a] for a in argv if a in names), None)


def _parse(commands: list[Command], argv: list[str], json_mode: bool):
    """Parse `argv`; a usage error is exit 1 (an envelope with `--json`), `--help` exits 0 (help on stderr with `--json`)."""
    stdout = sys.stdout
    if json_mode:
        sys.stdout = sys.stderr  # help and version text are for people
    try:
        return _parser(commands).parse_known_args(argv), None
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None, (1, exc)
    except SystemExit as exc:  # --help, --version
        return None, (exc.code if isinstance(exc.code, int) else 0, None)
    finally:
        sys.stdout = stdout


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    commands = all_commands()
    json_mode = "--json" in argv
    parsed, stopped = _parse(commands, argv, json_mode)
    if stopped is not None:
        code, error = stopped
        if json_mode:
            named = _command_named(argv, commands)
            name, keys = (named.name, named.keys) if named else (None, ())
            print(json.dumps(envelope(name, keys, None, code, error), default=str))
        return code
    args, extra = parsed
    stopping.install()
    _setup_logging(args.verbose)
    for name, value in QUIET_ENV.items():  # progress bars of libraries clutter the command's own output
        os.environ.setdefault(name, value)
    warnings.filterwarnings("ignore", **PEFT_ALIAS_WARNING)
    command = next(c for c in commands if c.name == args.command)
    ctx = Context(args, extra, json=args.json)
    set_quiet(args.json)
    if not args.json:
        return _run(command, ctx)[0]
    stdout = sys.stdout
    sys.stdout = (
        sys.stderr
    )  # stdout carries the envelope only: tables, Hydra's job log, library prints go to stderr
    results.file = sys.stderr
    try:
        code, error = _run(command, ctx)
    finally:
        sys.stdout = stdout
    stdout.write(json.dumps(envelope(command.name, command.keys, ctx, code, error), default=str) + "\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
