"""Ray Jobs: run a forge-ml command on a Ray cluster, with the project directory as its working dir.

The job's entrypoint is `forge-ml -p . <command> ...` in a copy of the project that Ray uploads
(generated state such as output/, mlflow.db and mlartifacts/ stays behind), or `forge-ml -p PATH`
for a project directory the cluster already sees on shared storage (what a flywheel wants: its
canonical.jsonl, forge.yaml and output/ then persist between jobs). The cluster's own
environment supplies credentials (MLflow, Anthropic, Hugging Face); nothing secret is sent with
the job unless `forward` names it. With RAY_AUTH_MODE=token and RAY_AUTH_TOKEN set, the client
authenticates to a token-protected cluster.
"""

from __future__ import annotations

import os
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from forge_ml.errors import ConfigError, RuntimeFault

UPLOAD_EXCLUDES = ["output/", "mlflow.db", "mlartifacts/", "mlruns/", ".git/", "__pycache__/", "*.pyc"]
TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")
DEFAULT_DASHBOARD = "http://127.0.0.1:8265"


@dataclass
class JobOutcome:
    job_id: str
    status: str
    exit_code: int
    message: str


def dashboard_address(address: str | None) -> str:
    """Return the Jobs API address: an http(s) URL; `auto`/None use RAY_ADDRESS, else the local dashboard."""
    if address in (None, "", "auto"):
        address = os.environ.get("RAY_ADDRESS") or DEFAULT_DASHBOARD
    if not address.startswith(("http://", "https://")):
        raise ConfigError(
            f"tune.address: {address!r} is not a dashboard address; jobs go to the Ray dashboard, "
            "e.g. tune.address=http://head-node:8265"
        )
    return address


NO_AGENT = "No available agent to submit job"  # Ray's answer while the head's job agent starts
AGENT_WAIT_S, AGENT_RETRY_S = 90.0, 3.0  # how long a fresh cluster's agent is waited for, and how often


def submit(
    address: str,
    project_root: Path,
    argv: list[str],
    *,
    remote_project: str | None = None,
    forward: list[str] | None = None,
    on_log: Callable[[str], None] = print,
    poll_s: float = 1.0,
) -> JobOutcome:
    """Submit `forge-ml <argv>` as a Ray Job, stream its logs through `on_log`, return how it ended.

    The job runs in an uploaded copy of `project_root`, or, with `remote_project`, in that directory
    on the cluster (shared storage), which keeps what the command writes to the project.
    """
    from ray.job_submission import JobSubmissionClient

    env = {}
    for name in forward or []:
        if name not in os.environ:
            raise ConfigError(f"--env {name}: not set in this environment")
        env[name] = os.environ[name]
    entrypoint = shlex.join(["forge-ml", "-p", remote_project or ".", *argv])
    runtime_env: dict = {"env_vars": env}
    if remote_project is None:
        runtime_env |= {"working_dir": str(project_root), "excludes": UPLOAD_EXCLUDES}
    deadline = time.monotonic() + AGENT_WAIT_S
    while True:
        try:
            client = JobSubmissionClient(address)
            job_id = client.submit_job(
                entrypoint=entrypoint,
                runtime_env=runtime_env,
                metadata={"forge.project": project_root.name},
            )
            break
        except (ConnectionError, RuntimeError) as exc:
            # A head node that has just started has no job agent yet: Ray says so and asks to retry.
            if NO_AGENT in str(exc) and time.monotonic() < deadline:
                on_log(f"the cluster's job agent is not up yet; trying again in {AGENT_RETRY_S:g}s\n")
                time.sleep(AGENT_RETRY_S)
                continue
            raise RuntimeFault(f"Ray Jobs at {address}: cannot submit ({exc})") from exc
    on_log(f"submitted {job_id} to {address}: {entrypoint}\n")
    shown = 0
    try:
        while True:
            logs = client.get_job_logs(job_id)
            if len(logs) > shown:
                on_log(logs[shown:])
                shown = len(logs)
            info = client.get_job_info(job_id)
            if str(info.status) in TERMINAL:
                break
            time.sleep(poll_s)
    except KeyboardInterrupt:
        client.stop_job(job_id)
        raise
    logs = client.get_job_logs(job_id)
    if len(logs) > shown:
        on_log(logs[shown:])
    code = info.driver_exit_code
    if code is None:
        code = 0 if str(info.status) == "SUCCEEDED" else 2
    return JobOutcome(job_id, str(info.status), int(code), info.message or "")
