"""End to end through the CLI: a Hydra multirun of real trainings, checked in MLflow; eval; status."""

from __future__ import annotations

import json

import pytest
from conftest import FAST, THREADS, run_cli
from flywheel_checks import secret_hits
from mlflow import MlflowClient

SECRETS = {
    "ANTHROPIC_API_KEY": "sk-ant-api03-SENTINELsecretvalue0001",
    "HF_TOKEN": "hf_SENTINELsecretvalue00000001",
    "MLFLOW_TRACKING_PASSWORD": "SENTINELbasicauthpassword0002",
}


@pytest.mark.slow
@pytest.mark.reliability
def test_multirun_leaves_one_complete_run_per_job_then_eval_and_status(small_project, tmp_path, proof):
    root = small_project.root
    gold = len((root / "dataset" / "gold.jsonl").read_text().splitlines())
    shrunk = len((root / "dataset" / "canonical.jsonl").read_text().splitlines())
    elsewhere = tmp_path / "elsewhere"  # every path must resolve against the project, not the cwd
    elsewhere.mkdir()
    result = run_cli("-p", str(root), "train", "-m", "lora.r=4,8", *FAST, cwd=elsewhere, env=SECRETS)
    assert result.returncode == 0, result.stderr[-3000:]

    client = MlflowClient(tracking_uri=f"sqlite:///{root / 'mlflow.db'}")
    exp = client.get_experiment_by_name("small")
    runs = client.search_runs([exp.experiment_id], order_by=["params.`lora.r` ASC"])
    assert len(runs) == 2
    assert sorted(r.data.params["lora.r"] for r in runs) == ["4", "8"]
    assert len({r.data.tags["forge.sweep"] for r in runs}) == 1
    assert sorted(r.data.tags["forge.sweep_job"] for r in runs) == ["0", "1"]
    for run in runs:
        assert run.info.status == "FINISHED"
        params = run.data.params
        assert params["training.epochs"] == "2" and params["model.tiny.hidden_size"] == "64"
        assert params["eval.scorer"] == "json_cmd" and int(params["data.gold_size"]) == gold
        for metric in ("train/loss", "dev/loss"):
            history = client.get_metric_history(run.info.run_id, metric)
            assert [m.step for m in history] == [1, 2], metric
        metrics = run.data.metrics
        assert 0.0 <= metrics["gold/accuracy"] <= 1.0 and 0.0 <= metrics["dev/accuracy"] <= 1.0
        assert any(k.startswith("gold/accuracy/") for k in metrics)
        artifacts = [a.path for a in client.list_artifacts(run.info.run_id, "adapter")]
        assert "adapter/adapter_config.json" in artifacts and "adapter/adapter_model.safetensors" in artifacts
        contexts = {i.tags[0].value: i.dataset for i in run.inputs.dataset_inputs}
        assert set(contexts) == {"training", "validation", "evaluation"}
        assert contexts["training"].digest == run.data.tags["forge.data.train_hash"][:36]
        logged = json.dumps([params, run.data.tags])
        assert not any(secret in logged for secret in SECRETS.values())

    # the multirun ends with its jobs side by side, best gold accuracy first, named by what they vary
    table = result.stdout[result.stdout.index("multirun: 2 of 2 jobs trained") :]
    ranked = sorted(runs, key=lambda r: (-r.data.metrics["gold/accuracy"], -r.data.metrics["dev/accuracy"]))
    rows = [next(line for line in table.splitlines() if r.info.run_id[:8] in line) for r in ranked]
    assert [table.index(row) for row in rows] == sorted(table.index(row) for row in rows)
    for run, row in zip(ranked, rows, strict=True):
        cells = [cell.strip() for cell in row.strip("│ ").split("│")]
        assert cells[0] == f"lora.r={run.data.params['lora.r']}", row  # FAST's shared overrides left out
        assert cells[2].startswith(f"{run.data.metrics['gold/accuracy']:.3f} ("), row

    assert list(elsewhere.iterdir()) == []  # nothing written to the working directory
    assert len(list((root / "output" / "adapters").iterdir())) == 2
    # nothing under the project (the .hydra dirs of the sweep, mlflow.db, artifacts) holds a secret
    hits, files, size = secret_hits(list(SECRETS.values()), [root], [result.stdout, result.stderr])
    assert hits == [] and any(root.rglob(".hydra/config.yaml"))
    proof(
        "Security",
        "sentinel secrets in the environment of a Hydra multirun (`forge-ml train -m`)",
        f"0 hits in {files} files ({size / 1e6:.1f} MB: Hydra's saved .hydra configs, mlflow.db, artifacts) "
        "and the CLI's output",
    )

    # `forge-ml eval` re-evaluates the last adapter: same greedy outputs, same score
    last = json.loads((root / "output" / "last_train.json").read_text())
    result = run_cli("eval", *FAST, cwd=root)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((root / "output" / "eval_results.json").read_text())
    assert report["accuracy"] == pytest.approx(last["gold_accuracy"])
    assert report["total"] == gold and report["failure_count"] == gold - report["correct"]
    failures = (root / "output" / "eval_failures.jsonl").read_text().splitlines()
    assert len(failures) == report["failure_count"]

    status = run_cli("status", cwd=root)
    assert status.returncode == 0, status.stderr
    canonical = len((root / "dataset" / "canonical.jsonl").read_text().splitlines())
    assert canonical == shrunk + 30  # the 30 seed examples were merged on first use
    assert f"canonical │ {canonical}" in status.stdout
    scored = f"latest eval (gold) of run {last['run_id'][:8]}: accuracy {report['accuracy']:.3f}"
    assert scored in status.stdout and "judge" not in status.stdout and "train (" in status.stdout

    # too short a limit for gold's answers: warned (not refused: a look at one adapter), and every
    # output it cut is counted, printed, logged to MLflow and marked in eval_failures.jsonl
    result = run_cli("eval", *FAST, "eval.max_new_tokens=4", cwd=root)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"eval.max_new_tokens=4 is shorter than {gold} of the {gold} gold answers" in " ".join(
        result.stderr.split()
    )
    report = json.loads((root / "output" / "eval_results.json").read_text())
    rows = [json.loads(line) for line in (root / "output" / "eval_failures.jsonl").read_text().splitlines()]
    cut = report["unfinished"]
    assert cut > gold // 2 and cut == sum(1 for row in rows if row.get("unfinished"))
    assert f"{cut} of {gold} gold outputs stopped at eval.max_new_tokens" in result.stdout
    latest = client.search_runs(
        [exp.experiment_id], "tags.`forge.kind` = 'eval'", order_by=["start_time DESC"]
    )[0]
    assert latest.data.metrics["gold/unfinished"] == cut


@pytest.mark.slow
def test_demo_config_learns_the_task_well_above_chance(example_project):
    """`forge-ml train` on the full drone-router example (its 1138 pre-generated examples; 9 commands: chance ~0.11)."""
    result = run_cli("train", f"training.threads={THREADS}", cwd=example_project.root)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((example_project.root / "output" / "eval_results.json").read_text())
    assert report["total"] == 100
    assert report["accuracy"] >= 0.5, report
    assert len(report["per_category"]) == 9
