"""The flywheel end to end through the CLI: Claude (a fake Messages API) or offline, resume after SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import FAST, edit_config, run_cli
from fake_anthropic import FakeAnthropic
from mlflow import MlflowClient

from forge_ml.data.examples import read_examples

# Small rounds: two trials of one or two epochs, 30 new examples per round.
ROUNDS = [*FAST, "tune.num_samples=2", "planner.augment_n=30"]
SENTINEL = "sk-ant-api03-SENTINELflywheel000000001"
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


def client_for(root: Path) -> tuple[MlflowClient, str]:
    client = MlflowClient(tracking_uri=f"sqlite:///{root / 'mlflow.db'}")
    return client, client.get_experiment_by_name(root.name).experiment_id


def runs_of(root: Path, kind: str | None = None) -> list:
    client, exp = client_for(root)
    query = f"tags.`forge.kind` = '{kind}'" if kind else ""
    return client.search_runs([exp], filter_string=query, max_results=1000)


def assert_consistent(root: Path, rounds: int) -> None:
    """One FINISHED round run per round, one run per trial, nothing RUNNING, one version per round."""
    client, exp = client_for(root)
    everything = client.search_runs([exp], max_results=1000)
    assert [r.info.run_name for r in everything if r.info.status == "RUNNING"] == []
    finished = sorted(r.info.run_name for r in runs_of(root, "round") if r.info.status == "FINISHED")
    assert finished == [f"round-{n:03d}" for n in range(1, rounds + 1)]
    trial_ids = [r.data.tags["forge.trial_id"] for r in runs_of(root, "trial")]
    assert len(trial_ids) == len(set(trial_ids)), "a trial has more than one MLflow run"
    versions = client.search_model_versions(f"name = '{root.name}'")
    assert len(versions) == rounds
    assert len({v.run_id for v in versions}) == rounds
    records = [json.loads(line) for line in (root / "output" / "experiments.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in records] == list(range(1, rounds + 1))


def claude_plan(body: dict) -> dict:
    round_number = int(body["messages"][0]["content"].split("Plan round ", 1)[1].split(".", 1)[0])
    return {
        "hypothesis": f"Claude round {round_number}: a higher rank with a mid learning rate.",
        "search_space": {"training.learning_rate": "tag(log, interval(2e-3, 8e-3))", "lora.r": "choice(4,8)"},
        "num_samples": 2,
        "fixed_overrides": {"training.epochs": 2},
        "forge_yaml_patches": {"training.warmup_ratio": 0.05},
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
def test_claude_flywheel_rounds_gate_record_and_resume(project, monkeypatch):
    root = project.root
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run(["git", "-C", str(root), "add", "-A"], check=True)
    subprocess.run(
        ["git", "-C", str(root), "commit", "-qm", "start"], check=True, env={**os.environ, **GIT_ENV}
    )
    with FakeAnthropic() as fake:
        fake.on_tool("propose_experiment", claude_plan)
        fake.on_tool("write_examples", hover_examples)
        env = {"ANTHROPIC_API_KEY": SENTINEL, "ANTHROPIC_BASE_URL": fake.base_url, **GIT_ENV}
        result = run_cli("-p", str(root), "flywheel", "--rounds", "2", *ROUNDS, env=env)
        assert result.returncode == 0, result.stderr[-4000:]
        assert fake.count("/v1/messages") >= 4  # a plan and data for each round

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
        assert len(trials) == 2 and all(t.data.params["training.epochs"] == "2" for t in trials)
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
    answers = mlflow.pyfunc.load_model(f"models:/{root.name}@champion").predict(["take off to 30 m"])
    assert isinstance(answers, list) and len(answers) == 1 and isinstance(answers[0], str)

    # the project files the loop keeps
    heartbeat = json.loads((root / "output" / "flywheel_heartbeat.json").read_text())
    assert heartbeat["status"] == "completed" and heartbeat["iteration"] == 2
    assert "## Round 2" in (root / "AGENT_CONTEXT.md").read_text()
    assert "Round 2, planned by the claude planner" in (root / "PLAN.md").read_text()
    assert "Round 1: hover answers need seconds." in (root / "BACKGROUND.md").read_text()
    config = (root / "forge.yaml").read_text()
    assert "warmup_ratio: 0.05" in config and '# compare the "cmd" field' in config  # comments kept
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

    # the API key never reaches MLflow or the project's files
    logged = json.dumps([[r.data.params, r.data.tags] for r in runs_of(root)])
    assert SENTINEL not in logged
    for path in [*(root / "output").glob("*.json*"), root / "forge.yaml", root / "AGENT_CONTEXT.md"]:
        assert SENTINEL not in path.read_text(errors="replace"), path

    # run again: nothing left to do
    again = run_cli("-p", str(root), "flywheel", "--rounds", "2", "planner=offline", *ROUNDS)
    assert again.returncode == 0 and "2 of 2 rounds done" in again.stdout
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


def _kill_when_training(process: subprocess.Popen, root: Path, timeout: float = 300) -> dict:
    """SIGKILL the flywheel (its whole process group) once round 1's trials have saved state; return it."""
    state_file = root / "output" / "flywheel_state.json"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, "the flywheel ended before it could be killed"
        try:
            current = json.loads(state_file.read_text()).get("current") or {}
        except (OSError, json.JSONDecodeError):
            current = {}
        path = current.get("experiment_path")
        if (
            path
            and list(Path(path).glob("*/checkpoint_*"))
            and list(Path(path).glob("experiment_state-*.json"))
        ):
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
            return current
        time.sleep(0.3)
    os.killpg(process.pid, signal.SIGKILL)
    raise AssertionError("round 1 never reached its trials")


@pytest.mark.slow
def test_sigkill_mid_round_then_resume_completes_without_duplicates(project):
    root = project.root
    exe = Path(sys.executable).with_name("forge-ml")
    args = [
        str(exe),
        "-p",
        str(root),
        "flywheel",
        "--rounds",
        "2",
        "planner=offline",
        *ROUNDS,
        "tune.num_samples=3",
    ]
    env = {**os.environ, "NO_COLOR": "1"}
    env.pop("ANTHROPIC_API_KEY", None)
    process = subprocess.Popen(
        args, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    killed = _kill_when_training(process, root)
    assert killed["round"] == 1 and killed["stage"] == "augmented"
    running = [r.info.run_name for r in runs_of(root) if r.info.status == "RUNNING"]
    assert "round-001" in running  # the crash left it open
    lines_before = (root / "dataset" / "canonical.jsonl").read_text().splitlines()

    resumed = run_cli(
        "-p", str(root), "flywheel", "--rounds", "2", "planner=offline", *ROUNDS, "tune.num_samples=3"
    )
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    assert_consistent(root, 2)
    first = next(r for r in runs_of(root, "round") if r.info.run_name == "round-001")
    assert first.info.run_id == killed["round_run_id"]  # the round kept its run
    assert first.data.tags.get("forge.restored") == "true"  # and continued from Ray Tune's state
    lines = (root / "dataset" / "canonical.jsonl").read_text().splitlines()
    assert lines[: len(lines_before)] == lines_before  # round 1's data was not added twice
    assert len(lines) == len(lines_before) + 30
    assert all(json.loads(line) for line in lines)  # no partial line


def test_a_second_flywheel_on_the_same_project_is_refused_and_a_stale_lock_recovered(project):
    lock = project.root / "output" / "flywheel.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    import socket

    lock.write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": 0}))
    refused = run_cli("-p", str(project.root), "flywheel", "--rounds", "1", "planner=offline", *ROUNDS)
    assert refused.returncode == 1 and "another forge-ml flywheel" in refused.stderr
    dead = subprocess.Popen(["true"])
    dead.wait()
    lock.write_text(json.dumps({"pid": dead.pid, "host": socket.gethostname(), "since": 0}))
    from forge_ml.flywheel_state import ProjectLock

    with ProjectLock(project) as taken:
        assert taken.recovered and taken.recovered_from == dead.pid
        assert json.loads(lock.read_text())["pid"] == os.getpid()
    assert not lock.exists()
    lock.write_text("")  # killed before it wrote its pid
    os.utime(lock, (time.time() - 60, time.time() - 60))
    with ProjectLock(project) as taken:
        assert (
            taken.recovered
            and taken.recovered_from is None
            and json.loads(lock.read_text())["pid"] == os.getpid()
        )
