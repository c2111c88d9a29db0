"""Loop control through the CLI: `init` makes a git repository, `flywheel --iters N` runs N more
rounds, each round is a commit, the flywheel keeps a log file, the heartbeat tells the time in ISO 8601
and `status` follows a running flywheel by it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
from conftest import FAST, run_cli, shrink_jsonl

from forge_ml.faults import ENV as FAILPOINTS

GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
}


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout


def envelope(result) -> dict:
    return json.loads(result.stdout)


def test_init_makes_a_git_repository_unless_told_not_to(tmp_path):
    made = envelope(
        run_cli("--json", "init", "proj", "--example", "drone-router", "--dir", str(tmp_path), env=GIT_ENV)
    )
    root = tmp_path / "proj"
    assert made["success"] and made["project"] == str(root) and made["git"].startswith("a git repository")
    assert git(root, "log", "--format=%s").splitlines() == ["forge-ml init"]
    assert git(root, "status", "--porcelain") == ""  # everything of the example committed
    ignored = (root / ".gitignore").read_text().split()
    assert {"output/", "mlflow.db", "mlartifacts/", ".env"} <= set(ignored)

    plain = envelope(run_cli("--json", "init", "plain", "--dir", str(tmp_path), "--no-git", env=GIT_ENV))
    assert plain["git"] == "not a git repository (--no-git)" and not (tmp_path / "plain" / ".git").exists()

    nested = envelope(run_cli("--json", "init", "nested", "--dir", str(root), env=GIT_ENV))
    assert nested["git"] == f"inside the git repository {root}: rounds commit there"
    assert not (root / "nested" / ".git").exists()

    # inside a repository that ignores it (make demo's project in a checkout): a repository of its own
    before = (git(root, "status", "--porcelain"), git(root, "log", "--format=%H"))
    own = envelope(run_cli("--json", "init", "scratch", "--dir", str(root / "output"), env=GIT_ENV))
    assert own["git"].startswith(f"a git repository of its own ({root} ignores this directory): each")
    assert git(root / "output" / "scratch", "log", "--format=%s").splitlines() == ["forge-ml init"]
    assert (git(root, "status", "--porcelain"), git(root, "log", "--format=%H")) == before  # untouched

    no_identity = {
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_CONFIG_NOSYSTEM": "1",
        "HOME": str(tmp_path / "home"),
    }
    anonymous = envelope(run_cli("--json", "init", "anon", "--dir", str(tmp_path), env=no_identity))
    assert anonymous["success"] and anonymous["git"].startswith("a git repository without a first commit")


@pytest.mark.slow
def test_iters_runs_that_many_more_rounds_each_a_commit_logged_with_times(tmp_path):
    assert (
        run_cli("init", "loop", "--example", "drone-router", "--dir", str(tmp_path), env=GIT_ENV).returncode
        == 0
    )
    root = tmp_path / "loop"
    shrink_jsonl(root / "dataset" / "canonical.jsonl", 120)
    shrink_jsonl(root / "dataset" / "gold.jsonl", 20)
    args = ["-p", str(root), "flywheel", "--skip-train", "planner=offline", "planner.augment_n=5", *FAST]

    first = run_cli(*args, "--rounds", "3", env=GIT_ENV)
    assert first.returncode == 0, first.stderr[-3000:]
    more = run_cli("--json", *args, "--iters", "2", env=GIT_ENV)
    assert more.returncode == 0, more.stderr[-3000:]
    data = envelope(more)
    assert [r["round"] for r in data["rounds"]] == [1, 2, 3, 4, 5] and data["rounds_done"] == 5
    assert "5 of 5 rounds done" in data["stop_reason"]
    commits = git(root, "log", "--format=%s").splitlines()
    assert [c.split(":")[0] for c in commits[:5]] == [f"forge iter {n}" for n in (5, 4, 3, 2, 1)]

    heartbeat = json.loads((root / "output" / "flywheel_heartbeat.json").read_text())
    when = datetime.fromisoformat(heartbeat["time"])
    assert when.tzinfo == timezone.utc and abs(when.timestamp() - heartbeat["timestamp"]) < 1

    plan_md = (
        root / "PLAN.md"
    ).read_text()  # the living plan: five rounds tried, the offline planner's queue
    assert [line.split("|")[1].strip() for line in plan_md.splitlines() if re.match(r"\| \d+ \|", line)] == [
        "5",
        "4",
        "3",
        "2",
        "1",
    ]
    assert "## Next: the queue after round 5" in plan_md  # no round finished a trial: still the first rule
    assert "1. Next round: draw local trials within radius 0.25 of the best trial" in plan_md

    log = (root / "output" / "flywheel.log").read_text()
    assert log.count("5 of 5 rounds done") == 1 and log.count("3 of 3 rounds done") == 1
    assert "flywheel rounds" in log  # the rounds table, as printed
    assert re.search(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d ", log, re.MULTILINE)  # lines carry the time
    # a plan's hypothesis, longer than the log's 120 columns, is one line: whole, not broken
    hypotheses = re.findall(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d   Round \d+: .*$", log, re.MULTILINE)
    assert len(hypotheses) >= 5 and all(h.endswith(".") and len(h) > 120 for h in hypotheses), hypotheses
    assert not [
        line for line in log.splitlines() if line != line.rstrip()
    ]  # no padding to the console's width

    for bad in ("0", "-2"):
        refused = run_cli("--json", *args, "--iters", bad, env=GIT_ENV)
        assert (
            refused.returncode == 1
            and f"--iters {bad}: must be at least 1" in envelope(refused)["error"]["message"]
        )
    both = run_cli(*args, "--iters", "1", "--rounds", "9", env=GIT_ENV)
    assert both.returncode == 1 and "not allowed with argument" in both.stderr


def test_a_round_commits_only_what_the_enclosing_repository_does_not_ignore(tmp_path, monkeypatch, caplog):
    """A project made inside a repository that ignores all or part of it (before `init` checked):
    the ignored files are left out of the round's commit, with no failure logged, the rest committed."""
    import logging

    from forge_ml import journal
    from forge_ml.project import Project

    for key, value in GIT_ENV.items():
        monkeypatch.setenv(key, value)
    outer = tmp_path / "outer"
    outer.mkdir()
    git(outer, "init", "-q")
    (outer / ".gitignore").write_text("/hidden/\nBACKGROUND.md\n")
    git(outer, "add", ".gitignore")
    git(outer, "commit", "-q", "-m", "outer")
    assert run_cli("init", "hidden", "--dir", str(outer), "--no-git").returncode == 0
    assert run_cli("init", "seen", "--dir", str(outer), "--no-git").returncode == 0

    caplog.set_level(logging.INFO, logger="forge_ml.journal")
    hidden, seen = Project(outer / "hidden"), Project(outer / "seen")
    for project, committed in ((hidden, False), (seen, True)):
        files = journal.round_files(project, project.root / "dataset" / "canonical.jsonl")
        assert (project.root / "BACKGROUND.md") in files and (project.root / "BACKGROUND.md").exists()
        assert journal.git_commit(project, "forge iter 1", files) is committed
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    assert "ignores" in caplog.text
    commits = git(outer, "log", "--format=%s").splitlines()
    assert commits == ["forge iter 1", "outer"]
    committed = git(outer, "show", "--name-only", "--format=", "HEAD").split()
    assert "seen/forge.yaml" in committed and not any(c.startswith("hidden/") for c in committed)
    assert "seen/BACKGROUND.md" not in committed  # ignored by the outer repository, left out


@pytest.mark.slow
def test_status_follows_a_running_flywheel_by_its_heartbeat(small_project):
    """While a round augments (held there 20 s by a failpoint), `status` names the round and its step,
    calls the flywheel alive and sees the heartbeat rewritten; once it ends, "completed". The beats
    are read before `status` runs: a `status` that took 10 s on a loaded machine let the hold end."""
    root = small_project.root
    args = ["-p", str(root), "flywheel", "--skip-train", "--rounds", "1", "planner=offline"]
    args += ["planner.augment_n=5", "flywheel.heartbeat_s=0.5", *FAST]
    env = {**os.environ, "NO_COLOR": "1", FAILPOINTS: "flywheel.augment=sleep:20"}
    flywheel = subprocess.Popen(
        [str(Path(sys.executable).with_name("forge-ml")), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        beat_path = root / "output" / "flywheel_heartbeat.json"
        deadline = time.monotonic() + 120
        while not (beat_path.is_file() and json.loads(beat_path.read_text()).get("step") == "augment"):
            assert flywheel.poll() is None and time.monotonic() < deadline, flywheel.communicate()[0][-3000:]
            time.sleep(0.1)
        first = json.loads(beat_path.read_text())
        time.sleep(1.2)
        second = json.loads(beat_path.read_text())
        status = run_cli("-p", str(root), "--json", "status")
        looked = envelope(status)
        assert flywheel.poll() is None  # still held at the failpoint: it was running all along
    finally:
        output = flywheel.communicate(timeout=300)[0]
    assert flywheel.returncode == 0, output[-3000:]
    beat = looked["heartbeat"]
    assert looked["liveness"] == "alive" and beat["pid"] == flywheel.pid
    assert beat["status"] == "running" and beat["round"] == 1 and beat["step"] == "augment"
    assert "running: round 1, augment; last beat" in status.stderr  # the human table, on stderr with --json
    assert second["timestamp"] - first["timestamp"] >= 0.5 and second["step"] == "augment"  # it beats

    done = run_cli("-p", str(root), "--json", "status")
    assert envelope(done)["heartbeat"]["status"] == "completed" and envelope(done)["liveness"] is None
    assert "completed at" in done.stderr and "1 of 1 rounds done" in done.stderr
