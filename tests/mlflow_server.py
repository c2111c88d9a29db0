"""A real `mlflow server` on loopback for tests: a sqlite store and served artifacts in a temp dir.

`start_mlflow_server` launches it without waiting (it takes 15-30 s to boot on two busy cores, so
callers start it early and do other work meanwhile); `wait_for(lambda: server_up(uri), ...)` waits
for it and `stop` ends it. `log_metrics_child` is the writer process of the concurrency tests.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

BIN = Path(sys.executable).parent


def free_port() -> int:
    """A loopback port that nothing listens on (at the time of asking)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(check, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except Exception:  # not up yet
            pass
        time.sleep(0.5)
    raise AssertionError(f"{what} did not come up within {timeout:.0f}s")


def start_mlflow_server(root: Path, port: int, env: dict | None = None, workers: int = 1) -> subprocess.Popen:
    """Start `mlflow server` on 127.0.0.1:`port` with its store and artifacts under `root`; don't wait.

    Without MLflow's job runner (a huey consumer for its GenAI jobs, which forge-ml never submits), as
    `forge-ml ui` and the compose file run it.
    """
    env = {**(os.environ if env is None else env), "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    return subprocess.Popen(
        [str(BIN / "mlflow"), "server", "--backend-store-uri", f"sqlite:///{root / 'server.db'}",
         "--artifacts-destination", str(root / "server-artifacts"), "--serve-artifacts",
         "--host", "127.0.0.1", "--port", str(port), "--workers", str(workers)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def server_up(uri: str) -> bool:
    return urllib.request.urlopen(f"{uri}/health", timeout=2).status == 200


def stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=30)


def log_metrics_child(uri: str, run_id: str, keys: list[str], steps: list[int], start: Any) -> None:
    """A writer process: log `value_of(key, step)` for every key at each step through forge-ml's TrackedRun.

    One `log_metrics` call per step, as training does; `start` (a multiprocessing Barrier) lines
    the writers up so that they hit the server together.
    """
    from mlflow import MlflowClient

    from forge_ml.tracking import TrackedRun

    run = TrackedRun(MlflowClient(tracking_uri=uri), run_id)
    start.wait(timeout=60)
    for step in steps:
        run.log_metrics({key: value_of(key, step) for key in keys}, step=step)


def value_of(key: str, step: int) -> float:
    """The value a writer logs for (key, step): distinct per key and step, exact in float64."""
    return step + (sum(key.encode()) % 997) / 1024
