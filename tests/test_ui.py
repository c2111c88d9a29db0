"""`forge-ml ui` serves the MLflow UI on the project's store."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_ui_serves_the_project_store(small_project):
    port = free_port()
    exe = Path(sys.executable).with_name("forge-ml")
    proc = subprocess.Popen(
        [str(exe), "ui", "--port", str(port)],
        cwd=small_project.root,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 90
        status = None
        while time.monotonic() < deadline and status != 200:
            assert proc.poll() is None, proc.stdout.read().decode()[-2000:]
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as response:
                    status = response.status
            except OSError:
                time.sleep(0.5)
        assert status == 200
        assert (small_project.root / "mlflow.db").exists()
        # One person's UI: MLflow's CLI and one uvicorn server, not four workers and a job runner.
        assert len(in_session(proc.pid)) == 2, in_session(proc.pid)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    said = proc.stdout.read().decode()
    assert "Warning" not in said, said  # the web stack's deprecation notices are not the user's
    assert "Uvicorn running on" in said and "GET /health" not in said, said  # no line per request


def in_session(sid: int) -> list[str]:
    """The command lines of the live processes in session `sid`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[3]) == sid and fields[0] != "Z":
                found.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()[:120])
        except (OSError, ValueError, IndexError):
            continue
    return found


def test_ui_on_a_port_in_use_exits_2_saying_so_instead_of_pointing_at_it(small_project):
    """MLflow's server logs a failed bind and exits 0: forge-ml must not name that address as the UI."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        exe = Path(sys.executable).with_name("forge-ml")
        result = subprocess.run(
            [str(exe), "ui", "--port", str(port)],
            cwd=small_project.root,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"http://127.0.0.1:{port} is taken" in result.stderr and "--port" in result.stderr
    assert "MLflow UI for" not in result.stdout and not (small_project.root / "mlflow.db").exists()
