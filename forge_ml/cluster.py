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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forge_ml.errors import ConfigError, RuntimeFault

UPLOAD_EXCLUDES = ["output/", "mlflow.db", "mlartifacts/", "mlruns/", ".git/", "__pycache__/", "*.pyc"]
TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")
DEFAULT_DASHBOARD = "http://127.0.0.1:8265"
# Where Ray's own clients look for a cluster, in Ray's order. Ray's JobSubmissionClient lets them
# override the address it is given; forge-ml reads them itself, after --address and tune.address.
ADDRESS_VARIABLES = ("RAY_API_SERVER_ADDRESS", "RAY_ADDRESS")
# A stopped job (`ray job stop`, the dashboard, Ctrl-C at `submit`) gets SIGTERM, then SIGKILL once
# RAY_JOB_STOP_WAIT_TIME_S has passed: 3 s by Ray's default, less than a round needs to stop its
# trials and end its runs KILLED. Ray's job supervisor reads the variable from the job's env_vars.
STOP_GRACE_S = 60
STOPPED_EXIT = 143  # a stopped job's command was sent SIGTERM; Ray records no exit code for it


@dataclass(frozen=True)
class DriverResources:
    """What the job's driver (the forge-ml command itself) asks of the node it runs on. Ray places it
    on a node that has them: `gpus` > 0 for a command that trains or evaluates in the driver (`train`,
    `eval`, the flywheel's gold evaluation) on a cluster whose head has no GPU."""

    cpus: float | None = None
    gpus: float | None = None

    def submit_kwargs(self) -> dict[str, float]:
        kwargs = {"entrypoint_num_cpus": self.cpus, "entrypoint_num_gpus": self.gpus}
        return {k: v for k, v in kwargs.items() if v is not None}


@dataclass
class JobOutcome:
    job_id: str
    status: str
    exit_code: int
    message: str


def dashboard_address(given: str | None, configured: str | None) -> str:
    """Return the Jobs API address, an http(s) URL: `--address`, else `tune.address` unless it is
    `auto`, else RAY_API_SERVER_ADDRESS or RAY_ADDRESS, else the local dashboard. A wrong one is
    named by where it came from."""
    if given:
        address, source = given, "--address"
    elif configured not in (None, "", "auto"):
        address, source = configured, "tune.address"
    elif found := next((name for name in ADDRESS_VARIABLES if os.environ.get(name)), None):
        address, source = os.environ[found], found
    else:
        return DEFAULT_DASHBOARD
    if address.startswith(("http://", "https://")):
        return address
    if "://" not in address:  # head:6379, what `ray start --head` prints for ray.init and workers
        why = "a Ray head's GCS address (what ray.init and workers take), not its dashboard"
    else:
        why = "not a dashboard address"
    raise ConfigError(
        f"{source}: {address!r} is {why}; jobs go to the Ray dashboard's URL, by default on port 8265, "
        "e.g. --address http://head-node:8265"
    )


NO_AGENT = "No available agent to submit job"  # Ray's answer while the head's job agent starts
AGENT_WAIT_S, AGENT_RETRY_S = 90.0, 3.0  # how long a fresh cluster's agent is waited for, and how often


def submit(
    address: str,
    project_root: Path,
    argv: list[str],
    *,
    remote_project: str | None = None,
    forward: list[str] | None = None,
    settings: dict[str, str] | None = None,
    driver: DriverResources = DriverResources(),
    on_log: Callable[[str], None] = print,
    poll_s: float = 1.0,
) -> JobOutcome:
    """Submit `forge-ml <argv>` as a Ray Job, stream its logs through `on_log`, return how it ended.

    The job runs in an uploaded copy of `project_root`, or, with `remote_project`, in that directory
    on the cluster (shared storage), which keeps what the command writes to the project. `forward`
    names variables of this environment to pass on; `settings` are more variables, never secrets;
    `driver` what the command's own process needs (Ray waits for a node that has it).
    """
    from ray.exceptions import AuthenticationError
    from ray.job_submission import JobSubmissionClient

    env = {"RAY_JOB_STOP_WAIT_TIME_S": str(STOP_GRACE_S), **(settings or {})}
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
            with _variables_unset(ADDRESS_VARIABLES):  # the address decided above, not Ray's override
                client = JobSubmissionClient(address)
            job_id = client.submit_job(
                entrypoint=entrypoint,
                runtime_env=runtime_env,
                metadata={"forge.project": project_root.name},
                **driver.submit_kwargs(),
            )
            break
        except AuthenticationError as exc:
            raise ConfigError(
                f"Ray Jobs at {address}: the cluster wants a token ({str(exc).split('. ')[0]}). "
                "Set RAY_AUTH_MODE=token: Ray "
                "then sends the one in RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token (which a "
                "local Ray runtime writes, and which turns token authentication on for a later "
                "`ray start --head` on the same machine)"
            ) from None
        except (ConnectionError, RuntimeError) as exc:
            # A head node that has just started has no job agent yet: Ray says so and asks to retry.
            if NO_AGENT in str(exc) and time.monotonic() < deadline:
                on_log(f"the cluster's job agent is not up yet; trying again in {AGENT_RETRY_S:g}s\n")
                time.sleep(AGENT_RETRY_S)
                continue
            raise RuntimeFault(f"Ray Jobs at {address}: cannot submit ({exc})") from exc
    on_log(f"submitted {job_id} to {address}: {entrypoint}\n")
    follower = _LogFollower(client, job_id, on_log)
    try:
        info = follower.until_done(poll_s)
    except KeyboardInterrupt:
        # Ray sends the job's driver SIGTERM, and forge-ml there ends its runs as KILLED and saves its
        # state: show that, for as long as the job takes to stop (a second Ctrl-C leaves at once).
        on_log(f"stopping {job_id} on the cluster\n")
        client.stop_job(job_id)
        if str(client.get_job_info(job_id).status) == "PENDING":
            # Ray hands the stop to the job's supervisor, which waits for the same node as the driver.
            on_log(
                f"{job_id} had not started. Ray ends it when a node can take it (its command is stopped "
                "at once) or at the head's job start timeout (RAY_JOB_START_TIMEOUT_SECONDS, 900 s by "
                "default); `ray job list` shows it until then\n"
            )
            raise
        follower.until_done(poll_s, timeout_s=STOP_WAIT_S)
        raise
    code = info.driver_exit_code
    if code is None:
        code = {"SUCCEEDED": 0, "STOPPED": STOPPED_EXIT}.get(str(info.status), 2)
    return JobOutcome(job_id, str(info.status), int(code), info.message or "")


@contextmanager
def _variables_unset(names: tuple[str, ...]) -> Iterator[None]:
    saved = {name: os.environ.pop(name) for name in names if name in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


STOP_WAIT_S = STOP_GRACE_S + 15.0  # how long a stopped job's last lines are waited for


@dataclass
class _LogFollower:
    """Streams a job's log as it grows."""

    client: Any
    job_id: str
    on_log: Callable[[str], None]
    shown: int = 0
    pending: str | None = None  # the last reason Ray gave for a job that has not started

    def flush(self) -> None:
        logs = self.client.get_job_logs(self.job_id)
        if len(logs) > self.shown:
            self.on_log(logs[self.shown :])
            self.shown = len(logs)

    def until_done(self, poll_s: float, timeout_s: float | None = None) -> Any:
        """Follow the log until the job ends (or `timeout_s` passes); return the job's last info."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            self.flush()
            info = self.client.get_job_info(self.job_id)
            if str(info.status) == "PENDING" and info.message and info.message != self.pending:
                self.pending = info.message  # e.g. waiting for a node with the driver's GPUs: said once
                self.on_log(f"{self.job_id} is pending: {info.message}\n")
            if str(info.status) in TERMINAL or (deadline is not None and time.monotonic() > deadline):
                self.flush()
                return info
            time.sleep(poll_s)
