"""The plan fuzzer: planner replies drawn across the whole plannable space, driven through the real code.

Valid plans go through the whole config path without training (validate → forge.yaml patches →
compose → the round's one config → Ray Tune domains → each trial's config) and, in
`test_flywheel_runs_every_drawn_plan`, through real flywheel rounds with Claude played by a fake
Messages API. Invalid plans are rejected with the reason, repaired once, then replaced by the
offline plan: never a crash, never applied.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import asdict
from pathlib import Path

import pytest
from conftest import FAST, edit_config, run_cli, shrink_jsonl
from fake_anthropic import FakeAnthropic, Reply
from flywheel_checks import assert_consistent, assert_trials_ran_their_rounds_config, runs_of
from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import strategies as st
from plan_strategies import CATEGORIES, invalid_plans, valid_plans

from forge_ml.compose import compose_config
from forge_ml.config import BoundConfig, ForgeConfig, config_to_dict, validate_config
from forge_ml.config.overrides import config_value, set_dotted, with_overrides
from forge_ml.faults import ENV as FAILPOINTS
from forge_ml.flywheel_state import RoundState, state_from_dict
from forge_ml.planner import RoundPlanner, validate_plan
from forge_ml.planner.history import History
from forge_ml.planner.offline import offline_plan
from forge_ml.planner.plan import PlanError
from forge_ml.project import Project, init_project, patch_config
from forge_ml.search import parse_space, tune_space
from forge_ml.tracking import config_params

OVERRIDES = ["planner.timeout_s=3", "planner.max_retries=0"]
FUZZ = settings(
    deadline=None,
    derandomize=True,  # the same plans on every run: CI is reproducible; raise max_examples to explore more
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.large_base_example, HealthCheck.data_too_large],
)
# Counted by the tests below and printed at the end of the session (the closing note's figures).
FIGURES: dict[str, int] = {"valid plans": 0, "invalid plans": 0, "through the SDK": 0, "composed": 0}


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Project:
    """drone-router with the package's full default bounds (every key plannable), not the example's narrow ones."""
    from ruamel.yaml import YAML

    project = init_project(tmp_path_factory.mktemp("fuzz") / "router", example="drone-router")
    yaml = YAML()
    data = yaml.load(project.config_file.read_text(encoding="utf-8"))
    del data["planner"]["bounds"]
    with project.config_file.open("w", encoding="utf-8") as fh:
        yaml.dump(data, fh)
    return project


@pytest.fixture(scope="module")
def cfg(project) -> ForgeConfig:
    return compose_config(project, OVERRIDES)


@pytest.fixture(scope="module", autouse=True)
def _print_figures():
    yield
    if any(FIGURES.values()):
        print("\nplan fuzzer:", ", ".join(f"{k} {v}" for k, v in FIGURES.items()))


def inside(bound: BoundConfig, value) -> bool:
    if bound.choices is not None:
        return value in bound.choices
    return bound.low - 1e-12 <= value <= bound.high + 1e-12


def assert_set(cfg: ForgeConfig, key: str, value) -> None:
    got = config_value(cfg, key)
    assert got == value or (isinstance(value, float) and math.isclose(got, value)), (key, got, value)


@settings(FUZZ, max_examples=300)
@given(data=st.data())
def test_every_valid_plan_gives_one_round_config_that_its_trials_share(cfg, data):
    raw = data.draw(valid_plans(cfg))
    plan = validate_plan(raw, cfg)
    round_cfg = plan.apply(cfg)

    assert round_cfg.tune.num_samples == raw["num_samples"]
    assert round_cfg.tune.space == raw["search_space"]
    for key, value in raw["fixed_overrides"].items():
        assert_set(round_cfg, key, value)
    logged = config_params(round_cfg)  # what the round run logs when it opens
    assert logged["tune.num_samples"] == raw["num_samples"]

    params = parse_space(round_cfg.tune.space)
    assert len(plan.first_points) == len(raw.get("first_points", []))
    assert all(params[k].contains(v) for point in plan.first_points for k, v in point.items())
    domains = tune_space(params)  # what Ray Tune samples
    seed = data.draw(st.integers(0, 2**31 - 1))
    sampled = [
        {key: domain.sample(random_state=seed + n) for key, domain in domains.items()} for n in range(3)
    ]
    for point in [*plan.first_points, *sampled]:  # the plan's own points, then what Ray Tune would draw
        for key, value in point.items():
            assert inside(cfg.planner.bounds[key], value), (key, value)
        trial = config_params(with_overrides(round_cfg, point))  # what a trial trains and logs
        differ = {k for k in logged.keys() | trial.keys() if logged.get(k) != trial.get(k)}
        assert differ <= set(point), differ

    state = RoundState(round=3, stage="planned", plan=plan, config=config_to_dict(round_cfg))
    assert state_from_dict(json.loads(json.dumps(asdict(state)))) == state
    FIGURES["valid plans"] += 1


@settings(FUZZ, max_examples=40)
@given(data=st.data())
def test_patched_forge_yaml_composes_into_the_next_rounds_config(project, cfg, data):
    raw = data.draw(valid_plans(cfg))
    plan = validate_plan(raw, cfg)
    original = project.config_file.read_text(encoding="utf-8")
    try:
        patch_config(project.config_file, plan.forge_yaml_patches)
        # the next round composes forge.yaml (patched) and the command line, then applies its plan
        composed = compose_config(project, OVERRIDES)
        for key, value in plan.forge_yaml_patches.items():
            assert_set(composed, key, value)
        round_cfg = plan.apply(composed)
        for key, value in {**plan.forge_yaml_patches, **plan.fixed_overrides}.items():
            assert_set(round_cfg, key, plan.fixed_overrides.get(key, value))
    finally:
        project.config_file.write_text(original, encoding="utf-8")
    FIGURES["composed"] += 1


@settings(FUZZ, max_examples=400)
@given(data=st.data())
def test_every_invalid_plan_is_rejected_naming_what_is_wrong(cfg, data):
    raw, fragment = data.draw(invalid_plans(cfg))
    with pytest.raises(PlanError) as caught:
        validate_plan(raw, cfg)
    assert caught.value.problems and caught.value.exit_code == 1
    assert fragment in str(caught.value), (fragment, caught.value.problems)
    FIGURES["invalid plans"] += 1


@settings(FUZZ, max_examples=100)
@given(data=st.data())
def test_typed_overrides_give_the_same_config_as_the_schema_merge(cfg, data):
    """`with_overrides` skips OmegaConf for values already of their type: the result must be the same."""
    raw = data.draw(valid_plans(cfg))
    values = {**raw["fixed_overrides"], **raw["forge_yaml_patches"]}
    merged = config_to_dict(cfg)
    for key, value in values.items():
        set_dotted(merged, key, value)
    assert with_overrides(cfg, values) == validate_config(merged)


@pytest.fixture(scope="module")
def fake():
    with FakeAnthropic() as server, pytest.MonkeyPatch.context() as env:
        env.setenv("ANTHROPIC_API_KEY", "sk-ant-test-fuzz0123456789")
        env.setenv("ANTHROPIC_BASE_URL", server.base_url)
        yield server


@settings(FUZZ, max_examples=80, phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(data=st.data())
def test_invalid_claude_plans_go_back_once_then_fall_back_never_applied(fake, project, cfg, data):
    """Through the real SDK: the bad plan is sent back with its errors; a good repair is used, a bad one replaced."""
    bad, fragment = data.draw(invalid_plans(cfg))
    repaired = data.draw(st.booleans())
    repair = data.draw(valid_plans(cfg)) if repaired else data.draw(invalid_plans(cfg))[0]
    before = len(fake.requests)
    fake.script(
        Reply(tool="propose_experiment", tool_input=bad), Reply(tool="propose_experiment", tool_input=repair)
    )
    outcome = RoundPlanner(cfg, project).plan(cfg, History(), 2)

    _, second = fake.requests[before:]
    sent_back = second.body["messages"][2]["content"][0]
    assert sent_back["is_error"] is True and fragment in sent_back["content"]
    if repaired:
        assert outcome.source == "claude" and not outcome.fallback
        assert outcome.plan == validate_plan(repair, cfg)
    else:
        assert outcome.source == "offline" and outcome.fallback
        assert outcome.reason.startswith("invalid plan after one repair turn")
        assert outcome.plan == validate_plan(offline_plan(cfg, History(), round_number=2).to_dict(), cfg)
    FIGURES["through the SDK"] += 1


# -- real rounds -------------------------------------------------------------------------------------
ROUNDS = 9  # each round about 18 s on the CI machine (Ray trial, MLflow, the registry)
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "drone-router"


def _round_of(body: dict) -> int:
    return int(body["messages"][0]["content"].split("Plan round ", 1)[1].split(".", 1)[0])


def _written_examples(body: dict) -> dict:
    """write_examples: real examples of the example's generator, for the categories it knows."""
    sys.path.insert(0, str(EXAMPLE))
    try:
        generate = __import__("generator").generate
    finally:
        sys.path.pop(0)
    text = json.dumps(body["messages"])
    focus = [c for c in CATEGORIES if f'"{c}"' in text] or None
    rows = generate(12, seed=len(text), focus=focus)
    return {
        "examples": [
            {
                "user": r["messages"][0]["content"],
                "assistant": r["messages"][1]["content"],
                "category": r["meta"]["category"],
            }
            for r in rows
        ]
    }


@pytest.fixture
def rounds_project(small_project) -> Project:
    """A small project whose rounds a 2-core machine can afford: one epoch, 1 or 2 trials, 12 examples a round."""
    shrink_jsonl(small_project.root / "dataset" / "canonical.jsonl", 80)
    shrink_jsonl(small_project.root / "dataset" / "gold.jsonl", 9)
    for key, bound in {
        "training.epochs": {
            "choices": [1],
            "low": None,
            "high": None,
        },  # null: the packaged low/high would merge in
        "training.batch_size": {"choices": [16, 32]},
    }.items():
        edit_config(small_project, "planner", "bounds", key, bound)
    return small_project


@pytest.mark.slow
@settings(
    FUZZ,
    max_examples=1,
    phases=[Phase.generate],  # one draw of every round's plan; no shrinking of a run that trains
    suppress_health_check=[*FUZZ.suppress_health_check, HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_flywheel_runs_every_drawn_plan(rounds_project, data):
    """ROUNDS Claude rounds, each plan drawn from the whole plannable space; some first replies invalid (repaired), some
    invalid twice (offline plan instead); killed once mid-round (after its data was added). Every round completes, and each round run's params
    are what its trials ran."""
    root = rounds_project.root
    overrides = [
        *FAST,
        "training.epochs=1",
        "tune.num_samples=2",
        "planner.min_samples=1",
        "planner.max_samples=2",
        "planner.max_augment=12",
        "planner.augment_n=12",
        "flywheel.max_rounds=50",
    ]
    # Hypothesis's first example is its simplest (every draw its first choice: all replies valid, every
    # plan minimal); with one example allowed, reject that one so the rounds run a random draw
    assume(data.draw(st.integers(0, 2**16)) != 0)
    cfg = compose_config(rounds_project, overrides)
    plans = [data.draw(valid_plans(cfg)) for _ in range(ROUNDS)]
    kinds = data.draw(st.permutations((["valid", "valid", "repaired", "fallback"] * ROUNDS)[:ROUNDS]))
    broken = {n: data.draw(invalid_plans(cfg))[0] for n in range(1, ROUNDS + 1)}

    def propose(body: dict) -> dict:
        number = _round_of(body)
        repair_turn = len(body["messages"]) > 1
        kind = kinds[number - 1]
        if kind == "fallback" or (kind == "repaired" and not repair_turn):
            return broken[number]
        return plans[number - 1]

    with FakeAnthropic() as fake:
        fake.on_tool("propose_experiment", propose)
        fake.on_tool("write_examples", _written_examples)
        env = {"ANTHROPIC_API_KEY": "sk-ant-test-fuzz0123456789", "ANTHROPIC_BASE_URL": fake.base_url}
        killed = run_cli(
            "-p",
            str(root),
            "flywheel",
            "--rounds",
            "2",
            *overrides,
            env={**env, FAILPOINTS: "flywheel.augment=kill"},
        )
        assert killed.returncode != 0
        # resumed with a changed setting: the killed round keeps the config its run logged; later rounds take it
        args = ["-p", str(root), "flywheel", "--rounds", str(ROUNDS), *overrides, "eval.batch_size=4"]
        done = run_cli(*args, env=env, timeout=1800)
        assert done.returncode == 0, done.stderr[-4000:]
        assert (
            "round 1 continues under the config its run logged; changed since: eval.batch_size" in done.stderr
        )

    assert_consistent(root, ROUNDS)
    trials = assert_trials_ran_their_rounds_config(root)
    batch = {r.info.run_name: r.data.params["eval.batch_size"] for r in runs_of(root, "round")}
    assert batch["round-001"] == str(cfg.eval.batch_size) and batch["round-002"] == "4"
    records = [json.loads(line) for line in (root / "output" / "experiments.jsonl").read_text().splitlines()]
    for record, kind, drawn in zip(records, kinds, plans):
        if kind == "fallback":  # the invalid plan was never applied: the offline plan ran instead
            assert record["planner"] == "offline (fallback)"
        else:
            assert record["planner"] == "claude"
            assert record["plan"] == asdict(validate_plan(drawn, cfg))
    last_patch: dict = {}
    for record in records:
        last_patch |= record["plan"]["forge_yaml_patches"]
    patched = compose_config(rounds_project, [])
    for key, value in last_patch.items():
        assert_set(patched, key, value)
    print(
        f"\nplan fuzzer, real rounds: {ROUNDS} rounds ({kinds.count('repaired')} repaired, "
        f"{kinds.count('fallback')} offline fallbacks), {trials} trial runs checked, 0 crashes"
    )
