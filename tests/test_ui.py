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
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
