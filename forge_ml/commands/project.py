"""Project commands: init, status, ui (`clean` is with the data commands)."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

from forge_ml.commands import Command, Context, overrides_argument
from forge_ml.console import console, results, shell_path
from forge_ml.errors import EXIT_OK, InputError, RuntimeFault
from forge_ml.project import init_project, packaged_examples


def _init_args(p) -> None:
    p.add_argument("name", help="directory to create (its name becomes the project name)")
    p.add_argument("--example", help=f"copy a ready example ({', '.join(packaged_examples()) or 'none'})")
    p.add_argument("--dir", help="the parent directory to create it in (default: -p, else the current one)")
    p.add_argument(
        "--no-git", action="store_true", help="do not make it a git repository (rounds then make no commits)"
    )


def run_init(ctx: Context) -> int:
    from forge_ml.journal import git_init

    parent = Path(ctx.args.dir or ctx.args.project or Path.cwd())
    project = init_project(parent / ctx.args.name, example=ctx.args.example)
    git = "not a git repository (--no-git)" if ctx.args.no_git else git_init(project.root)
    ctx.report(project=str(project.root), git=git)
    console.print(f"[green]created[/] {project.root}: {git}", highlight=False, soft_wrap=True)
    run = f"cd {shell_path(project.root)} && forge-ml flywheel"
    if ctx.args.example is None:  # a blank project: what to write before the first round
        run = (
            "describe the task and add examples, then "
            + run
            + "\n  mission.md           what goes in, what must come out (the planner and Claude read it)"
            "\n  system_prompt.md     the instruction the model is trained and served with"
            "\n  dataset/seed.jsonl   a few examples to train on; generator.py or Claude writes more"
            "\n  dataset/gold.jsonl   held-out examples every round is scored on, never trained on"
        )
    console.print(f"next: {run}", highlight=False, soft_wrap=True)
    return EXIT_OK


def run_status(ctx: Context) -> int:
    from forge_ml.jobs.status import status_summary, status_tables

    cfg = ctx.compose()
    project = ctx.project()
    summary = status_summary(cfg, project)
    ctx.report(**summary)
    results.print(f"[bold]{cfg.name}[/] — {project.root}")
    for table in status_tables(cfg, project, summary):
        results.print(table)
    return EXIT_OK


def _ui_args(p) -> None:
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=5000)
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        help="server processes (default 1: one person's UI; MLflow's own default, 4, is for a shared server)",
    )
    overrides_argument(p)


def run_ui(ctx: Context) -> int:
    from forge_ml.tracking import seed_sqlite_store, tracking_uri

    cfg = ctx.compose()
    uri = tracking_uri(cfg, ctx.project())
    if not uri.startswith(("sqlite:", "file:", "postgresql:", "mysql:")) and "://" in uri:
        console.print(f"the tracking server is already serving its UI: open {uri}")
        return EXIT_OK
    args = ctx.args
    _check_port_free(args.host, args.port)
    seed_sqlite_store(uri)
    console.print(f"MLflow UI for {uri} on http://{args.host}:{args.port} (Ctrl-C to stop)")
    argv = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri]
    # MLflow's job runner serves its GenAI jobs, which forge-ml never submits: a process less.
    os.environ.setdefault("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false")
    # Each server process warns, at import, of a deprecation in MLflow's own web stack: not the user's to fix.
    os.environ.setdefault("PYTHONWARNINGS", "ignore:starlette.middleware.wsgi is deprecated:UserWarning")
    argv += ["--host", args.host, "--port", str(args.port), "--workers", str(args.workers)]
    if not args.verbose:  # a line per request: the UI polls every few seconds while a page is open
        argv += ["--uvicorn-opts", "--no-access-log"]
    os.execv(sys.executable, argv)
    return EXIT_OK  # not reached


def _check_port_free(host: str, port: int) -> None:
    """Refuse a port something already listens on: MLflow's server would log the failed bind and
    exit 0, after forge-ml had named the address as the UI's."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise InputError(f"--host {host}: {exc.strerror}") from None
    family, _, _, _, address = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # as uvicorn binds: a connection of an earlier server in TIME_WAIT is no obstacle
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            raise RuntimeFault(
                f"http://{host}:{port} is taken ({exc.strerror}): another `forge-ml ui` or program listens "
                f"there; open it if it is this project's UI, or choose another port with --port"
            ) from None


COMMANDS = [
    Command("init", "create a project directory", _init_args, run_init, ("project", "git")),
    Command(
        "status",
        "datasets, champion, rounds and latest scores",
        overrides_argument,
        run_status,
        (
            "project",
            "datasets",
            "canonical_by_source",
            "champion",
            "rounds_done",
            "max_rounds",
            "last_round",
            "heartbeat",
            "liveness",
        ),
    ),
    Command("ui", "start the MLflow UI on the project's tracking store", _ui_args, run_ui),
]
