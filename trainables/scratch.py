"""A trial's scratch directory on its node, and the sweep of those whose process is gone.

A trial writes its trainer checkpoints (optimizer state included) and, on a cluster, its copy of a
shared base into a scratch directory. When Ray stops a trial and no other trial takes its actor,
it ends the actor without waiting for the trial's thread to unwind (Ray Tune's
`FunctionTrainable.cleanup` finishes the session with `timeout=0`), so the thread never reaches
its cleanup and the scratch stayed in the temp directory: one per trial ASHA stopped at the end of a
round, megabytes for the tiny model and far more for a real base.

So each scratch carries the pid of the process that owns it (`forge-trial-<pid>-<random>`). A trial
starting on a node, and the driver when a round's Ray runtime is down (once that round's trial
processes on its machine have exited), delete those whose process no longer exists. Directories of live processes, of other users, or not named this
way are left alone.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from forge_ml.fileio import pid_alive

PREFIX = "forge-trial-"


@contextmanager
def trial_scratch() -> Iterator[Path]:
    """A scratch directory for this trial, deleted when it ends (and by the next sweep if it cannot)."""
    sweep_stale_scratch()
    path = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def sweep_stale_scratch(
    root: str | Path | None = None, wait_for: Iterable[int] = (), timeout_s: float = 10.0
) -> list[Path]:
    """Delete the trial scratch directories under `root` (default: the temp directory) whose owning
    process is gone; return them. The processes `wait_for` (trials of a round that just ended, still
    exiting) are given up to `timeout_s` to go first."""
    deadline = time.monotonic() + timeout_s
    pending = set(wait_for)
    while pending and time.monotonic() < deadline:
        pending = {pid for pid in pending if pid_alive(pid)}
        if pending:
            time.sleep(0.1)
    removed = []
    for path in Path(root or tempfile.gettempdir()).glob(f"{PREFIX}*-*"):
        owner = path.name[len(PREFIX) :].split("-", 1)[0]
        if owner.isdigit() and path.is_dir() and not pid_alive(int(owner)):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed
