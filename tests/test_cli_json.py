"""`--json`: one envelope on stdout per command, with a pinned key set, also on failure."""

from __future__ import annotations

import json

import pytest
from conftest import run_cli

from forge_ml.commands import all_commands

COMMON = ["command", "success", "exit_code", "run_id", "config_hash"]
KEYS = {
    "init": ["project", "git"],
    "status": [
        "project",
        "datasets",
        "canonical_by_source",
        "champion",
        "rounds_done",
        "max_rounds",
        "last_round",
        "heartbeat",
        "liveness",
    ],
    "clean": ["removed", "kept", "path"],
    "ui": [],
    "train": ["runs", "failed_jobs", "gold_accuracy", "adapter", "version"],
    "tune": ["round", "trials", "best_trial", "best_run_id", "best_metrics", "wall_s"],
    "eval": "target accuracy correct total per_category unfinished results_path version judge".split(),  # noqa: SIM905
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
        (["tune", "lora.r=choice(4,"], 1, "ConfigError", "lora.r=choice(4,: cannot parse it", False),
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


@pytest.mark.parametrize(
    "args, command, fragment",
    [
        (["--json", "bogus"], None, "invalid choice: 'bogus'"),
        (["--json", "generate", "--n", "abc"], "generate", "argument -n/--n: invalid int value: 'abc'"),
        (["generate", "--json", "--batch-size"], "generate", "argument --batch-size: expected one argument"),
    ],
)
def test_a_command_line_that_does_not_parse_still_answers_with_an_envelope(args, command, fragment):
    result = run_cli(*args)
    data = envelope(result)
    assert result.returncode == 1 and data["exit_code"] == 1 and data["success"] is False
    assert data["command"] == command
    assert data["error"]["class"] == "UsageError" and fragment in data["error"]["message"]
    assert fragment in result.stderr  # people still read it on stderr


def test_help_with_json_goes_to_stderr_and_stdout_keeps_the_envelope():
    result = run_cli("--json", "status", "--help")
    data = envelope(result)
    assert result.returncode == 0 and data["command"] == "status" and data["error"] is None
    assert "usage: forge-ml status" in result.stderr


def test_global_flags_are_accepted_after_the_command(tmp_path):
    root = tmp_path / "proj"
    assert run_cli("-p", str(tmp_path), "init", "proj", "--example", "drone-router").returncode == 0
    after = run_cli("status", "-p", str(root), "--json")
    data = envelope(after)
    assert after.returncode == 0, after.stderr[-2000:]
    assert data["command"] == "status" and data["project"] == str(root)
    missing = run_cli("status", "--json", "-p", str(tmp_path / "nowhere"))
    assert missing.returncode == 1 and "nowhere: no forge.yaml here" in envelope(missing)["error"]["message"]
