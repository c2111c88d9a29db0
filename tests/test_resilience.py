"""Crash and resume: the flywheel killed at every stage of a round, trials that fail, state that cannot be resumed.

Each run is the real `forge-ml flywheel` in its own process group, killed with SIGKILL at a
failpoint (forge_ml/faults.py); the next run must finish the round with nothing lost or
counted twice. The checks are measured in the project's MLflow store and files.
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
from flywheel_checks import RewriteWatch, assert_consistent, client_for, runs_of
from mlflow import MlflowClient
from mlflow_server import free_port, server_up, start_mlflow_server, stop, wait_for

from forge_ml.faults import ENV as FAILPOINTS
from trainables.sft import OOM_FAULT_ENV

pytestmark = [pytest.mark.slow, pytest.mark.reliability]
ROUNDS = [*FAST, "planner=offline", "tune.num_samples=2", "planner.augment_n=30", "training.epochs=2"]


@pytest.fixture
def project(small_project):
    edit_config(small_project, "planner", "bounds", "training.epochs", {"low": 1, "high": 2})
    edit_config(small_project, "planner", "bounds", "training.batch_size", {"choices": [16, 32]})
    return small_project


def flywheel(
    root: Path,
    *extra: str,
    kill_at: str | None = None,
    env: dict | None = None,
    watch: RewriteWatch | None = None,
):
    """Run `forge-ml flywheel` as its own process group (a shell's job); return (exit code, output).

    `watch` checks afterwards that every file the run changed was replaced, not edited in place.
    """
    full_env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200", **(env or {})}
    full_env.pop("ANTHROPIC_API_KEY", None)
    full_env.pop(FAILPOINTS, None)
    if kill_at:
        full_env[FAILPOINTS] = f"{kill_at}=kill"
    args = [str(Path(sys.executable).with_name("forge-ml")), "-p", str(root), "flywheel", *ROUNDS, *extra]
    process = subprocess.run(
        args, env=full_env, capture_output=True, text=True, timeout=900, start_new_session=True, check=False
    )
    if watch is not None:
        watch.check()
    return process.returncode, process.stdout + process.stderr


def state_of(root: Path) -> dict:
    path = root / "output" / "flywheel_state.json"
    return (json.loads(path.read_text()).get("current") or {}) if path.is_file() else {}


def canonical_lines(root: Path) -> list[str]:
    lines = (root / "dataset" / "canonical.jsonl").read_text(encoding="utf-8").splitlines()
    assert all(json.loads(line) for line in lines), "a partial line in canonical.jsonl"
    return lines


def versions_of(root: Path) -> list:
    client, _ = client_for(root)
    return client.search_model_versions(f"name = '{root.name}'")


def running(root: Path) -> list[str]:
    return [r.info.run_name for r in runs_of(root) if r.info.status == "RUNNING"]


def temp_files(root: Path) -> list[Path]:
    return [p for p in root.rglob(".*.tmp") if "ray" not in p.parts]


def test_sigkill_at_every_stage_then_resume_completes_without_duplicates(project, proof):
    root = project.root
    rounds = ["--rounds", "2"]
    watch = RewriteWatch(root)

    code, out = flywheel(root, *rounds, kill_at="flywheel.plan", watch=watch)
    assert code == -9, out[-3000:]
    seed = len(canonical_lines(root))  # seed.jsonl merged in on first use
    assert state_of(root) == {} and not runs_of(root, "round")  # nothing recorded yet

    code, out = flywheel(root, *rounds, kill_at="flywheel.augment", watch=watch)
    assert code == -9, out[-3000:]
    planned = state_of(root)
    assert planned["stage"] == "planned" and running(root) == ["round-001"]
    assert len(canonical_lines(root)) == seed + 30
    background = (root / "BACKGROUND.md").read_text()
    proof(
        "Crash and resume",
        "SIGKILL while planning (plan made, forge.yaml/BACKGROUND.md written, stage not saved)",
        f"nothing recorded by the killed run; the next one planned round 1 again and opened one round run "
        f"(stage '{planned['stage']}')",
    )

    code, out = flywheel(root, *rounds, kill_at="tune.checkpoint", watch=watch)
    assert code == -9, out[-3000:]
    augmented = state_of(root)
    assert augmented["stage"] == "augmented" and augmented["round_run_id"] == planned["round_run_id"]
    assert augmented["experiment_path"] and augmented["augment"]["added"] == 30
    after_augment = len(canonical_lines(root))
    assert after_augment == seed + 30  # the resumed round did not add its examples twice
    looked = run_cli("-p", str(root), "--json", "status")  # the heartbeat still says "running"
    summary = json.loads(looked.stdout)
    assert summary["liveness"] == "gone" and summary["heartbeat"]["step"] == "tune", looked.stderr[-3000:]
    assert f"stopped: pid {summary['heartbeat']['pid']} is gone" in looked.stderr
    proof(
        "Crash and resume",
        "SIGKILL while augmenting (canonical.jsonl grown, stage not saved)",
        f"next run kept round 1's run and added no examples again: canonical {seed} → {after_augment} "
        "lines, all parse",
    )

    code, out = flywheel(root, *rounds, kill_at="flywheel.gold_eval", watch=watch)
    assert code == -9, out[-3000:]
    tuned = state_of(root)
    assert tuned["stage"] == "tuned" and tuned["round_run_id"] == planned["round_run_id"]
    (first,) = [r for r in runs_of(root, "round")]
    assert first.data.tags.get("forge.restored") == "true", out[-3000:]  # Ray Tune's state continued
    trials = runs_of(root, "trial")
    trial_ids = [t.data.tags["forge.trial_id"] for t in trials]
    assert len(trial_ids) == len(set(trial_ids)) == 2 and not versions_of(root)
    proof(
        "Crash and resume",
        "SIGKILL during trials (a checkpoint and Ray Tune's experiment state saved)",
        f"next run restored the trials from Ray Tune's state: {len(trials)} trials, "
        f"{len(set(trial_ids))} MLflow runs, round run kept",
    )

    code, out = flywheel(root, *rounds, kill_at="flywheel.register", watch=watch)
    assert code == -9, out[-3000:]
    assert state_of(root)["stage"] == "tuned" and len(versions_of(root)) == 1
    proof(
        "Crash and resume",
        "SIGKILL during gold evaluation (scored, nothing registered)",
        "next run evaluated again and registered once: 1 version",
    )

    code, out = flywheel(root, *rounds, kill_at="flywheel.record", watch=watch)
    assert code == -9, out[-3000:]
    assert state_of(root)["stage"] == "gated" and len(versions_of(root)) == 1
    assert (root / "output" / "experiments.jsonl").read_text().count("\n") == 1
    assert "## Round 1" in (root / "AGENT_CONTEXT.md").read_text()
    proof(
        "Crash and resume",
        "SIGKILL during registration (version registered, gate not applied)",
        f"next run found the version and applied the gate: {len(versions_of(root))} version, "
        f"champion v{versions_of(root)[0].version}",
    )

    # round 2: every trial fails; the round is FAILED with exit 2 and the champion stays
    client, _ = client_for(root)
    champion = client.get_model_version_by_alias(root.name, "champion").version
    code, out = flywheel(root, *rounds, "tune.max_failures=0", env={OOM_FAULT_ENV: "*"}, watch=watch)
    assert code == 2, out[-3000:]
    assert "every trial failed" in out.replace("\n", " ")
    failed = [r for r in runs_of(root, "round") if r.info.run_name == "round-002"]
    assert [r.info.status for r in failed] == ["FAILED"]
    failed_trials = [
        t for t in runs_of(root, "trial") if t.data.tags["mlflow.parentRunId"] == failed[0].info.run_id
    ]
    assert len(failed_trials) == 2 and all(t.info.status == "FAILED" for t in failed_trials)
    assert all("CUDA out of memory" in t.data.tags["forge.error"] for t in failed_trials)
    assert client.get_model_version_by_alias(root.name, "champion").version == champion
    assert len(versions_of(root)) == 1 and state_of(root)["stage"] == "augmented"
    proof(
        "Crash and resume",
        "SIGKILL after the round's line was written (state not cleared)",
        "next run counted round 1 as done (1 line in experiments.jsonl) and moved on to round 2",
    )
    proof(
        "Trial faults",
        "every trial of a round raises (CUDA out of memory in each, max_failures=0)",
        f"exit {code}, 'every trial failed'; round run FAILED, {len(failed_trials)} trial runs FAILED with "
        f"the error tagged; champion still v{champion}",
    )

    code, out = flywheel(root, *rounds, watch=watch)
    assert code == 0, out[-3000:]
    assert_consistent(root, 2)  # as many rounds as an uninterrupted run, one run per trial, one version each
    assert running(root) == [] and state_of(root) == {}
    lines = canonical_lines(root)
    assert len(lines) == seed + 60 and len(set(lines)) == len(lines)
    assert background.count("## Learned in round 1") <= 1
    assert (root / "BACKGROUND.md").read_text().count("## Learned in round 1") <= 1
    leftovers = temp_files(root)
    assert leftovers == [], leftovers
    assert watch.in_place == [] and len(watch.renamed) >= 6, watch.renamed
    proof(
        "Atomic files",
        "8 flywheel runs, 6 of them SIGKILLed at a failpoint: every change to the files the loop rewrites",
        f"{sum(watch.renamed.values())} changes to {len(watch.renamed)} files ({', '.join(sorted(watch.renamed))}), "
        f"all by rename to a new inode; {len(watch.in_place)} in place; {len(leftovers)} temp files left",
    )
    proof(
        "Crash and resume",
        "the run after six kills and a failed round",
        f"2 of 2 rounds done (as uninterrupted), {len(runs_of(root, 'trial'))} trial runs for as many trials, "
        f"0 RUNNING, {len(versions_of(root))} versions, canonical {len(lines)} lines (+30 per round, none "
        f"twice), {len(leftovers)} temp files left",
    )


def test_resume_with_changed_checkpoint_config_is_refused_and_unreadable_state_set_aside(project, proof):
    root = project.root
    code, out = flywheel(root, "--rounds", "1", kill_at="tune.checkpoint")
    assert code == -9, out[-3000:]
    killed = state_of(root)
    experiment = Path(killed["experiment_path"])
    assert experiment.is_dir() and killed["checkpoint_shape"]["model.tiny.hidden_size"] == 64

    before = (root / "output" / "flywheel_state.json").read_bytes()
    code, out = flywheel(root, "--rounds", "1", "model.tiny.hidden_size=96", "lora.bias=all")
    flat = out.replace("\n", " ")
    assert code == 1, out[-3000:]
    assert "lora.bias: 'none' → 'all'" in flat and "model.tiny.hidden_size: 64 → 96" in flat
    assert str(experiment) in flat
    assert state_of(root)["experiment_path"] == str(experiment)  # kept for a corrected rerun
    assert json.loads(before)["current"]["round_run_id"] == state_of(root)["round_run_id"]
    proof(
        "Crash and resume",
        "resume after lora.bias and model.tiny.hidden_size changed (checkpoints incompatible)",
        f"refused with exit {code} naming both keys and the checkpoint directory; state kept for a corrected rerun",
    )

    states = sorted(experiment.glob("experiment_state-*.json"))
    states[-1].write_text('{"trial_data": [', encoding="utf-8")  # truncated mid-write
    saved = {p.relative_to(experiment): p.read_bytes() for p in experiment.rglob("*") if p.is_file()}
    code, out = flywheel(root, "--rounds", "1")
    flat = out.replace("\n", " ")
    assert code == 0, out[-3000:]
    assert "cannot be continued" in flat and "is unreadable" in flat
    (aside,) = list(experiment.parent.glob(f"{experiment.name}.unrestorable-*"))
    kept = {p.relative_to(aside): p.read_bytes() for p in aside.rglob("*") if p.is_file()}
    assert kept == saved  # set aside as it was, not overwritten
    (round_run,) = [r for r in runs_of(root, "round") if r.info.status == "FINISHED"]
    assert "is unreadable" in round_run.data.tags["forge.restore_failed"]
    assert_consistent(root, 1)
    proof(
        "Crash and resume",
        "resume from a Ray Tune experiment state truncated mid-write",
        f"detected ('is unreadable'), the directory set aside unchanged ({len(kept)} files), the round's trials "
        "ran again and the round finished: 1 round, 1 version, 0 RUNNING",
    )


def test_the_tracking_server_going_away_mid_round_loses_nothing(project, tmp_path, proof):
    root = project.root
    port = free_port()
    uri = f"http://127.0.0.1:{port}"
    (tmp_path / "server").mkdir()
    server = start_mlflow_server(tmp_path / "server", port)
    try:
        wait_for(lambda: server_up(uri), "mlflow server")
        env = {
            **os.environ,
            "NO_COLOR": "1",
            FAILPOINTS: "tune.checkpoint=sleep:6",  # the driver dwells after each checkpoint: time to pull the plug
            "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",  # the client's own retries, kept short for the test
            "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
        }
        env.pop("ANTHROPIC_API_KEY", None)
        args = [str(Path(sys.executable).with_name("forge-ml")), "-p", str(root), "flywheel", "--rounds", "1"]
        args += [*ROUNDS, f"tracking.uri={uri}"]
        process = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        wait_for(
            lambda: (
                process.poll() is None
                and any(Path(state_of(root).get("experiment_path") or "/nonexistent").glob("*/checkpoint_*"))
            ),
            "round 1's first checkpoint",
            timeout=300,
        )
        stop(server)
        stopped_at = time.monotonic()
        out, _ = process.communicate(timeout=300)
        noticed_s = time.monotonic() - stopped_at
        assert process.returncode == 2, out[-3000:]
        flat = out.replace("\n", " ")
        assert "the tracking server stopped answering" in flat and "the round is kept" in flat
        kept = state_of(root)
        assert kept["stage"] == "augmented" and kept["experiment_path"] and kept["round_run_id"]
        beat = json.loads((root / "output" / "flywheel_heartbeat.json").read_text())
        assert beat["status"] == "error" and beat["step"] == "tune"  # where the round was when it failed
        assert "the tracking server stopped answering ([Errno 111] Connection refused)" in beat["error"], beat
        assert "the tracking server stopped answering ([Errno 111] Connection refused)" in flat  # as told

        server = start_mlflow_server(tmp_path / "server", port)  # back, same store
        wait_for(lambda: server_up(uri), "mlflow server, again")
        code, out = flywheel(root, "--rounds", "1", f"tracking.uri={uri}")
        assert code == 0, out[-3000:]
        client = MlflowClient(tracking_uri=uri)
        exp = client.get_experiment_by_name(root.name).experiment_id
        runs = client.search_runs([exp], max_results=1000)
        assert [r.info.run_name for r in runs if r.info.status == "RUNNING"] == []
        (round_run,) = [r for r in runs if r.data.tags.get("forge.kind") == "round"]
        assert round_run.info.run_id == kept["round_run_id"] and round_run.info.status == "FINISHED"
        assert round_run.data.tags.get("forge.restored") == "true"
        trials = [r for r in runs if r.data.tags.get("forge.kind") == "trial"]
        trial_ids = [t.data.tags["forge.trial_id"] for t in trials]
        assert len(trial_ids) == len(set(trial_ids)) == 2
        assert all(len(client.get_metric_history(t.info.run_id, "train/loss")) >= 1 for t in trials)
        assert len(client.search_model_versions(f"name = '{root.name}'")) == 1
    finally:
        stop(server)
    proof(
        "MLflow faults",
        "the tracking server stops during round 1's trials, then comes back",
        f"the flywheel stopped {noticed_s:.0f} s later with exit 2 and the round kept (run, Ray Tune state); "
        f"the next run continued it: 1 round run ({round_run.info.status}), {len(trials)} trial runs for "
        f"{len(set(trial_ids))} trials, 0 RUNNING, 1 version",
    )
