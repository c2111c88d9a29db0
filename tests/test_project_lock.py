"""The project lock under contention: racing starters over a dead owner's lock never both hold it."""

from __future__ import annotations

import itertools
import json
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from forge_ml.errors import InputError
from forge_ml.project import Project, ProjectLock

pytestmark = pytest.mark.reliability
RACES = 25
STARTERS = 6


def _starter(root: str, barrier, log: str) -> None:
    barrier.wait()
    try:
        with ProjectLock(Project(Path(root)), "generate") as lock:
            with open(log, "a") as fh:  # O_APPEND: one line per write, whole
                fh.write(
                    json.dumps({"pid": os.getpid(), "in": time.monotonic(), "recovered": lock.recovered})
                    + "\n"
                )
            time.sleep(0.05)
            with open(log, "a") as fh:
                fh.write(json.dumps({"pid": os.getpid(), "out": time.monotonic()}) + "\n")
    except InputError:
        pass


def _dead_pid() -> int:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    return gone.pid


def test_racing_starters_over_a_dead_owners_lock_never_both_hold_it(tmp_path, proof):
    import socket

    ctx = multiprocessing.get_context("fork")
    root, overlaps, winners = tmp_path / "proj", 0, []
    (root / "output").mkdir(parents=True)
    lock_file = root / "output" / "flywheel.lock"
    for race in range(RACES):
        lock_file.write_text(json.dumps({"pid": _dead_pid(), "host": socket.gethostname(), "since": 0}))
        log = tmp_path / f"race{race}.jsonl"
        barrier = ctx.Barrier(STARTERS)
        starters = [
            ctx.Process(target=_starter, args=(str(root), barrier, str(log))) for _ in range(STARTERS)
        ]
        for p in starters:
            p.start()
        for p in starters:
            p.join(30)
            assert p.exitcode == 0
        events = [json.loads(line) for line in log.read_text().splitlines()]
        spans = {}
        for e in events:
            spans.setdefault(e["pid"], {}).update(e)
        ordered = sorted(spans.values(), key=lambda s: s["in"])
        overlaps += sum(a["out"] > b["in"] for a, b in itertools.pairwise(ordered))
        winners.append(len(ordered))
        assert ordered and ordered[0]["recovered"] is True  # the first holder took over the dead owner's lock
        assert not lock_file.exists()  # each holder removed it on release
    assert overlaps == 0
    proof(
        "Concurrency",
        f"{STARTERS} starters racing for a dead owner's project lock, {RACES} times",
        f"{overlaps} overlapping holds; {sum(winners)} holds in all, one at a time "
        f"(the first took the stale lock over each time)",
    )


def test_a_killed_holder_releases_the_lock_and_the_next_one_recovers_it(tmp_path):
    root = tmp_path / "proj"
    (root / "output").mkdir(parents=True)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from forge_ml.project import Project, ProjectLock\n"
            "with ProjectLock(Project(Path(sys.argv[1])), 'promote'):\n print('held', flush=True); time.sleep(60)",
            str(root),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "held"
    with (
        pytest.raises(InputError, match=rf"another forge-ml promote \(pid {holder.pid} on "),
        ProjectLock(Project(root)),
    ):
        pass
    holder.kill()
    holder.wait()
    with ProjectLock(Project(root), "flywheel") as lock:
        assert lock.recovered and lock.recovered_from == holder.pid
        with ProjectLock(Project(root)) as inner:  # re-entrant in one process
            assert not inner.recovered
        assert (root / "output" / "flywheel.lock").exists()  # the inner exit did not release it
    assert not (root / "output" / "flywheel.lock").exists()
