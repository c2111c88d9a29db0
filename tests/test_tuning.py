"""Rounds on a real local Ray runtime, recorded in a real MLflow store."""

from __future__ import annotations

import csv
import io
import json
import re
import tempfile
from pathlib import Path

import pytest
from conftest import FAST, run_cli
from mlflow import MlflowClient

from forge_ml.compose import compose_config
from forge_ml.faults import ENV as FAILPOINTS
from forge_ml.heartbeat import TrialCounts
from forge_ml.planner.history import read_history
from forge_ml.search import with_space
from forge_ml.tracking import Tracker
from forge_ml.tuning import callback
from forge_ml.tuning.engine import next_round_name, run_round
from trainables.sft import FAULT_ENV, OOM_FAULT_ENV

pytestmark = pytest.mark.slow
ROUND = [*FAST, "tune.max_concurrent_trials=2", "tune.resources.cpu=1", "tune.num_cpus=2"]


def client_for(project) -> tuple[MlflowClient, str]:
    client = MlflowClient(tracking_uri=f"sqlite:///{project.root / 'mlflow.db'}")
    return client, client.get_experiment_by_name(project.root.name).experiment_id


def runs_of_kind(project, kind: str) -> list:
    client, exp = client_for(project)
    return client.search_runs([exp], filter_string=f"tags.`forge.kind` = '{kind}'")


def test_round_leaves_a_round_run_with_one_nested_run_per_trial(small_project, capsys, monkeypatch):
    monkeypatch.setattr(callback, "STATUS_EVERY_S", 1.0)  # the periodic progress line, every second
    cfg = compose_config(small_project, [*ROUND, "tune.num_samples=4", "tune.scheduler=fifo"])
    space = {"lora.r": "choice(4,8)", "training.learning_rate": "tag(log, interval(1e-3, 1e-2))"}
    counts = []  # where the trials stand at each line (the flywheel's heartbeat is told)
    result = run_round(with_space(cfg, space), on_trials=counts.append)

    client, _ = client_for(small_project)
    finished = [c.finished for c in counts]  # FIFO: each runs to its end
    assert sorted(set(finished)) in ([0, 1, 2, 3, 4], [1, 2, 3, 4]) and finished == sorted(finished)
    assert any(c.running == 2 and c.finished == 0 for c in counts)  # told before any trial ended
    assert counts[-1] == TrialCounts(running=0, finished=4, stopped=0, failed=0, total=4)
    (round_run,) = runs_of_kind(small_project, "round")
    trials = runs_of_kind(small_project, "trial")
    assert round_run.info.run_name == "tune-001" and round_run.info.status == "FINISHED"
    assert len(trials) == 4 and len(result.trials) == 4
    assert {t.data.tags["mlflow.parentRunId"] for t in trials} == {round_run.info.run_id}
    by_id = {t.trial_id: t for t in result.trials}
    for run in trials:
        record = by_id[run.data.tags["forge.trial_id"]]
        assert run.info.status == "FINISHED"
        assert run.data.params["lora.r"] == str(record.config["lora.r"])
        assert float(run.data.params["training.learning_rate"]) == pytest.approx(
            record.config["training.learning_rate"]
        )
        assert run.data.params["training.epochs"] == "2"
        for metric in ("train/loss", "dev/loss"):
            assert [m.step for m in client.get_metric_history(run.info.run_id, metric)] == [1, 2]
        assert 0.0 <= run.data.metrics["dev/accuracy"] <= 1.0

    best = min(result.trials, key=lambda t: t.metrics["dev/loss"])
    assert result.best.trial_id == best.trial_id
    said = " ".join(capsys.readouterr().err.split())  # the progress lines, unwrapped
    progress = said.split("trials: ")[1:]
    assert progress and f"best dev/loss {best.metrics['dev/loss']:.4f} ({best.trial_id})" in progress[-1], (
        progress
    )
    # Lines come while trials run, not only when one ends: every second here (60 s by default), each
    # with the epochs reported so far and the round's clock; the last says all 8 (4 trials x 2 epochs).
    periodic = [p for p in progress if p.startswith("2 running, 0 finished")]
    assert periodic, progress
    # "of 4" from the first line on: Ray creates the trials two at a time, the round runs 4
    assert all(" failed of 4 — " in p for p in progress) and all(c.total == 4 for c in counts), progress
    reported = [int(re.search(r"; (\d+) epochs? reported, ", p).group(1)) for p in progress]
    assert reported == sorted(reported) and reported[-1] == 8, progress
    assert all(re.search(r"reported, (\d+ s|\d+ min \d+ s) in", p) for p in progress), progress
    # ...and, while trials run, where each is inside its epoch (the trials post it to the round's board)
    ids = "|".join(re.escape(t.trial_id) for t in result.trials)
    assert any(re.search(rf"in; now ({ids}) epoch [12] at \d+ %", p) for p in periodic), periodic
    for record in result.trials:  # a trial's model is its last checkpoint, the one its last report describes
        kept = Path(record.checkpoint)  # the final report's adapter: no trainer state, unlike an epoch's
        assert (kept / "adapter_model.safetensors").is_file() and not (kept / "trainer_state.json").exists()
        history = client.get_metric_history(record.run_id, "dev/loss")
        assert record.metrics["dev/loss"] == pytest.approx(max(history, key=lambda m: m.step).value)
    assert round_run.data.tags["forge.best_trial_id"] == best.trial_id
    assert round_run.data.metrics["best/dev/loss"] == pytest.approx(best.metrics["dev/loss"])
    assert round_run.data.params["tune.space.lora.r"] == "choice(4,8)"
    assert round_run.data.params["tune.num_samples"] == "4"
    for run in trials:  # a trial ran the round's config with its sampled point set, nothing else changed
        differ = {k for k, v in run.data.params.items() if round_run.data.params.get(k) != v}
        assert differ <= set(space), differ
    table = client.download_artifacts(round_run.info.run_id, "round/trials.csv")
    rows = list(csv.DictReader(io.StringIO(Path(table).read_text())))
    assert sorted(r["trial_id"] for r in rows) == sorted(by_id)
    adapters = [a.path for a in client.list_artifacts(best.run_id, "adapter")]
    assert "adapter/adapter_model.safetensors" in adapters
    others = [t for t in result.trials if t.trial_id != best.trial_id]
    assert all(not client.list_artifacts(t.run_id, "adapter") for t in others)  # top_k = 1
    _rounds_outside_the_flywheel_keep_their_own_names(small_project, cfg, result)


def _rounds_outside_the_flywheel_keep_their_own_names(project, cfg, result) -> None:
    """A round run by hand is tune-NNN, counted apart from the flywheel's round-NNN, and the planner
    reads its trials as no flywheel round's (one sequence for both named two runs round-001, and the
    offline planner's hypothesis named the hand-run round's best trial as round 1's)."""
    tracker = Tracker(cfg, project)
    with tracker.start_run(
        "round-001", {"forge.kind": "round", "forge.round": "round-001", "forge.flywheel": "true"}
    ) as flywheel_round:
        trial = tracker.client.create_run(
            tracker.experiment_id,
            run_name="trial",
            tags={
                "forge.kind": "trial",
                "forge.trial_id": "fly",
                "mlflow.parentRunId": flywheel_round.run_id,
            },
        )
        tracker.client.set_terminated(trial.info.run_id)
    assert next_round_name(tracker) == "tune-002"  # the flywheel's rounds are not counted
    history = read_history(cfg, tracker.client, tracker.experiment_id, project.output)
    where = {t.trial_id: (t.round, t.where) for t in history.trials}
    assert where.pop("fly") == (1, "round 1")
    assert set(where) == {t.trial_id for t in result.trials}
    assert set(where.values()) == {(0, "tune-001")}
    assert sorted((r.round, r.name) for r in history.rounds) == [(0, "tune-001"), (1, "round-001")]


def test_a_trial_waiting_for_a_cpu_is_counted_pending(small_project, capsys, monkeypatch):
    """Two trials at a time on a runtime with one CPU: the second waits, and the round's lines say
    so (on a cluster: a trial waiting for a free GPU)."""
    monkeypatch.setattr(callback, "STATUS_EVERY_S", 0.5)
    one_cpu = [*FAST, "tune.max_concurrent_trials=2", "tune.resources.cpu=1", "tune.num_cpus=1"]
    cfg = compose_config(
        small_project, [*one_cpu, "tune.num_samples=2", "tune.scheduler=fifo", "training.epochs=1"]
    )
    result = run_round(with_space(cfg, {"lora.r": "choice(4,8)"}))
    said = " ".join(capsys.readouterr().err.split())
    assert "trials: 1 running, 1 pending, 0 finished, 0 stopped early, 0 failed of 2 — " in said, said
    assert [t.status for t in result.trials] == ["FINISHED", "FINISHED"]


def test_asha_stops_bad_configurations_early(small_project, monkeypatch, tmp_path):
    # A stopped trial unwinds for 3 s before Ray hands its actor to the next trial (a busy machine
    # takes that long; Ray waits 2 s by default, then fails the next trial and can hang the round).
    monkeypatch.setenv(FAILPOINTS, "trial.stopped=sleep:3")
    scratch = tmp_path / "tmpdir"  # the trials' TMPDIR and the driver's
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    cfg = compose_config(
        small_project,
        [
            *ROUND,
            "training.epochs=3",
            "tune.num_samples=4",
            "tune.searcher=random",
            "tune.scheduler=asha",
            "tune.grace_period=1",
            "tune.reduction_factor=2",
        ],
    )
    good, bad = {"training.learning_rate": 5e-3}, {"training.learning_rate": 1e-6}
    result = run_round(
        with_space(cfg, {"training.learning_rate": "choice(5e-3, 1e-6)"}), first_points=[good, bad, bad, bad]
    )
    stopped = [t for t in result.trials if t.status == "STOPPED"]
    assert stopped and all(t.config == bad for t in stopped)
    assert {t.status for t in result.trials} == {"FINISHED", "STOPPED"}  # none failed
    assert len({t.trial_id for t in result.trials}) == 4
    assert result.best.config == good and result.best.status == "FINISHED"
    assert result.epochs_trained < 4 * 3  # ASHA saved epochs against running every trial to the end
    client, _ = client_for(small_project)
    for trial in stopped:
        run = client.get_run(trial.run_id)
        assert run.info.status == "FINISHED" and run.data.tags["forge.stopped_early"] == "true"
        assert len(client.get_metric_history(trial.run_id, "dev/loss")) < 3
        assert "dev/accuracy" not in run.data.metrics
    # Ray ends the actor of a trial stopped last without waiting for it to unwind: its scratch
    # (checkpoints with optimizer state) is swept once the round's runtime is down
    assert [p.name for p in scratch.iterdir() if p.name.startswith("forge-trial-")] == []


@pytest.mark.reliability
def test_a_trial_that_crashes_once_resumes_from_its_checkpoint(small_project, monkeypatch, proof, tmp_path):
    monkeypatch.setenv(FAULT_ENV, "1")
    scratch = tmp_path / "tmpdir"  # the trials' TMPDIR (Ray's own files stay under /tmp/ray)
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    cfg = compose_config(
        small_project,
        [*ROUND, "training.epochs=3", "tune.num_samples=1", "tune.scheduler=fifo", "tune.max_failures=1"],
    )
    result = run_round(with_space(cfg, {"lora.r": "choice(4)"}))
    (trial,) = result.trials
    assert trial.status == "FINISHED"
    client, _ = client_for(small_project)
    (run,) = runs_of_kind(small_project, "trial")
    assert run.info.status == "FINISHED"
    assert run.data.tags["forge.restored_from_checkpoint"] == "true"
    assert run.data.tags["forge.retries"] == "1" and "injected fault" in run.data.tags["forge.last_error"]
    steps = [m.step for m in client.get_metric_history(run.info.run_id, "dev/loss")]
    assert steps == [1, 2, 3]
    assert "dev/accuracy" in run.data.metrics
    # the restarted trial read its checkpoint in its own scratch, gone with it: nothing left behind
    assert sorted(p.name for p in scratch.iterdir()) == []
    proof(
        "Trial faults",
        "a trial raises once after epoch 1 (max_failures=1)",
        f"retried {run.data.tags['forge.retries']} time(s) from its epoch-1 checkpoint, FINISHED in the same MLflow run; "
        f"dev/loss logged at epochs {steps} (none twice)",
    )


@pytest.mark.reliability
def test_a_trial_that_keeps_failing_is_failed_alone_and_the_round_goes_on(small_project, monkeypatch, proof):
    monkeypatch.setenv(
        OOM_FAULT_ENV, "8"
    )  # the trial with lora.r=8 raises torch.cuda.OutOfMemoryError, every time
    cfg = compose_config(
        small_project, [*ROUND, "tune.num_samples=2", "tune.scheduler=fifo", "tune.max_failures=2"]
    )
    result = run_round(
        with_space(cfg, {"lora.r": "choice(4,8)"}), first_points=[{"lora.r": 4}, {"lora.r": 8}]
    )
    assert sorted(t.status for t in result.trials) == ["FAILED", "FINISHED"]
    assert result.best.config == {"lora.r": 4}
    trials = {r.data.params["lora.r"]: r for r in runs_of_kind(small_project, "trial")}
    assert (
        trials["8"].info.status == "FAILED"
        and "CUDA out of memory in this trial" in trials["8"].data.tags["forge.error"]
    )
    assert trials["8"].data.tags["forge.retries"] == "2"  # retried up to max_failures, then FAILED
    assert trials["4"].info.status == "FINISHED" and "forge.retries" not in trials["4"].data.tags
    (round_run,) = runs_of_kind(small_project, "round")
    assert round_run.info.status == "FINISHED"
    assert (
        round_run.data.metrics["round/trials_failed"] == 1
        and round_run.data.metrics["round/trials_finished"] == 1
    )
    proof(
        "Trial faults",
        "a trial fails on every attempt (CUDA out of memory, max_failures=2)",
        f"retried {trials['8'].data.tags['forge.retries']} time(s), then FAILED in MLflow with "
        f"'{trials['8'].data.tags['forge.error'][:60]}'; the other trial FINISHED and the round run FINISHED",
    )


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["lora.r=choice(4,"], "command line: lora.r=choice(4,: cannot parse it"),
        (["lora.rank=choice(4,8)"], "'lora.rank' is not a config key"),
        (["training.learning_rate=interval(1e-2, 1e-4)"], "must be below high"),
        (["lora.r=choice(4,0)"], "lora.r=0 gives an invalid config"),
        (["lora.r=choice(4,8)", "tune.resources.cpu=512"], "a trial asks for 512 CPU"),
    ],
)
def test_bad_round_input_exits_1_before_any_trial(small_project, args, fragment):
    result = run_cli("tune", *args, cwd=small_project.root)
    assert result.returncode == 1, result.stderr[-2000:]
    assert fragment in result.stderr.replace("\n", "")
    assert not runs_of_kind_safe(small_project)


def runs_of_kind_safe(project) -> list:
    if not (project.root / "mlflow.db").exists():
        return []
    return runs_of_kind(project, "round") + runs_of_kind(project, "trial")


def test_hydra_multirun_through_the_tune_sweeper(small_project):
    result = run_cli(
        "--json",
        "train",
        "-m",
        "hydra/sweeper=tune",
        "lora.r=choice(4,8)",
        "training.learning_rate=tag(log, interval(1e-3, 1e-2))",
        "hydra.sweeper.num_samples=2",  # the sweeper's own node, as Hydra's Optuna sweeper has n_trials
        "hydra.sweeper.scheduler=fifo",
        *ROUND,
        cwd=small_project.root,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (round_run,) = runs_of_kind(small_project, "round")
    trials = runs_of_kind(small_project, "trial")
    assert len(trials) == 2 and all(t.info.status == "FINISHED" for t in trials)
    sweep_dir = Path(round_run.data.tags["forge.sweep"])
    assert sweep_dir.is_relative_to(small_project.root / "output" / "multirun")
    assert (sweep_dir / "multirun.yaml").is_file()
    assert round_run.data.params["tune.space.lora.r"] == "choice(4,8)"
    assert (round_run.data.params["tune.num_samples"], round_run.data.params["tune.scheduler"]) == (
        "2",
        "fifo",
    )
    assert "tune-001: best trial" in result.stderr.replace("\n", " ")  # --json: tables go to stderr
    envelope = json.loads(result.stdout)
    assert envelope["run_id"] == round_run.info.run_id and envelope["failed_jobs"] == 0
    assert sorted(r["run_id"] for r in envelope["runs"]) == sorted(t.info.run_id for t in trials)

    # every trial fails: a runtime fault of the sweep (exit 2), not a config error
    failed = run_cli(
        "--json", "train", "-m", "hydra/sweeper=tune", "lora.r=choice(4,8)", "tune.num_samples=1",
        "tune.max_failures=0", *ROUND, cwd=small_project.root, env={OOM_FAULT_ENV: "*"},
    )  # fmt: skip
    error = json.loads(failed.stdout)["error"]
    assert failed.returncode == 2 and error["class"] == "RuntimeFault", failed.stderr[-3000:]
    assert "every trial failed" in error["message"]
