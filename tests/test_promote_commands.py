"""`forge-ml promote` on a real registry: the gate on a challenger, a forced promotion, bad input, and
a re-baseline after the scorer changed; the shared tiny adapter of tests/registry_checks.py."""

from __future__ import annotations

import getpass
from datetime import datetime, timedelta, timezone

import pytest
from registry_checks import COMMON, KEYS, aliases, cli, improved_pair, register_pair, runs_of

from forge_ml.gate import _fig


@pytest.mark.slow
def test_promote_runs_the_gate_on_the_challenger(shared):
    t, name = shared, "router-gated"
    first, second = improved_pair(t.outcome)
    register_pair(t, name, better=True)
    data, result = cli(t, "promote", f"registry.model_name={name}")
    assert result.returncode == 0, result.stderr[-3000:]
    assert list(data) == [*COMMON, *KEYS["promote"], "error"]
    assert data["version"] == "2" and data["decision"] == "promoted" and data["champion"] == "2"
    assert data["compared_to"] == "1" and data["reasons"] == [
        f"gold accuracy {_fig(second.accuracy)} > champion {_fig(first.accuracy)} "
        "(a challenger must be better; min_delta 0.00)"
    ]
    assert aliases(t, name) == {"champion": "2", "challenger": "2"}
    assert t.client.get_model_version(name, "2").tags["forge.gate.decision"] == "promoted"
    run = t.client.get_run(data["run_id"])
    assert run.data.tags["forge.kind"] == "promote" and run.data.tags["forge.promote.decision"] == "promoted"
    assert run.data.tags["forge.promote.model"] == name and run.data.tags["forge.promote.forced"] == "false"


@pytest.mark.slow
def test_promote_refused_then_forced_with_a_reason(shared):
    t, name = shared, "router-forced"
    register_pair(t, name, stages=True)
    data, result = cli(t, "promote", f"registry.model_name={name}", "registry.gate.min_delta=0.01")
    assert result.returncode == 3 == data["exit_code"] and data["success"] is False
    assert data["decision"] == "refused" and data["champion"] == "1" and data["error"] is None
    assert "+ min_delta 0.01" in data["reasons"][0]
    tags = t.client.get_model_version(name, "2").tags
    assert tags["forge.gate.decision"] == "refused" and "forge.force.reason" not in tags
    refused = t.client.get_model_version(name, "2").description  # no round: registered by hand
    assert refused.startswith("by hand — gold ") and refused.endswith(" — refused: " + data["reasons"][0])
    assert aliases(t, name)["champion"] == "1"
    refused_run = t.client.get_run(data["run_id"]).data.tags
    assert refused_run["forge.promote.decision"] == "refused" and refused_run["forge.promote.champion"] == "1"

    start = datetime.now(timezone.utc) - timedelta(seconds=2)
    args = ("promote", "--version", "2", "--force", "--reason", "hand-checked on 40 live prompts")
    data, result = cli(t, *args, f"registry.model_name={name}", "registry.stages=true")
    assert result.returncode == 0, result.stderr[-3000:]
    assert data["decision"] == "forced" and data["champion"] == "2" and data["compared_to"] == "1"
    user = getpass.getuser()
    assert data["reasons"] == [f"forced by {user}: hand-checked on 40 live prompts"]
    tags = t.client.get_model_version(name, "2").tags
    assert (
        tags["forge.force.reason"] == "hand-checked on 40 live prompts" and tags["forge.force.user"] == user
    )
    when = datetime.fromisoformat(tags["forge.force.time"])
    assert start <= when <= datetime.now(timezone.utc)
    assert tags["forge.force.run_id"] == data["run_id"]
    assert tags["forge.gate.decision"] == "refused"  # the gate's own record stays
    assert t.client.get_model_version(name, "2").description == (
        f"by hand — forced to champion by {user}, gate skipped: hand-checked on 40 live prompts"
    )
    assert aliases(t, name) == {"champion": "2", "challenger": "2"}
    assert t.client.get_model_version(name, "2").current_stage == "Production"
    assert t.client.get_model_version(name, "1").current_stage == "Archived"
    forced_run = t.client.get_run(data["run_id"]).data.tags
    assert forced_run["forge.kind"] == "promote" and forced_run["forge.promote.decision"] == "forced"
    assert forced_run["forge.force.user"] == user and forced_run["forge.promote.forced"] == "true"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--force"], "--force needs --reason"),
        (["--force", "--reason", "  "], "--force needs --reason"),
        (["--reason", "because"], "--reason goes with --force"),
        (["--version", "9"], "registered model 'router-untouched' has no version 9"),
        (["--rebaseline", "--version", "1"], "--rebaseline re-measures the champion: it takes no --version"),
    ],
)
def test_promote_bad_input_exits_1_and_changes_nothing(shared, args, fragment):
    t, name = shared, "router-untouched"
    if name not in [m.name for m in t.client.search_registered_models()]:
        register_pair(t, name)
    state = (aliases(t, name), [t.client.get_model_version(name, n).tags for n in ("1", "2")])
    promotes = len(runs_of(t, "promote"))
    data, result = cli(t, "promote", *args, f"registry.model_name={name}")
    assert result.returncode == 1 == data["exit_code"] and data["error"]["class"] == "InputError"
    assert fragment in data["error"]["message"]
    assert (aliases(t, name), [t.client.get_model_version(name, n).tags for n in ("1", "2")]) == state
    assert len(runs_of(t, "promote")) == promotes


PARTIAL_CREDIT = "def score(expected, actual):\n    return 1.0 if expected == actual.strip() else 0.5\n"


@pytest.mark.slow
def test_after_the_scorer_changed_the_gate_refuses_until_the_champion_is_rebaselined(shared):
    """The champion was scored by json_cmd; the same answers score higher under a partial-credit
    scorer.py. A candidate scored by it is not compared with the champion (exit 1, naming both rules)
    until `promote --rebaseline` re-measures the champion under it; a second re-baseline has nothing to do."""
    t, name = shared, "router-rescored"
    register_pair(t, name)
    (t.root / "scorer.py").write_text(PARTIAL_CREDIT)
    model, custom = f"registry.model_name={name}", "eval.scorer=custom"
    v3 = register_pair_version(t, name, scoring="custom (scorer.py sha256 0123456789ab)")
    data, result = cli(t, "promote", "--version", v3, model, custom)
    said = data["error"]["message"]
    assert result.returncode == 1 and "scored by custom (scorer.py sha256 0123456789ab)" in said
    assert f"the champion by {t.outcome.scoring}" in said and "forge-ml promote --rebaseline" in said
    assert aliases(t, name)["champion"] == "1"

    data, result = cli(t, "promote", "--rebaseline", model, custom)
    assert result.returncode == 0, result.stderr[-3000:]
    assert data["decision"] == "rebaselined" and data["version"] == data["champion"] == "1"
    tags = t.client.get_model_version(name, "1").tags
    assert tags["forge.gold_scoring"].startswith("custom (scorer.py sha256 ")
    assert tags["forge.rebaseline.previous_gold_scoring"] == t.outcome.scoring == "json_cmd (field cmd)"
    bits = tags["forge.gold_outcomes"]  # 1: the answer is the expected text exactly; else scored 0.5
    assert len(bits) == len(t.gold) and float(tags["forge.gold_accuracy"]) == pytest.approx(
        (bits.count("1") + 0.5 * bits.count("0")) / len(bits)
    )
    assert data["reasons"][0].startswith("re-baselined champion v1: gold accuracy ")
    assert runs_of(t, "promote")[0].data.tags["forge.promote.decision"] == "rebaselined"
    data, result = cli(t, "promote", "--rebaseline", model, custom)
    assert result.returncode == 0 and data["decision"] == "unchanged", result.stderr[-3000:]


def register_pair_version(t, name: str, *, scoring: str) -> str:
    """Register the shared adapter once more under `name`, from a run of its own, its gold outcome
    scored by `scoring`."""
    from dataclasses import replace

    from registry_checks import _base_ref

    from forge_ml.config.registry import RegistryConfig
    from forge_ml.registry import Registry

    run = t.client.create_run(t.client.get_run(t.train_run).info.experiment_id)  # a version is one run's
    t.client.set_terminated(run.info.run_id)
    registry = Registry(RegistryConfig(), t.client, name)
    version = registry.register(
        run.info.run_id,
        outcome=replace(t.outcome, scoring=scoring),
        adapter_dir=t.adapter,
        base=_base_ref(t),
        system_prompt=t.system_prompt,
        system_role=True,
        max_new_tokens=24,
    )
    return str(version.version)


@pytest.mark.slow
def test_rebaseline_without_a_champion_exits_1(shared):
    data, result = cli(shared, "promote", "--rebaseline", "registry.model_name=router-nobody")
    assert (
        result.returncode == 1 and "router-nobody has no champion to re-measure" in data["error"]["message"]
    )
