"""A trial's scratch directory names the process that owns it; what a dead process left is swept.

Seen on the drone-router flywheel (2 rounds, two trials at a time): the two trials ASHA stopped
last in each round left their scratch behind (trainer checkpoints with optimizer state), because Ray
ended their actors without letting the trial's thread unwind. Real processes here: a child that
made a scratch and was killed before it could clean up.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from trainables.scratch import PREFIX, sweep_stale_scratch, trial_scratch

HOLD_A_SCRATCH = """
import sys, time
from trainables.scratch import trial_scratch
with trial_scratch() as path:
    (path / "checkpoint").mkdir()
    (path / "checkpoint" / "optimizer.pt").write_bytes(b"x" * 1024)
    print(path, flush=True)
    time.sleep(600)
"""


def test_a_killed_trials_scratch_is_swept_and_a_live_ones_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONPATH": str(Path(__file__).parents[1])}
    holders = [
        subprocess.Popen([sys.executable, "-c", HOLD_A_SCRATCH], env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    try:
        killed, alive = (Path(h.stdout.readline().strip()) for h in holders)
        assert killed.name.startswith(f"{PREFIX}{holders[0].pid}-") and killed.parent == tmp_path
        holders[0].send_signal(signal.SIGKILL)  # as Ray ends an actor: no cleanup runs
        holders[0].wait(timeout=30)
        assert (killed / "checkpoint" / "optimizer.pt").is_file()
        others = [tmp_path / "forge-trial-abc123", tmp_path / "unrelated-dir"]  # not named by a pid
        for path in others:
            path.mkdir()

        with trial_scratch() as mine:  # a trial starting on the node sweeps first
            assert mine.is_dir() and mine.name.startswith(f"{PREFIX}{os.getpid()}-")
            assert not killed.exists()
            assert alive.is_dir() and all(p.is_dir() for p in others)
            assert sweep_stale_scratch() == []  # its own scratch: this process is alive
        assert not mine.exists()  # and deletes its own when it ends
    finally:
        for holder in holders:
            holder.kill()
            holder.wait(timeout=30)
    assert sweep_stale_scratch(tmp_path) == [alive]  # the driver's sweep once the runtime is down
    assert sorted(p.name for p in tmp_path.iterdir()) == ["forge-trial-abc123", "unrelated-dir"]
