"""`forge-ml train --register`: the by-hand path to the registry, train → register → promote → load."""

from __future__ import annotations

import json
import warnings

import mlflow
import pytest
from command_checks import client_of
from conftest import FAST, run_cli, write_jsonl

from forge_ml.data.examples import dataset_hash, read_examples

pytestmark = pytest.mark.slow


def _train(root, *args: str):
    result = run_cli("-p", str(root), "--json", "train", "--register", *FAST, *args)
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1, result.stdout + result.stderr[-3000:]
    return result, json.loads(lines[0])


def _promote(root, *args: str):
    result = run_cli("-p", str(root), "--json", "promote", *args)
    return result, json.loads(result.stdout.strip().splitlines()[-1])


def test_a_registered_training_run_is_gated_by_promote_and_served_from_the_registry(
    small_project, monkeypatch
):
    root, name = small_project.root, small_project.root.name
    client, _ = client_of(root)

    result, data = _train(root)
    assert result.returncode == 0, result.stderr[-3000:]
    assert data["version"] == "1" and data["runs"][0]["version"] == "1"
    version = client.get_model_version(name, "1")
    assert version.run_id == data["run_id"]
    assert client.get_registered_model(name).aliases == {"challenger": 1}
    gold = read_examples(root / "dataset" / "gold.jsonl")
    # the model's page says what it is for and how it is gated, as after a flywheel round
    description = client.get_registered_model(name).description
    assert description.startswith(small_project.mission_summary().strip())
    assert (
        f"({len(gold)} examples, hash {dataset_hash(gold)[:12]})" in description
        and "**Gate:**" in description
    )
    assert version.tags["forge.registered_by"] == "train"
    assert version.tags["forge.gold_hash"] == dataset_hash(gold)
    assert float(version.tags["forge.gold_accuracy"]) == pytest.approx(data["gold_accuracy"])
    assert len(version.tags["forge.gold_outcomes"]) == len(gold)
    assert "registered as" in result.stderr and "promote --version 1" in result.stderr

    result, promoted = _promote(root)
    assert result.returncode == 0, result.stderr[-3000:]
    assert promoted["decision"] == "promoted" and promoted["champion"] == "1"

    # the same settings and seed again: the same gold outcome, a tie, which the gate refuses (exit 3)
    result, again = _train(root)
    assert result.returncode == 0, result.stderr[-3000:]
    assert again["version"] == "2" and again["gold_accuracy"] == data["gold_accuracy"]
    result, refused = _promote(root, "--version", "2")
    assert result.returncode == 3, result.stderr[-3000:]
    assert refused["decision"] == "refused" and refused["champion"] == "1"
    assert client.get_registered_model(name).aliases == {"champion": 1, "challenger": 2}

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{root / 'mlflow.db'}")
    with warnings.catch_warnings(record=True) as caught:  # a served version loads without library chatter
        warnings.simplefilter("always")
        model = mlflow.pyfunc.load_model(f"models:/{name}@champion")
    assert not [w for w in caught if "is_gradient_checkpointing" in str(w.message)]
    prompts = [e.user for e in gold[:2]]
    assert len(model.predict(prompts)) == 2


def test_register_is_refused_before_training_when_the_champion_was_measured_on_other_gold(small_project):
    root, name = small_project.root, small_project.root.name
    result, _ = _train(root)
    assert result.returncode == 0, result.stderr[-3000:]
    assert _promote(root)[0].returncode == 0
    client, experiment = client_of(root)
    runs_before = len(client.search_runs([experiment], max_results=100))

    gold_path = root / "dataset" / "gold.jsonl"
    write_jsonl(gold_path, [json.loads(line) for line in gold_path.read_text().splitlines()][:-1])
    result, data = _train(root)
    assert result.returncode == 1, result.stderr[-3000:]
    assert data["error"]["class"] == "ConfigError" and "gold set changed" in data["error"]["message"]
    assert len(client.search_runs([experiment], max_results=100)) == runs_before
    assert set(client.get_registered_model(name).aliases) == {"champion", "challenger"}
    assert [v.version for v in client.search_model_versions(f"name = '{name}'")] == [1]
