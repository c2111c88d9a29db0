"""SIGTERM (docker stop, ray job stop, an eviction) ends a command in order, at any stage.

Each command is the real `forge-ml` in its own process group; the suite waits for the cue a
failpoint prints (`FORGE_FAILPOINTS=<stage>=sleep:…`, forge_ml/faults.py) and sends SIGTERM.
Wanted: exit 143 within seconds, no MLflow run left RUNNING, the project lock released, and a
rerun that finishes the round as after a kill, with nothing counted twice.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import FAST, edit_config, run_cli
from flywheel_checks import assert_consistent, client_for, runs_of

from forge_ml.faults import ENV as FAILPOINTS

pytestmark = [pytest.mark.slow, pytest.mark.reliability]
ROUNDS = [*FAST, "planner=offline", "tune.num_samples=2", "planner.augment_n=20", "training.epochs=2"]
FORGE = str(Path(sys.executable).with_name("forge-ml"))
# (failpoint, what the flywheel is doing there)
STAGES = [
    ("flywheel.plan", "planning (plan made and written, stage not yet saved)"),
    ("flywheel.augment", "augmenting (canonical.jsonl grown, stage not yet saved)"),
    ("tune.checkpoint", "running trials (a checkpoint saved, Ray Tune's state saved)"),
    ("flywheel.gold_eval", "evaluating on gold (scored, nothing registered)"),
    ("flywheel.register", "registering (version registered, gate not applied)"),
    ("flywheel.record", "recording (the round's line written, state not cleared)"),
]


def start(args: list[str], failpoint: str | None = None, env: dict | None = None) -> subprocess.Popen:
    full_env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200", **(env or {})}
    full_env.pop("ANTHROPIC_API_KEY", None)
    full_env.pop(FAILPOINTS, None)
    if failpoint:
        full_env[FAILPOINTS] = f"{failpoint}=sleep:600"
    return subprocess.Popen(
        [FORGE, *args],
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def stop_at_cue(process: subprocess.Popen, cue: str, timeout: float = 600) -> tuple[int, float, str]:
    """Wait for `cue` on stderr, send SIGTERM; return (exit code, seconds from signal to exit, stderr)."""
    seen, deadline = [], time.monotonic() + timeout
    for line in process.stderr:
        seen.append(line)
        if cue in line or time.monotonic() > deadline:
            break
    assert cue in "".join(seen), "".join(seen)[-3000:]
    sent = time.monotonic()
    process.send_signal(signal.SIGTERM)
    _, rest = process.communicate(timeout=120)
    return process.returncode, time.monotonic() - sent, "".join(seen) + rest


def running(root: Path) -> list[str]:
    return [r.info.run_name for r in runs_of(root) if r.info.status == "RUNNING"]


def wait_for_a_running_run(root: Path, timeout: float = 300) -> None:
    """Poll the store's table directly: an MLflow client here would race the command's own schema migration."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with sqlite3.connect(f"file:{root / 'mlflow.db'}?mode=ro", uri=True) as db:
                if db.execute("select count(*) from runs where status = 'RUNNING'").fetchone()[0]:
                    return
        except sqlite3.Error:
            pass
        time.sleep(0.5)
    raise AssertionError("no run started")


@pytest.fixture
def project(small_project):
    edit_config(small_project, "planner", "bounds", "training.epochs", {"low": 1, "high": 2})
    return small_project


def test_sigterm_at_every_flywheel_stage_ends_in_order_and_the_rerun_completes(project, proof):
    root = project.root
    args = ["-p", str(root), "flywheel", "--rounds", "1", *ROUNDS]
    for failpoint, doing in STAGES:
        code, took, out = stop_at_cue(start(args, failpoint), f"failpoint {failpoint}: sleeping")
        assert code == 143, out[-3000:]
        left = running(root)
        assert left == [] and not (root / "output" / "flywheel.lock").exists(), (left, out[-3000:])
        assert "stopped by SIGTERM" in out and "Traceback" not in out
        # said as soon as the round is kept, before MLflow and Ray are tidied: a job stopped with its
        # nested Ray runtime (`ray job stop` signals every process of the job) may not live longer
        assert "round 1: stopped by SIGTERM; kept as it stood, `forge-ml flywheel` resumes it" in out, out[
            -3000:
        ]
        beat = json.loads((root / "output" / "flywheel_heartbeat.json").read_text())
        assert beat["status"] == "stopped" and beat["reason"] == "stopped by SIGTERM", beat
        killed = [r for r in runs_of(root) if r.info.status == "KILLED"]
        proof(
            "SIGTERM",
            f"`forge-ml flywheel` sent SIGTERM while {doing}",
            f"exit {code} {took:.1f}s after the signal; {len(left)} runs RUNNING, {len(killed)} KILLED so far; "
            "lock released",
        )
    finished = subprocess.run(
        [FORGE, *args], capture_output=True, text=True, timeout=900, env={**os.environ, "NO_COLOR": "1"}
    )
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert_consistent(root, 1)  # one round, one run per trial, one version
    client, _ = client_for(root)
    versions = client.search_model_versions(f"name = '{root.name}'")
    assert len(versions) == 1 and running(root) == []
    proof(
        "SIGTERM",
        f"the flywheel rerun after {len(STAGES)} SIGTERMs, one at each stage",
        f"exit 0; 1 round recorded, {len(versions)} registered version, no trial counted twice, 0 runs RUNNING",
    )


def test_sigterm_ends_a_train_run_killed_and_a_sigkilled_ones_is_closed_by_the_next_command(
    small_project, proof
):
    root = small_project.root
    train = ["-p", str(root), "train", *FAST, "training.epochs=30"]
    process = start(train)
    wait_for_a_running_run(root)
    time.sleep(3)
    sent = time.monotonic()
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=120)
    took = time.monotonic() - sent
    (run,) = runs_of(root)
    assert process.returncode == 143 and run.info.status == "KILLED", err[-3000:]
    assert run.data.tags["forge.error"] == "stopped by SIGTERM"
    proof(
        "SIGTERM",
        "`forge-ml train` sent SIGTERM while training",
        f"exit 143 {took:.1f}s after the signal; its run KILLED, tagged 'stopped by SIGTERM'",
    )

    killed = start(train)
    wait_for_a_running_run(root)
    os.killpg(killed.pid, signal.SIGKILL)
    killed.communicate(timeout=60)
    assert len(running(root)) == 1  # a SIGKILLed process cannot end its own run
    after = run_cli("-p", str(root), "generate", "--n", "2", env={"ANTHROPIC_API_KEY": ""})
    assert after.returncode == 0, after.stderr[-2000:]
    stale = [
        r
        for r in runs_of(root)
        if r.data.tags.get("forge.kind") != "generate" and r.info.run_id != run.info.run_id
    ]
    assert [r.info.status for r in stale] == ["KILLED"] and running(root) == []
    assert stale[0].data.tags["forge.error"].startswith("left RUNNING by a process that is gone (pid ")
    proof(
        "SIGTERM",
        "`forge-ml train` killed with SIGKILL (it cannot end its run), then `forge-ml generate`",
        "the next command's first run closed the dead process's run KILLED, naming its pid; 0 runs RUNNING",
    )


def test_a_second_signal_exits_at_once(tmp_path):
    script = (
        "import os, signal, time\n"
        "from forge_ml import stopping\n"
        "stopping.install()\n"
        "try:\n"
        "    print('ready', flush=True); time.sleep(60)\n"
        "except KeyboardInterrupt:\n"
        "    print('cleaning up', flush=True); time.sleep(60)  # a slow cleanup the second signal cuts short\n"
    )
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "ready"
    process.send_signal(signal.SIGTERM)
    assert process.stdout.readline().strip() == "cleaning up"
    sent = time.monotonic()
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=10) == 143 and time.monotonic() - sent < 5


def test_a_sigterm_while_waiting_on_ray_is_still_told_apart_from_ctrl_c():
    """A round's driver waits inside Ray's C++ core nearly all the time, and a signal that arrives
    there comes back as a plain KeyboardInterrupt (`ray._raylet.check_status`), not as `Stopped`:
    `forge-ml flywheel` stopped by `docker stop` during its trials exited 130, said 'interrupted'
    and left a heartbeat reading 'error — KeyboardInterrupt with no message'. A real local Ray
    runtime, a real task the driver waits on, a real SIGTERM."""
    script = (
        "import os, signal, threading, time, ray\n"
        "from forge_ml import stopping\n"
        "ray.init(address='local', num_cpus=1, include_dashboard=False, log_to_driver=False)\n"
        "stopping.install()\n"
        "@ray.remote\n"
        "def slow():\n"
        "    time.sleep(60)\n"
        "ref = slow.remote()\n"
        "threading.Timer(2.0, os.kill, (os.getpid(), signal.SIGTERM)).start()\n"
        "try:\n"
        "    ray.get(ref)\n"
        "except KeyboardInterrupt as exc:\n"
        "    print(type(exc).__name__, stopping.exit_code(exc), stopping.reason(exc), sep='|', flush=True)\n"
        "ray.shutdown()\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    kind, code, reason = done.stdout.strip().splitlines()[-1].split("|")
    assert kind == "KeyboardInterrupt"  # Ray's own, not forge-ml's Stopped: the case this is about
    assert (code, reason) == ("143", "stopped by SIGTERM")
