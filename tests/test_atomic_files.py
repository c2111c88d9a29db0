"""Atomic rewrites: a writer killed with SIGKILL at random moments never leaves a partial file.

forge-ml rewrites canonical.jsonl, forge.yaml, BACKGROUND.md, PLAN.md, AGENT_CONTEXT.md, the
heartbeat, experiments.jsonl and the flywheel state through `forge_ml.fileio.atomic_write_text`
(the flywheel tests check each of those files is replaced by a new inode, never edited in place).
Here the primitive itself is killed mid-write many times.
"""

from __future__ import annotations

import os
import random
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from forge_ml.fileio import TEMP_SUFFIX, atomic_write_text

pytestmark = pytest.mark.reliability
KILLS = 40
WRITER = """
import itertools, sys
from pathlib import Path
sys.path.insert(0, sys.argv[3])
from test_atomic_files import body
from forge_ml.fileio import atomic_write_text

path = Path(sys.argv[1])
print("ready", flush=True)
for i in itertools.count(int(sys.argv[2])):
    atomic_write_text(path, body(i))
"""


def body(version: int) -> str:
    """A ~600 KB file whose every line names its version: a mix of two versions is detectable."""
    return "".join(f'{{"version": {version}, "line": {n}, "pad": "{"x" * 60}"}}\n' for n in range(6000))


def check_whole(path: Path) -> int:
    """Return the version the file holds, asserting it is exactly that version's complete text."""
    text = path.read_text(encoding="utf-8")
    version = int(text.split(",", 1)[0].split(":", 1)[1])
    assert text == body(version), f"{path} holds a partial or mixed file"
    return version


def test_sigkill_at_random_moments_never_leaves_a_partial_file(tmp_path, proof):
    target = tmp_path / "canonical.jsonl"
    atomic_write_text(target, body(0))
    rng = random.Random(7)
    versions, orphans_seen, version = [], 0, 1
    for _ in range(KILLS):
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(target), str(version), str(Path(__file__).parent)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert writer.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.0, 0.25))
        writer.kill()
        writer.wait()
        writer.stdout.close()
        versions.append(check_whole(target))
        orphans = list(tmp_path.glob(f".canonical.jsonl.*{TEMP_SUFFIX}"))
        orphans_seen += bool(orphans)
        version = versions[-1] + 1000
    atomic_write_text(target, body(version))  # the next write clears what killed writers left
    assert check_whole(target) == version
    left = list(tmp_path.glob(f".*{TEMP_SUFFIX}"))
    assert left == []
    distinct = len(set(versions))
    assert distinct > KILLS // 4, "the writer was killed before it ever wrote; the test proved nothing"
    proof(
        "Atomic files",
        f"a writer rewriting a 600 KB canonical.jsonl, SIGKILLed {KILLS} times at random moments",
        f"{len(versions)} of {KILLS} kills left a whole file ({distinct} distinct versions seen); {orphans_seen} left a "
        f"temp file, removed by the next write ({len(left)} left)",
    )


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def test_rewrites_keep_a_files_mode_and_new_files_get_the_umasks(tmp_path, proof):
    from conftest import run_cli

    made = run_cli("-p", str(tmp_path), "init", "proj", "--example", "drone-router", "--no-git")
    assert made.returncode == 0, made.stderr
    root = tmp_path / "proj"
    expected = 0o666 & ~_umask()
    modes = {
        p.relative_to(root).as_posix(): stat.S_IMODE(p.stat().st_mode) for p in root.rglob("*") if p.is_file()
    }
    assert modes["forge.yaml"] == expected and set(modes.values()) == {expected}, modes
    canonical = root / "dataset" / "canonical.jsonl"
    canonical.chmod(0o664)
    lines = len(canonical.read_text().splitlines())
    grown = run_cli("-p", str(root), "generate", "-n", "3", env={"ANTHROPIC_API_KEY": ""})  # -n: --n
    assert grown.returncode == 0, grown.stderr[-2000:]
    assert len(canonical.read_text().splitlines()) == lines + 3  # rewritten (appended through a rename)
    assert stat.S_IMODE(canonical.stat().st_mode) == 0o664
    proof(
        "Atomic files",
        "`init --example`, then a canonical.jsonl set to 664 grown by `generate`",
        f"every new project file {expected:o} (0666 less the umask); canonical.jsonl still "
        f"{stat.S_IMODE(canonical.stat().st_mode):o} after the rewrite",
    )


def test_a_temp_file_of_another_host_is_never_taken_for_an_orphan(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    target = tmp_path / "canonical.jsonl"
    this_host_dead = (
        tmp_path / f".canonical.jsonl.{dead.pid}@{socket.gethostname().replace('.', '_')}.x{TEMP_SUFFIX}"
    )
    older_name_dead = tmp_path / f".canonical.jsonl.{dead.pid}.y{TEMP_SUFFIX}"
    other_host = tmp_path / f".canonical.jsonl.{dead.pid}@another-node.z{TEMP_SUFFIX}"
    alive_here = (
        tmp_path / f".canonical.jsonl.{os.getpid()}@{socket.gethostname().replace('.', '_')}.w{TEMP_SUFFIX}"
    )
    for path in (this_host_dead, older_name_dead, other_host, alive_here):
        path.write_text("half")
    atomic_write_text(target, "whole\n")
    assert target.read_text() == "whole\n"
    assert sorted(p.name for p in tmp_path.glob(f".*{TEMP_SUFFIX}")) == sorted(
        [other_host.name, alive_here.name]
    )
