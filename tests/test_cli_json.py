"""`--json`: one envelope on stdout per command, with a pinned key set, also on failure."""

from __future__ import annotations

import json

import pytest
from conftest import run_cli

from forge_ml.commands import all_commands

COMMON = ["command", "success", "exit_code", "run_id", "config_hash"]
KEYS = {
    "init": ["project"],
    "status": [
        "project",
        "datasets",
        "canonical_by_source",
        "champion",
        "rounds_done",
        "max_rounds",
        "last_round",
        "heartbeat",
    ],
    "clean": ["removed", "kept", "path"],
    "ui": [],
    "train": ["runs", "failed_jobs", "gold_accuracy", "adapter"],
    "tune": ["round", "trials", "best_trial", "best_run_id", "best_metrics", "wall_s"],
    "eval": ["target", "accuracy", "correct", "total", "per_category", "results_path", "version", "judge"],
    "flywheel": ["rounds_done", "stop_reason", "champion_accuracy", "target_reached", "rounds"],
}


def envelope(result) -> dict:
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1, result.stdout  # nothing but the envelope on stdout
    return json.loads(lines[0])


def test_every_command_declares_its_pinned_keys():
    declared = {c.name: list(c.keys) for c in all_commands()}
    assert {name: declared[name] for name in KEYS} == KEYS


def test_success_envelopes_of_init_status_and_clean(tmp_path):
    made = envelope(run_cli("-p", str(tmp_path), "--json", "init", "proj", "--example", "drone-router"))
    assert list(made) == [*COMMON, *KEYS["init"], "error"]
    assert made["success"] is True and made["error"] is None and made["project"] == str(tmp_path / "proj")
    root = tmp_path / "proj"

    status = envelope(run_cli("-p", str(root), "--json", "status"))
    assert list(status) == [*COMMON, *KEYS["status"], "error"]
    assert status["datasets"] == {"seed": 30, "canonical": 1138, "gold": 100}
    assert status["canonical_by_source"] == {"generate": 1138}
    assert status["champion"] is None and status["rounds_done"] == 0 and len(status["config_hash"]) == 12

    cleaned = envelope(run_cli("-p", str(root), "--json", "clean"))
    assert list(cleaned) == [*COMMON, *KEYS["clean"], "error"]
    assert cleaned["removed"] == {"generate": 1138} and cleaned["kept"] == 0


@pytest.mark.parametrize(
    ("args", "code", "error_class", "fragment", "has_hash"),
    [
        (["train", "lora.rank=8"], 1, "ConfigError", "lora.rank", False),
        (["eval"], 1, "InputError", "nothing trained yet", True),
        (["flywheel", "--rounds", "0"], 1, "ConfigError", "--rounds 0", False),
        (["tune", "lora.r=choice(4,"], 1, "ConfigError", "does not parse", False),
    ],
)
def test_failure_envelopes_carry_the_error_class_and_what_is_known(
    example_project, args, code, error_class, fragment, has_hash
):
    result = run_cli("-p", str(example_project.root), "--json", *args)
    data = envelope(result)
    assert result.returncode == code == data["exit_code"]
    assert list(data) == [*COMMON, *KEYS[args[0]], "error"]
    assert data["success"] is False and data["error"]["class"] == error_class
    assert fragment in data["error"]["message"]
    assert (data["config_hash"] is not None) == has_hash
