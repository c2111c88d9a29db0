"""generate, patch, augment and clean end to end through the CLI with the project's generator.py:
admission, atomic writes, MLflow provenance, bad input and the flywheel's lock (Claude: test_data_claude)."""

from __future__ import annotations

import json
import os
import socket

import pytest
from conftest import write_jsonl
from data_checks import (
    OFFLINE,
    START,
    assert_dataset_input,
    canonical,
    cli,
    gold_inputs,
    start_project,
    the_run,
    write_failures,
)

from forge_ml.data.examples import read_examples


@pytest.fixture
def project(example_project):
    """drone-router with 40 canonical examples."""
    return start_project(example_project)


def test_generate_offline_into_an_output_file_leaves_canonical_alone(project):
    before = canonical(project).read_bytes()
    (project.root / "extra").mkdir()
    result, env = cli(project, "generate", "--n", "20", "--output", "extra/more.jsonl", env=OFFLINE)
    assert result.returncode == 0, result.stderr
    written = read_examples(project.root / "extra" / "more.jsonl")
    assert len(written) == 20 and {e.meta["source"] for e in written} == {"generate"}
    assert not {e.key for e in written} & (
        gold_inputs(project) | {e.key for e in read_examples(canonical(project))}
    )
    assert canonical(project).read_bytes() == before
    assert env["writer"] == "generator" and env["requests"] == 0 and env["cost_usd"] == 0
    assert env["output"] == str(project.root / "extra" / "more.jsonl") and env["dataset_size"] == 20
    run = the_run(project, "generate")
    assert assert_dataset_input(run, "more", project.root / "extra" / "more.jsonl") == env["dataset_hash"]
    assert "generate/cost_usd" not in run.data.metrics and run.data.params["data.writer"] == "generator"


@pytest.mark.parametrize("command", [["generate"], ["patch", "more hovering"]])
def test_a_new_project_with_seed_only_gets_its_first_generated_examples(project, command):
    """The first command of a new project: canonical empty, the writer shown seed examples only."""
    canonical(project).write_text("")
    result, env = cli(project, *command, "--n", "6", env=OFFLINE)
    assert result.returncode == 0, result.stderr
    assert env["added"] == 6 and len(read_examples(canonical(project))) == 6


def test_patch_offline_generates_for_the_categories_the_description_names(project):
    result, env = cli(project, "patch", "More landing and hovering, please", "--n", "12", env=OFFLINE)
    assert result.returncode == 0, result.stderr
    assert env["focus"] == ["hover", "land"] and set(env["by_category"]) == {"hover", "land"}
    assert env["added"] == sum(env["by_category"].values()) == 12
    added = read_examples(canonical(project))[START:]
    assert len(added) == 12 and {(e.meta["source"], e.meta["focus"]) for e in added} == {
        ("patch", "hover,land")
    }
    assert the_run(project, "patch").data.metrics["data/added/land"] == env["by_category"]["land"]


def test_augment_offline_splits_n_by_the_latestwrite_failures(project):
    (project.root / "output").mkdir(exist_ok=True)
    write_failures(project, ["hover", "hover", "hover", "loiter"])
    result, env = cli(project, "augment", "--n", "8", env=OFFLINE)
    assert result.returncode == 0, result.stderr
    assert env["focus"] == ["hover", "loiter"] and set(env["by_category"]) == {"hover", "loiter"}
    assert env["added"] == 8 and env["by_category"]["hover"] > 2 * env["by_category"]["loiter"]
    added = read_examples(canonical(project))[START:]
    assert {e.meta["source"] for e in added} == {"augment"}
    run = the_run(project, "augment")
    assert (
        run.data.tags["forge.data.focus"] == "hover,loiter" and run.data.metrics["data/source/augment"] == 8
    )
    assert_dataset_input(run, "canonical", canonical(project))


def test_clean_keeps_hand_written_examples_and_records_the_version(project):
    lines = canonical(project).read_text().splitlines()
    hand = {
        "messages": [
            {"role": "user", "content": "hold it"},
            {"role": "assistant", "content": '{"cmd": "hover", "args": {"duration_s": 0}}'},
        ],
        "meta": {"category": "hover", "source": "hand"},
    }
    write_jsonl(canonical(project), [*lines, hand])
    assert cli(project, "patch", "landing", "--n", "3", env=OFFLINE)[0].returncode == 0
    result, env = cli(project, "clean", env=OFFLINE)
    assert result.returncode == 0, result.stderr
    assert env["removed"] == {"generate": START, "patch": 3} and env["kept"] == 1
    assert [e.user for e in read_examples(canonical(project))] == ["hold it"]
    run = the_run(project, "clean")
    assert run.info.run_id == env["run_id"]
    assert run.data.metrics["data/removed"] == START + 3 and run.data.metrics["data/removed/patch"] == 3
    assert run.data.metrics["data/size"] == 1 and run.data.metrics["data/source/hand"] == 1
    assert_dataset_input(run, "canonical", canonical(project))


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["generate", "--n", "0"], "--n 0"),
        (["generate", "--batch-size", "0"], "--batch-size 0"),
        (["generate", "--output", "missing/more.jsonl"], "missing does not exist"),
        (["generate", "--output", "dataset/gold.jsonl"], "gold set"),
        (
            ["generate", "--output", "forge.yaml"],
            "forge.yaml: the file exists; name a new file, or pass --force",
        ),
        (["generate", "--batch"], "--batch needs Claude"),
        (["augment"], "eval_failures.jsonl: not found"),
        (["augment", "empty-failures"], "eval_failures.jsonl: holds no failures"),
        (["patch", ""], "description is empty"),
        (["patch", "bananas and apples"], "'bananas and apples' names none"),
        (["patch", "hover", "--n", "-3"], "--n -3"),
    ],
)
def test_bad_input_exits_1_naming_it_and_changes_nothing(project, args, fragment):
    if "empty-failures" in args:
        args = [a for a in args if a != "empty-failures"]
        (project.root / "output").mkdir(exist_ok=True)
        (project.root / "output" / "eval_failures.jsonl").write_text("")
    before = canonical(project).read_bytes()
    result, env = cli(project, *args, env=OFFLINE)
    assert result.returncode == 1 == env["exit_code"] and env["success"] is False
    assert fragment in env["error"]["message"] and fragment in result.stderr
    assert canonical(project).read_bytes() == before
    assert not (project.root / "mlflow.db").exists()  # refused before any MLflow run


@pytest.mark.parametrize("args", [["generate", "--n", "5"], ["clean"], ["promote"]])
def test_a_running_flywheel_holds_canonical_and_the_champion(project, args):
    lock = project.root / "output" / "flywheel.lock"
    lock.parent.mkdir(exist_ok=True)
    lock.write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": 0}))
    before = canonical(project).read_bytes()
    result, env = cli(project, *args, env=OFFLINE)
    assert result.returncode == 1 and f"{lock}: another forge-ml flywheel" in env["error"]["message"]
    assert canonical(project).read_bytes() == before and lock.exists()
    assert not (project.root / "mlflow.db").exists()
