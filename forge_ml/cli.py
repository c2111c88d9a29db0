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

from forge_ml import __version__
from forge_ml.commands import Command, Context, all_commands
from forge_ml.console import console, results
from forge_ml.errors import ForgeError, RuntimeFault, error_exit_code
from forge_ml.secrets import redact_text

log = logging.getLogger("forge_ml")
QUIET_ENV = {
    "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "TRANSFORMERS_VERBOSITY": "error",
    "TOKENIZERS_PARALLELISM": "false",
}
COMMON_KEYS = ("command", "success", "exit_code", "run_id", "config_hash")


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad option or command is bad input: exit 1 (argparse's own 2 means a runtime fault here)."""

    def error(self, message: str):  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(1, f"{self.prog}: error: {message}\n")


def _parser(commands: list[Command]) -> argparse.ArgumentParser:
    parser = _Parser(prog="forge-ml", description="Self-improving fine-tuning of small models.")
    parser.add_argument("--version", action="version", version=f"forge-ml {__version__}")
    parser.add_argument(
        "-p", "--project", help="project directory (default: the current directory or a parent)"
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument(
        "--json", action="store_true", help="print one JSON envelope on stdout (for scripts and CI)"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in commands:
        command.configure(sub.add_parser(command.name, help=command.help))
    return parser


def envelope(command: Command, ctx: Context, code: int, error: BaseException | None) -> dict[str, Any]:
    """The JSON envelope of one invocation: the common keys, the command's keys (null when unknown), error."""
    data: dict[str, Any] = {
        "command": command.name,
        "success": code == 0,
        "exit_code": code,
        "run_id": ctx.run_id,
        "config_hash": ctx.config_hash,
    }
    data |= {key: ctx.fields.get(key) for key in command.keys}
    data["error"] = (
        None if error is None else {"class": type(error).__name__, "message": redact_text(str(error))}
    )
    return data


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("forge_ml").setLevel(logging.DEBUG if verbose else logging.INFO)
    for noisy in ("mlflow", "alembic", "urllib3", "httpx", "filelock", "optuna"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _run(command: Command, ctx: Context) -> tuple[int, BaseException | None]:
    try:
        return command.run(ctx), None
    except ForgeError as exc:
        console.print(f"[red]error:[/] {exc}", highlight=False, soft_wrap=True)
        return exc.exit_code, exc
    except KeyboardInterrupt as exc:
        console.print("[yellow]interrupted[/]")
        return 130, exc
    except Exception as exc:
        log.debug("unexpected failure", exc_info=True)
        fault = RuntimeFault(f"{type(exc).__name__}: {exc}")
        console.print(
            f"[red]error:[/] {fault} (run with -v for the traceback)", highlight=False, soft_wrap=True
        )
        return error_exit_code(fault), exc


def main(argv: list[str] | None = None) -> int:
    commands = all_commands()
    args, extra = _parser(commands).parse_known_args(argv)
    _setup_logging(args.verbose)
    for name, value in QUIET_ENV.items():  # progress bars of libraries clutter the command's own output
        os.environ.setdefault(name, value)
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
    command = next(c for c in commands if c.name == args.command)
    ctx = Context(args, extra, json=args.json)
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
    stdout.write(json.dumps(envelope(command, ctx, code, error), default=str) + "\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
