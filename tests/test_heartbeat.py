"""The flywheel's heartbeat: it beats while a round runs, says where the round is, and `status`
tells a live flywheel from one whose process is gone (this machine) or silent (another machine).

The module's own behaviour is checked here on a real file and real processes; the flywheel's
use of it in test_loop_control.py (a running flywheel seen through `status`) and
test_resilience.py (a SIGKILLed one).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import pytest

from forge_ml.heartbeat import Heartbeat, TrialCounts, liveness, read_heartbeat
from forge_ml.jobs.status import heartbeat_line


def dead_pid() -> int:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    return gone.pid


def test_a_running_round_beats_until_the_flywheel_ends(bare_project):
    with Heartbeat(bare_project, interval_s=0.2) as beat:
        assert read_heartbeat(bare_project) is None  # nothing begun: nothing written
        beat.beat(3, "running", stage="planned")
        beat.step("tune")
        beat.trials(TrialCounts(running=2, finished=1, stopped=1, failed=0, total=4))
        first = read_heartbeat(bare_project)
        time.sleep(0.7)
        later = read_heartbeat(bare_project)
        assert later["timestamp"] - first["timestamp"] >= 0.4  # the thread rewrote it, twice or more
        assert {k: later[k] for k in ("round", "status", "stage", "step", "trials")} == {
            "round": 3,
            "status": "running",
            "stage": "planned",
            "step": "tune",
            "trials": {"running": 2, "finished": 1, "stopped": 1, "failed": 0, "total": 4},
        }
        assert later["pid"] > 0 and later["host"] == socket.gethostname() and later["interval_s"] == 0.2
        assert liveness(later) == "alive"

        beat.step("gate")  # the trial counts were the tune step's
        assert "trials" not in read_heartbeat(bare_project)
        beat.beat(3, "completed", stop_reason="3 of 3 rounds done")
        done = read_heartbeat(bare_project)
        time.sleep(0.5)
        assert read_heartbeat(bare_project) == done  # only a running flywheel beats
    assert beat._thread is not None and not beat._thread.is_alive()


def test_liveness_by_pid_on_this_machine_and_by_age_from_another():
    now = time.time()
    here = {"status": "running", "pid": dead_pid(), "host": socket.gethostname(), "interval_s": 30.0}
    assert liveness({**here, "timestamp": now}) == "gone"  # a fresh beat does not revive a dead pid
    elsewhere = {**here, "host": "gpu-node-7"}
    assert liveness({**elsewhere, "timestamp": now - 89}, now) == "alive"
    assert liveness({**elsewhere, "timestamp": now - 91}, now) == "silent"  # three intervals missed
    assert liveness({"status": "running", "timestamp": now}) == "unknown"  # written by an older forge-ml


@pytest.mark.parametrize(
    ("beat", "alive", "expected"),
    [
        (
            {
                "round": 2,
                "status": "running",
                "step": "tune",
                "pid": 41,
                "host": "h",
                "interval_s": 30,
                "trials": {"running": 2, "finished": 3, "stopped": 1, "failed": 0, "total": 8},
            },
            "alive",
            "running: round 2, tune (2 running, 3 finished, 1 stopped early, 0 failed of 8); last beat ",
        ),
        (
            {"round": 2, "status": "running", "step": "augment", "pid": 41, "host": "h", "interval_s": 30},
            "gone",
            "stopped: pid 41 is gone (last beat ",
        ),
        (
            {"round": 4, "status": "running", "step": "gate", "pid": 41, "host": "node-3", "interval_s": 10},
            "silent",
            "(round 4, gate; host node-3 beats every 10 s): stopped, or this machine no longer sees its files",
        ),
        (
            {"round": 3, "status": "completed", "stop_reason": "3 of 3 rounds done"},
            None,
            ": 3 of 3 rounds done",
        ),
        ({"round": 1, "status": "error", "error": "ValueError: boom"}, None, "(round 1) — ValueError: boom"),
        (
            {"round": 2, "status": "error", "step": "gate", "error": "RuntimeFault: no GPU"},
            None,
            "(round 2, gate) — RuntimeFault: no GPU",
        ),
        (
            {"round": 4, "status": "stopped", "step": "tune", "reason": "stopped by SIGTERM"},
            None,
            "stopped by SIGTERM at ",
        ),
    ],
)
def test_status_says_where_the_flywheel_is_or_that_it_stopped(beat, alive, expected):
    line = heartbeat_line({"timestamp": time.time(), **beat}, alive)
    assert expected in line
    if alive == "gone":
        assert "round 2, augment); `forge-ml flywheel` resumes the round" in line
    if beat["status"] == "stopped":
        assert line.endswith(" (round 4, tune); `forge-ml flywheel` resumes the round"), line


def test_a_heartbeat_file_that_is_not_json_reads_as_none(bare_project):
    path = bare_project.output / "flywheel_heartbeat.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"round": 1, "sta')
    assert read_heartbeat(bare_project) is None
    path.write_text(json.dumps([1, 2]))
    assert read_heartbeat(bare_project) is None
