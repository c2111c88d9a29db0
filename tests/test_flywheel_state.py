"""The flywheel's typed state and journal: saved and read back, including files written by earlier versions."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

from forge_ml import journal
from forge_ml.errors import InputError
from forge_ml.flywheel_state import (
    STATE,
    AugmentSummary,
    BestTrial,
    GateRecord,
    PlannerRecord,
    RoundState,
    load_state,
    save_state,
)
from forge_ml.llm import Usage
from forge_ml.models.loader import BaseModelRef
from forge_ml.planner.plan import ExperimentPlan
from forge_ml.project import Project

PLAN = {
    "hypothesis": "a higher rank",
    "search_space": {"lora.r": "choice(8,16)"},
    "num_samples": 3,
    "fixed_overrides": {"training.epochs": 2},
    "forge_yaml_patches": {},
    "background_additions": "",
    "augment_focus": ["hover"],
    "augment_n": 10,
}
# What the flywheel wrote before its state was typed: plain dicts, `{}` for a stage not reached.
EARLIER_VERSION = {
    "round": 2,
    "stage": "tuned",
    "round_run_id": "abc",
    "plan": PLAN,
    "planner": {
        "source": "claude",
        "fallback": False,
        "reason": "",
        "usage": {
            "input_tokens": 10,
            "output_tokens": 5,
            "cache_write_tokens": 0,
            "cache_read_tokens": 0,
            "requests": 1,
        },
        "cost_usd": 0.01,
    },
    "experiment_path": "/tmp/x",
    "checkpoint_shape": {"lora.bias": "none"},
    "augment": {"added": 10, "size": 100, "hash": "h", "writer": "claude"},
    "best": {
        "trial_id": "t1",
        "run_id": "r1",
        "checkpoint": "/tmp/c",
        "metrics": {"dev/loss": 1.5},
        "base": {"source": "/m", "revision": None, "built_locally": True},
        "restored": False,
    },
    "gate": {},
    "started": 1.0,
}


@pytest.fixture
def project(tmp_path) -> Project:
    (tmp_path / "output").mkdir()
    return Project(tmp_path)


def test_state_written_by_an_earlier_version_is_read_typed(project):
    (project.output / STATE).write_text(json.dumps({"current": EARLIER_VERSION}))
    state = load_state(project)
    assert state.stage == "tuned" and state.reached("augmented") and not state.reached("gated")
    assert state.plan == ExperimentPlan(**PLAN)
    assert state.planner == PlannerRecord("claude", False, "", Usage(10, 5, 0, 0, 1), 0.01)
    assert state.augment == AugmentSummary(10, 100, "h", "claude")
    assert state.best.base == BaseModelRef("/m", None, True) and state.best.metrics == {"dev/loss": 1.5}
    assert state.gate is None and state.config is None  # not reached; not saved by that version


def test_state_round_trips_through_its_file(project):
    state = RoundState(
        round=4,
        stage="gated",
        round_run_id="run",
        plan=ExperimentPlan(**PLAN),
        planner=PlannerRecord("offline", True, "invalid plan", Usage(), 0.0),
        config={"name": "x", "lora": {"r": 8}},
        augment=AugmentSummary(1, 2, "h", "generator.py"),
        best=BestTrial("t", None, None, {"dev/loss": 1.0}, BaseModelRef("/m", "rev", False), True),
        gate=GateRecord("3", False, ["gold accuracy 0.5 < 0.6"], 0.5, {"hover": 0.5}, 0.6),
    )
    save_state(project, state)
    assert load_state(project) == state
    assert state.planner.label == "offline (fallback)"
    save_state(project, None)
    assert load_state(project) is None


@pytest.mark.parametrize(
    "damage",
    [
        {"stage": "sideways"},
        {"plan": {"hypothesis": "no space"}},
        {"best": {"trial_id": "t"}},
        {"planner": "claude"},
    ],
)
def test_a_damaged_state_names_the_file_and_what_to_do(project, damage):
    (project.output / STATE).write_text(json.dumps({"current": {**EARLIER_VERSION, **damage}}))
    with pytest.raises(InputError) as caught:
        load_state(project)
    assert str(project.output / STATE) in str(caught.value) and "remove it" in str(caught.value)
    assert caught.value.exit_code == 1


def test_journal_lines_of_an_earlier_version_name_the_round_iteration(project):
    record = journal.RoundRecord(
        round=1,
        hypothesis="h",
        plan=ExperimentPlan(**PLAN),
        planner="claude",
        dev_accuracy=0.5,
        gold_accuracy=0.4,
        gold_per_category={"hover": 0.4},
        promoted=True,
        gate_reasons=[],
        champion_accuracy=0.4,
        dataset_hash="h",
        dataset_size=10,
        examples_added=2,
        round_run_id="r",
        best_run_id=None,
        version="1",
        wall_s=3.0,
    )
    old = {**asdict(record), "iteration": 1}
    del old["round"]
    path = project.output / journal.EXPERIMENTS
    path.write_text(json.dumps(old) + "\n" + "{damaged\n")
    assert journal.read_records(project) == [record]  # the damaged line is skipped with a warning
    second = journal.RoundRecord(**{**asdict(record), "round": 2, "plan": record.plan})
    journal.append_record(project, second)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["round"] for r in rows] == [1, 2] and "iteration" not in rows[0]
