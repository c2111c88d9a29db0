"""`forge-ml submit`: run another forge-ml command as a Ray Job on a cluster."""

from __future__ import annotations

import argparse
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from forge_ml.commands import Command, Context
from forge_ml.console import console
from forge_ml.errors import ConfigError

if TYPE_CHECKING:
    from forge_ml.cluster import DriverResources


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--address",
        help="Ray dashboard, e.g. http://head:8265 (default: tune.address, else RAY_API_SERVER_ADDRESS or "
        "RAY_ADDRESS, else http://127.0.0.1:8265)",
    )
    p.add_argument(
        "--remote-project",
        metavar="PATH",
        help="run in this project directory on the cluster's shared storage instead of uploading a copy",
    )
    p.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME",
        help="forward this environment variable to the job. Its VALUE is stored in the job's runtime_env, "
        "which anyone who can list the cluster's jobs (dashboard, jobs API) can read: for secrets, set them "
        "in the nodes' own environment instead",
    )
    for kind, example in (("cpus", "4"), ("gpus", "1")):
        p.add_argument(
            f"--entrypoint-num-{kind}",
            type=float,
            metavar="N",
            help=f"{kind.upper()[:-1]}s the command's own process needs, as `ray job submit` takes them (e.g. "
            f"{example}); Ray starts it on a node that has them"
            + (
                ": for train, eval or a flywheel (its gold evaluation) when the head has no GPU"
                if kind == "gpus"
                else ""
            ),
        )
    p.add_argument(
        "job", nargs=argparse.REMAINDER, help="the forge-ml command to run, e.g. flywheel tune=cluster"
    )


def _refuse_a_copy_that_keeps_nothing(uri: str, root: Path) -> None:
    """An uploaded copy is deleted with the job: only a tracking server keeps what the job records.

    A store on files (sqlite, file:, a database reached directly) would be written inside the copy, or
    would hold artifacts there (mlartifacts/, ./mlruns), and the job would not see the project's runs,
    registered versions or flywheel state either: it would run on an empty store and lose its results.
    """
    if uri.startswith(("http://", "https://", "databricks")):
        return
    raise ConfigError(
        f"submit: the job would run in an uploaded copy of {root}, which Ray deletes when the job ends, and "
        f"record to {uri} (tracking.uri): its runs, adapters, registry versions and dataset changes would be "
        "lost with the copy, and it would see none of this project's. Record to an MLflow server the cluster "
        "reaches (tracking=server, MLFLOW_TRACKING_URI=http://...), or run in the project itself on storage "
        "the cluster shares (--remote-project PATH)"
    )


# What a command changes in the project itself (not only in MLflow), by name.
PROJECT_WRITERS = {
    "flywheel": "dataset/canonical.jsonl, forge.yaml, its notes and its resumable state in output/",
    "generate": "dataset/canonical.jsonl",
    "patch": "dataset/canonical.jsonl",
    "augment": "dataset/canonical.jsonl",
    "clean": "dataset/canonical.jsonl",
    "audit": "dataset/canonical.jsonl (--fix)",
}


def _refuse_a_copy_of_a_project_writer(job: list[str], root: Path) -> None:
    """A command whose work is the project's own files would leave it in the copy Ray deletes."""
    command, args = job[0], job[1:]
    changes = PROJECT_WRITERS.get(command)
    if changes is None or "--dry-run" in args or (command == "audit" and "--fix" not in args):
        return
    raise ConfigError(
        f"submit: `forge-ml {command}` changes the project itself ({changes}); in an uploaded copy of "
        f"{root}, which Ray deletes when the job ends, those changes would be lost, and a flywheel could "
        "not resume. Run it in the project on storage the cluster shares (--remote-project PATH)"
    )


def _runs_rounds(job: list[str]) -> bool:
    """Whether `forge-ml <job>` runs rounds of Ray Tune trials."""
    command, args = job[0], job[1:]
    if command == "train":
        return any(a.replace(" ", "") == "hydra/sweeper=tune" for a in args)
    return command == "tune" or (command == "flywheel" and "--skip-train" not in args)


def _warn_of_a_private_runtime(job: list[str], address: str | None) -> None:
    """`tune.address` unset (tune=local) in a job: each round starts a Ray runtime of its own on the node
    that runs the command, and the cluster's other nodes (its GPUs) train nothing. Fine to try a job on
    one machine, and what a newcomer's first submit does; said, not refused."""
    if address or not _runs_rounds(job):
        return
    console.print(
        "[yellow]tune=local[/]: the job's rounds will start a Ray runtime of their own on the node that "
        "runs the command, and no other node of the cluster will train; add tune=cluster (or "
        "tune.address=auto) to place the trials across the cluster",
        highlight=False,
    )


def _driver_resources(args: argparse.Namespace) -> DriverResources:
    from forge_ml.cluster import DriverResources

    for kind in ("cpus", "gpus"):
        value = getattr(args, f"entrypoint_num_{kind}")
        if value is not None and not 0 <= value <= 1024:
            raise ConfigError(f"--entrypoint-num-{kind} {value:g}: must be between 0 and 1024")
    return DriverResources(cpus=args.entrypoint_num_cpus, gpus=args.entrypoint_num_gpus)


def run_submit(ctx: Context) -> int:
    import sys

    from forge_ml.cluster import dashboard_address, submit
    from forge_ml.search import split_sweep_overrides
    from forge_ml.tracking import tracking_uri

    job = [*ctx.args.job, *ctx.extra]
    if not job or job[0].startswith("-"):
        raise ConfigError("submit: name the command to run, e.g. `forge-ml submit flywheel tune=cluster`")
    _, fixed = split_sweep_overrides([a for a in job[1:] if "=" in a and not a.startswith("-")])
    cfg = ctx.compose(fixed)  # validated here, before anything is sent (sweeps are checked by the job)
    if ctx.args.remote_project is None:
        _refuse_a_copy_of_a_project_writer(job, ctx.project().root)
        _refuse_a_copy_that_keeps_nothing(tracking_uri(cfg, ctx.project()), ctx.project().root)
    elif not PurePosixPath(ctx.args.remote_project).is_absolute():
        raise ConfigError(
            f"--remote-project {ctx.args.remote_project}: give the project's absolute path on the cluster's "
            "shared storage; a relative one would be read from the job's own temporary directory"
        )
    address = dashboard_address(ctx.args.address, cfg.tune.address)
    _warn_of_a_private_runtime(job, cfg.tune.address)
    outcome = submit(
        address,
        ctx.project().root,
        job,
        remote_project=ctx.args.remote_project,
        forward=ctx.args.env,
        # The job's tables and progress stream back to this terminal: drawn at its width, not at 80.
        settings={"COLUMNS": str(console.width)} if console.is_terminal else None,
        driver=_driver_resources(ctx.args),
        on_log=lambda text: sys.stderr.write(text),
    )
    ctx.report(job_id=outcome.job_id, status=outcome.status, job_exit_code=outcome.exit_code, address=address)
    console.print(f"job {outcome.job_id}: {outcome.status} (exit {outcome.exit_code})", highlight=False)
    if outcome.status == "FAILED" and outcome.message:  # e.g. it never started: Ray says why
        console.print(f"  Ray: {outcome.message}", highlight=False)
    if outcome.status == "STOPPED":
        console.print(
            "  stopped on the cluster (`ray job stop`, the dashboard): its command was sent SIGTERM "
            "(a flywheel resumes its round when submitted again)",
            highlight=False,
        )
    return outcome.exit_code


COMMANDS = [
    Command(
        "submit",
        "run a forge-ml command as a Ray Job on a cluster (project uploaded as its working dir)",
        _args,
        run_submit,
        ("job_id", "status", "job_exit_code", "address"),
    )
]
