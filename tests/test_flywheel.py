"""The flywheel end to end through the CLI: Claude (a fake Messages API) planning two rounds, the project lock.

Kills and resumes at every stage are in test_resilience.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import FAST, edit_config, run_cli
from fake_anthropic import FakeAnthropic
from flywheel_checks import (
    RewriteWatch,
    assert_consistent,
    assert_trials_ran_their_rounds_config,
    client_for,
    ray_session_logs,
    runs_of,
    secret_hits,
)

from forge_ml.data.examples import read_examples
from forge_ml.faults import ENV as FAILPOINTS
from forge_ml.project import ProjectLock

# Small rounds: two trials of one or two epochs, 30 new examples per round.
ROUNDS = [*FAST, "tune.num_samples=2", "planner.augment_n=30", "planner.min_samples=1"]
SENTINEL = "sk-ant-api03-SENTINELflywheel000000001"
HF_SENTINEL = "hf_SENTINELflywheel00000000000001"
PASSWORD_SENTINEL = "SENTINELbasicauthpassword0001"
GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
}


@pytest.fixture
def project(small_project):
    """The small drone-router project with bounds a 2-core test can afford."""
    edit_config(small_project, "planner", "bounds", "training.epochs", {"low": 1, "high": 2})
    edit_config(small_project, "planner", "bounds", "training.batch_size", {"choices": [16, 32]})
    return small_project


def claude_plan(body: dict) -> dict:
    round_number = int(body["messages"][0]["content"].split("Plan round ", 1)[1].split(".", 1)[0])
    return {
        "hypothesis": f"Claude round {round_number}: a higher rank with a mid learning rate.",
        "search_space": {"training.learning_rate": "tag(log, interval(2e-3, 8e-3))", "lora.r": "choice(4,8)"},
        # the plan's own trial count and epochs, neither as configured (tune.num_samples=2, training.epochs=2),
        # and a patch that changes a logged key between rounds: the round run logs what its trials run
        "num_samples": 3 if round_number == 1 else 1,
        "next_hypotheses": [f"After round {round_number}: lora.r=16 with half the learning rate."],
        "fixed_overrides": {"training.epochs": 1},
        "forge_yaml_patches": {"training.warmup_ratio": 0.05 * round_number},
        "background_additions": f"Round {round_number}: hover answers need seconds.",
        "augment_focus": ["hover"],
        "augment_n": 10,
    }


def hover_examples(body: dict) -> dict:
    sys.path.insert(0, str(EXAMPLE))
    rows = __import__("generator").generate(25, seed=len(body["messages"][0]["content"]), focus=["hover"])
    sys.path.pop(0)
    return {
        "examples": [
            {
                "user": r["messages"][0]["content"],
                "assistant": r["messages"][1]["content"],
                "category": "hover",
            }
            for r in rows
        ]
    }


EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "drone-router"


@pytest.mark.slow
@pytest.mark.reliability
def test_claude_flywheel_rounds_gate_record_and_resume(project, monkeypatch, proof):
    root = project.root
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run(["git", "-C", str(root), "add", "-A"], check=True)
    subprocess.run(
        ["git", "-C", str(root), "commit", "-qm", "start"], check=True, env={**os.environ, **GIT_ENV}
    )
    (root / ".env").write_text("DRONE_API_TOKEN=local-only\n")  # untracked: the round must not commit it
    (root / "notes.txt").write_text("staged by the user, not ready\n")
    subprocess.run(["git", "-C", str(root), "add", "notes.txt"], check=True)
    with FakeAnthropic() as fake:
        fake.on_tool("propose_experiment", claude_plan)
        fake.on_tool("write_examples", hover_examples)
        env = {
            "ANTHROPIC_API_KEY": SENTINEL,
            "ANTHROPIC_BASE_URL": fake.base_url,
            "HF_TOKEN": HF_SENTINEL,
            "MLFLOW_TRACKING_USERNAME": "forge",
            "MLFLOW_TRACKING_PASSWORD": PASSWORD_SENTINEL,
            **GIT_ENV,
        }
        watch = RewriteWatch(root)
        result = run_cli("-v", "-p", str(root), "flywheel", "--rounds", "2", *ROUNDS, env=env)
        assert result.returncode == 0, result.stderr[-4000:]
        watch.check()
        assert fake.count("/v1/messages") >= 4  # a plan and data for each round
        # every request, plans and data alike, carries the task description (mission.md) as quoted data
        messages = [r for r in fake.requests if r.path == "/v1/messages"]
        assert all('<data name="mission.md">' in r.body["system"][0]["text"] for r in messages)
        plans = [r for r in messages if (r.body.get("tool_choice") or {}).get("name") == "propose_experiment"]
        assert "After round 1: lora.r=16" in json.dumps(plans[-1].body)  # round 2 read the queue round 1 left

    assert_consistent(root, 2)
    client, _ = client_for(root)
    rounds = sorted(runs_of(root, "round"), key=lambda r: r.info.run_name)
    for run in rounds:
        tags, metrics = run.data.tags, run.data.metrics
        assert tags["forge.planner"] == "claude" and tags["forge.planner.fallback"] == "false"
        assert tags["forge.hypothesis"].startswith("Claude round")
        assert metrics["planner/input_tokens"] == 1200 and metrics["planner/cost_usd"] > 0
        assert metrics["data/added"] == 10 and 0.0 <= metrics["gold/accuracy"] <= 1.0
        assert tags["forge.gate.decision"] in ("promoted", "refused")
        trials = [t for t in runs_of(root, "trial") if t.data.tags["mlflow.parentRunId"] == run.info.run_id]
        number = int(run.info.run_name[-3:])
        assert len(trials) == (3 if number == 1 else 1)
        assert all(t.data.params["training.epochs"] == "1" for t in trials)
        assert run.data.params["tune.num_samples"] == str(len(trials))
        assert float(run.data.params["training.warmup_ratio"]) == pytest.approx(0.05 * number)
    assert assert_trials_ran_their_rounds_config(root) == 4
    plots = [a.path for a in client.list_artifacts(rounds[1].info.run_id, "round/plots")]
    assert plots == ["round/plots/gold_accuracy.png"]
    assert {a.path for a in client.list_artifacts(rounds[0].info.run_id, "round/gold")} == {
        "round/gold/eval_results.json",
        "round/gold/eval_failures.jsonl",
    }

    # the registry: challenger on the newest version, a champion that loads and answers
    import mlflow

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{root / 'mlflow.db'}")
    monkeypatch.setenv("MLFLOW_REGISTRY_URI", f"sqlite:///{root / 'mlflow.db'}")
    model = client.get_registered_model(root.name)
    assert str(model.aliases["challenger"]) == "2" and "champion" in model.aliases
    # readable in the UI: the model says what it is for and how versions get promoted ...
    mission = (root / "mission.md").read_text().split("\n\n")[1]
    assert model.description.startswith(" ".join(mission.split()))
    assert (
        "`dataset/gold.jsonl`" in model.description
        and "strictly higher (a tie is refused)" in model.description
    )
    # ... each version in one line, linking its round's run; each round's gold accuracy at step = round
    for run in rounds:
        version = client.get_model_version(root.name, run.data.tags["forge.version"])
        head, link = version.description.split("\n\n")
        number = int(run.info.run_name[-3:])
        decision = run.data.tags["forge.gate.decision"]
        assert head.startswith(f"round {number} — gold ") and f" — {decision}: " in head
        assert head.endswith(run.data.tags["forge.gate.reasons"])
        assert f"(#/experiments/{run.info.experiment_id}/runs/{run.info.run_id})" in link
        (point,) = client.get_metric_history(run.info.run_id, "gold/accuracy")
        assert point.step == number and point.value == run.data.metrics["gold/accuracy"]
    answers = mlflow.pyfunc.load_model(f"models:/{root.name}@champion").predict(["take off to 30 m"])
    assert isinstance(answers, list) and len(answers) == 1 and isinstance(answers[0], str)

    # the project files the loop keeps
    heartbeat = json.loads((root / "output" / "flywheel_heartbeat.json").read_text())
    assert heartbeat["status"] == "completed" and heartbeat["round"] == 2
    assert "## Round 2" in (root / "AGENT_CONTEXT.md").read_text()
    plan_md = (root / "PLAN.md").read_text()
    assert "Round 2, planned by the claude planner" in plan_md
    assert "1. After round 2: lora.r=16 with half the learning rate." in plan_md  # the queue Claude keeps
    tried = [line for line in plan_md.splitlines() if line.startswith(("| 1 |", "| 2 |"))]
    assert len(tried) == 2 and all("Claude round" in line and "%" in line for line in tried)
    assert "Round 1: hover answers need seconds." in (root / "BACKGROUND.md").read_text()
    config = (root / "forge.yaml").read_text()
    assert "warmup_ratio: 0.1" in config and '# compare the "cmd" field' in config  # comments kept
    added = [
        e for e in read_examples(root / "dataset" / "canonical.jsonl") if e.meta.get("source") == "augment"
    ]
    assert len(added) == 20 and {e.meta["round"] for e in added} == {1, 2}
    log = subprocess.run(
        ["git", "-C", str(root), "log", "--format=%s"], capture_output=True, text=True
    ).stdout
    assert log.splitlines()[0].startswith("forge iter 2: ") and log.splitlines()[1].startswith(
        "forge iter 1: "
    )
    committed = subprocess.run(
        ["git", "-C", str(root), "log", "--name-only", "--format=", "HEAD~2..HEAD"],
        capture_output=True,
        text=True,
    ).stdout.split()
    assert set(committed) == {
        "forge.yaml",
        "BACKGROUND.md",
        "AGENT_CONTEXT.md",
        "PLAN.md",
        "dataset/canonical.jsonl",
    }
    status = subprocess.run(["git", "-C", str(root), "status", "--porcelain"], capture_output=True, text=True)
    assert "A  notes.txt" in status.stdout.splitlines()  # staged by the user: still staged, not committed
    committed = subprocess.run(
        ["git", "-C", str(root), "ls-tree", "-r", "--name-only", "HEAD"], capture_output=True, text=True
    ).stdout.split()
    assert ".env" not in committed and "notes.txt" not in committed

    # forge.yaml, BACKGROUND.md and the loop's files were replaced whole, never edited in place
    assert watch.in_place == [] and {"forge.yaml", "BACKGROUND.md", "dataset/canonical.jsonl"} <= set(
        watch.renamed
    )
    proof(
        "Atomic files",
        "a two-round Claude flywheel: forge.yaml patched, BACKGROUND.md appended, journal files rewritten",
        f"{len(watch.renamed)} files changed, all by rename to a new inode ({', '.join(sorted(watch.renamed))}); "
        f"{len(watch.in_place)} written in place",
    )

    # secrets in the environment reach nothing: MLflow (params, tags, artifacts, the database),
    # Ray's result files and session logs, Hydra's saved config, the heartbeat, the output
    logged = json.dumps([[r.data.params, r.data.tags] for r in runs_of(root)])
    folders = [root, *filter(None, [ray_session_logs()])]
    secrets = [SENTINEL, HF_SENTINEL, PASSWORD_SENTINEL]
    hits, files, size = secret_hits(secrets, folders, [result.stdout, result.stderr, logged])
    assert hits == [], hits
    assert files > 50 and any((root / "output" / "ray").rglob("result.json"))
    proof(
        "Security",
        "sentinel Anthropic key, HF token and basic-auth password in the environment of a 2-round Claude flywheel",
        f"0 hits in {files} files ({size / 1e6:.1f} MB: mlflow.db, artifacts, Ray result files and session "
        "logs, heartbeat, state, journal) and the CLI's stdout/stderr (run with -v)",
    )

    # run again: nothing left to do
    again = run_cli("-p", str(root), "flywheel", "--rounds", "2", "planner=offline", *ROUNDS)
    assert again.returncode == 0 and "2 of 2 rounds done" in again.stdout
    fewer = run_cli("-p", str(root), "flywheel", "--rounds", "1", "planner=offline", *ROUNDS)
    assert fewer.returncode == 0 and "2 rounds done already, 1 asked for (--iters N runs N more)" in " ".join(
        fewer.stdout.split()
    )
    assert len(runs_of(root, "round")) == 2

    # a changed gold set stops the loop until the champion is re-baselined
    gold = root / "dataset" / "gold.jsonl"
    gold.write_text("".join(gold.read_text().splitlines(keepends=True)[:-2]))
    refused = run_cli("-p", str(root), "flywheel", "--rounds", "3", "planner=offline", *ROUNDS)
    assert refused.returncode == 1 and "gold set changed" in refused.stderr.replace("\n", " ")
    rebased = run_cli(
        "-p",
        str(root),
        "flywheel",
        "--rounds",
        "3",
        "--rebaseline",
        "--skip-train",
        "planner=offline",
        *ROUNDS,
    )
    assert rebased.returncode == 0, rebased.stderr[-3000:]
    champion = client.get_model_version_by_alias(root.name, "champion")
    assert champion.tags["forge.rebaseline.previous_gold_hash"] != champion.tags["forge.gold_hash"]
    assert len(client.search_model_versions(f"name = '{root.name}'")) == 2  # --skip-train registers nothing

    # so does a changed scorer: the same answers score higher under a partial-credit scorer.py
    # (`promote --rebaseline`, the same re-measure, is run in tests/test_promote_commands.py)
    assert champion.tags["forge.gold_scoring"] == "json_cmd (field cmd)"
    (root / "scorer.py").write_text(
        "def score(expected, actual):\n    return 1.0 if expected == actual.strip() else 0.5\n"
    )
    custom = ["eval.scorer=custom", "planner=offline", *ROUNDS]
    refused = run_cli("-p", str(root), "flywheel", "--rounds", "4", *custom)
    said = " ".join(refused.stderr.split())
    assert refused.returncode == 1 and "the scoring changed" in said and "json_cmd (field cmd)" in said
    shown = json.loads(run_cli("-p", str(root), "--json", "status").stdout)["champion"]
    assert shown["scoring"] == "json_cmd (field cmd)"


@pytest.mark.reliability
def test_a_second_flywheel_on_the_same_project_is_refused_and_a_stale_lock_recovered(project, proof):
    root = project.root
    lock = root / "output" / "flywheel.lock"
    exe = Path(sys.executable).with_name("forge-ml")
    args = [
        str(exe),
        "-p",
        str(root),
        "flywheel",
        "--rounds",
        "1",
        "--skip-train",
        "planner=offline",
        *ROUNDS,
    ]
    env = {**os.environ, "NO_COLOR": "1", FAILPOINTS: "flywheel.plan=sleep:120"}
    env.pop("ANTHROPIC_API_KEY", None)
    first = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not (lock.is_file() and lock.read_text().strip()) and time.monotonic() < deadline:
            assert first.poll() is None, "the first flywheel ended early"
            time.sleep(0.2)
        second = run_cli(*args[1:])
        assert second.returncode == 1, second.stderr[-2000:]
        assert f"another forge-ml flywheel (pid {first.pid}" in second.stderr.replace("\n", "")
        assert first.poll() is None  # the refused run did not disturb the running one
    finally:
        first.kill()
        first.wait()
    proof(
        "Concurrency",
        "a second `forge-ml flywheel` on a project whose flywheel is running",
        f"refused with exit {second.returncode}, naming the running flywheel (pid {first.pid}); it kept running",
    )

    assert json.loads(lock.read_text())["pid"] == first.pid  # SIGKILL left its lock behind
    third = run_cli(*args[1:])
    assert third.returncode == 0, third.stderr[-2000:]
    assert f"recovered the lock of a stopped flywheel (pid {first.pid})" in (
        third.stdout + third.stderr
    ).replace("\n", "")
    assert not lock.exists()
    proof(
        "Concurrency",
        "the lock of a flywheel killed with SIGKILL",
        f"the next flywheel took it over (pid {first.pid} gone), ran, and released it (exit {third.returncode})",
    )

    lock.write_text("")  # killed between creating the lock and writing its pid
    os.utime(lock, (time.time() - 60, time.time() - 60))
    with ProjectLock(project) as taken:
        assert taken.recovered and taken.recovered_from is None
        assert json.loads(lock.read_text())["pid"] == os.getpid()
    proof(
        "Concurrency", "an empty lock file a minute old", "taken over as stale; the new owner's pid written"
    )
