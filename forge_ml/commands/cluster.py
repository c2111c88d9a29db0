"""`forge-ml submit`: run another forge-ml command as a Ray Job on a cluster."""

from __future__ import annotations

import argparse

from forge_ml.commands import Command, Context
from forge_ml.console import console
from forge_ml.errors import ConfigError


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--address", help="Ray dashboard, e.g. http://head:8265 (default: tune.address, RAY_ADDRESS)"
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
    p.add_argument(
        "job", nargs=argparse.REMAINDER, help="the forge-ml command to run, e.g. flywheel tune=cluster"
    )


def run_submit(ctx: Context) -> int:
    import sys

    from forge_ml.cluster import dashboard_address, submit
    from forge_ml.search import split_sweep_overrides

    job = [*ctx.args.job, *ctx.extra]
    if not job or job[0].startswith("-"):
        raise ConfigError("submit: name the command to run, e.g. `forge-ml submit flywheel tune=cluster`")
    _, fixed = split_sweep_overrides([a for a in job[1:] if "=" in a and not a.startswith("-")])
    cfg = ctx.compose(fixed)  # validated here, before anything is sent (sweeps are checked by the job)
    address = dashboard_address(ctx.args.address or cfg.tune.address)
    outcome = submit(
        address,
        ctx.project().root,
        job,
        remote_project=ctx.args.remote_project,
        forward=ctx.args.env,
        on_log=lambda text: sys.stderr.write(text),
    )
    ctx.report(job_id=outcome.job_id, status=outcome.status, job_exit_code=outcome.exit_code, address=address)
    console.print(f"job {outcome.job_id}: {outcome.status} (exit {outcome.exit_code})", highlight=False)
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
