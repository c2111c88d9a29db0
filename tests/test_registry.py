"""registry.py: the gate's decisions, McNemar, and a real MLflow registry (sqlite) with a trained tiny adapter."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from conftest import FAST, shrink_jsonl
from hypothesis import given, settings
from hypothesis import strategies as st

from forge_ml.config.checks import Problems
from forge_ml.config.registry import GateConfig, RegistryConfig
from forge_ml.errors import ConfigError
from forge_ml.evaluation.report import EvalReport, ScoredExample
from forge_ml.evaluation.scorers import scoring_rule
from forge_ml.gate import GoldOutcome, _fig, decide, describe_gate, mcnemar_exact
from forge_ml.models.pyfunc import save_adapter_model
from forge_ml.registry import CHALLENGER, CHAMPION, Registry

# what save_adapter_model wrote as model_code.py before the pyfunc model moved to forge_ml/models/pyfunc.py
LEGACY_MODEL_CODE = (
    "import mlflow\nfrom forge_ml.registry import AdapterModel\n\nmlflow.models.set_model(AdapterModel())\n"
)


def outcome(bits: str, cats: str | None = None, forbidden: int = 0, gold: str = "gold-1") -> GoldOutcome:
    """A gold outcome from its per-example bits; `cats` names each example's category by one letter."""
    cats = cats or "a" * len(bits)
    per_category = {}
    for cat in sorted(set(cats)):
        mine = [b for b, c in zip(bits, cats) if c == cat]
        per_category[cat] = mine.count("1") / len(mine)
    return GoldOutcome(bits.count("1") / len(bits), per_category, bits, forbidden, gold, len(bits))


def right(n: int, total: int = 20) -> str:
    return "1" * n + "0" * (total - n)


CATS = "a" * 10 + "b" * 10
GATE_CASES = {
    "improved": (
        right(16),
        right(14),
        GateConfig(),
        True,
        "gold accuracy 0.80 > champion 0.70 (a challenger must be better; min_delta 0.00)",
    ),
    "equal": (
        right(14),
        right(14),
        GateConfig(),
        False,
        "gold accuracy 0.70 ties champion 0.70: a tie is refused (a challenger must be better; min_delta 0.00)",
    ),
    "equal-with-a-tolerated-loss": (
        right(14),
        right(14),
        GateConfig(min_delta=-0.05),
        True,
        "gold accuracy 0.70 >= champion 0.70 + min_delta -0.05 (a loss of up to 0.05 accepted)",
    ),
    "better-by-min-delta": (
        right(15),
        right(14),
        GateConfig(min_delta=0.05),
        True,
        "gold accuracy 0.75 >= champion 0.70 + min_delta 0.05",
    ),
    "equal-min-delta": (
        right(14),
        right(14),
        GateConfig(min_delta=0.01),
        False,
        "gold accuracy 0.70 < champion 0.70 + min_delta 0.01",
    ),
    "worse": (
        right(13),
        right(14),
        GateConfig(),
        False,
        "gold accuracy 0.65 < champion 0.70 (a challenger must be better; min_delta 0.00)",
    ),
    "significance-not-met": (
        right(16),
        right(14),
        GateConfig(significance=0.05),
        False,
        "McNemar p=0.5 (b=2 candidate-only right, c=0 champion-only right) >= significance 0.05",
    ),
    "significance-met": (
        right(18),
        right(10),
        GateConfig(significance=0.05),
        True,
        "McNemar p=0.007812 (b=8 candidate-only right, c=0 champion-only right) < significance 0.05",
    ),
    "no-better-on-discordant-pairs": (
        "01" + right(12, 18),
        "10" + right(12, 18),
        GateConfig(significance=0.05),
        False,
        "not better on discordant pairs: McNemar p=1 (b=1",
    ),
    "category-regression": (
        "1111111100" + "1" * 10,  # a: 0.8, b: 1.0 -> 0.90 overall
        "1" * 10 + "1111000000",  # a: 1.0, b: 0.4 -> 0.70 overall
        GateConfig(max_category_drop=0.1),
        False,
        "category 'a' accuracy 0.80 < champion 1.00 (drop 0.20 > max_category_drop 0.10)",
    ),
    "category-within-bound": (
        "1111111110" + "1" * 10,
        "1" * 10 + "1111000000",
        GateConfig(max_category_drop=0.1),
        True,
        "gold accuracy 0.95 > champion 0.70",
    ),
    "uneven-figures": (
        right(19, 27),
        right(20, 27),
        GateConfig(),
        False,
        "gold accuracy 0.7037 < champion 0.7407",
    ),
}


@pytest.mark.parametrize(
    ("candidate", "champion", "gate", "promote", "reason"), list(GATE_CASES.values()), ids=list(GATE_CASES)
)
def test_gate_decisions(candidate, champion, gate, promote, reason):
    cats = CATS if len(candidate) == len(CATS) else None
    decision = decide(outcome(candidate, cats), outcome(champion, cats), gate)
    assert decision.promote is promote
    assert any(reason in r for r in decision.reasons), decision.reasons
    assert (decision.p_value is None) is (gate.significance is None)


@given(
    champion=st.integers(0, 40),
    candidate=st.integers(0, 40),
    n=st.integers(40, 60),
    min_delta=st.sampled_from([0.0, 0.01, 0.05, 0.2, -0.01, -0.05]),
)
@settings(max_examples=300, deadline=None)
def test_a_challenger_is_promoted_only_when_better_by_what_the_rule_asks(champion, candidate, n, min_delta):
    decision = decide(
        outcome(right(candidate, n)), outcome(right(champion, n)), GateConfig(min_delta=min_delta)
    )
    gain = (candidate - champion) / n
    assert decision.promote is (gain > 0 if min_delta == 0 else gain >= min_delta - 1e-9)
    if candidate == champion and min_delta >= 0:  # a tie never churns the registry
        assert not decision.promote
    (reason,) = decision.reasons
    assert reason.startswith(f"gold accuracy {_fig(candidate / n)} ") and _fig(champion / n) in reason


@pytest.mark.parametrize(
    ("gate", "words"),
    [
        (GateConfig(), ["strictly higher (a tie is refused)", "no forbidden output", "min_delta 0.00"]),
        (GateConfig(min_delta=0.05), ["higher by at least 0.05"]),
        (GateConfig(min_delta=-0.02), ["at most 0.02 lower"]),
        (GateConfig(significance=0.05, max_category_drop=0.1), ["McNemar", "p < 0.05", "more than 0.10"]),
    ],
)
def test_the_gate_rule_in_words(gate, words):
    text = describe_gate(gate)
    assert all(w in text for w in words), text
    assert ("McNemar" in text) is (gate.significance is not None)
    assert ("category" in text) is (gate.max_category_drop is not None)


def test_forbidden_output_refuses_even_a_first_version():
    better, champion = outcome(right(18), forbidden=2), outcome(right(10))
    refused = decide(better, champion, GateConfig())
    assert not refused.promote and "2 forbidden output(s) on gold" in refused.reasons
    assert not decide(better, None, GateConfig()).promote


def test_first_version_is_promoted():
    decision = decide(outcome(right(7)), None, GateConfig(min_delta=0.5, significance=0.01))
    assert decision.promote and decision.reasons == ["first version (gold accuracy 0.35)"]


def test_outcomes_on_different_gold_sets_are_never_compared():
    with pytest.raises(ConfigError, match="rebaseline") as err:
        decide(outcome(right(15)), outcome(right(10), gold="gold-2"), GateConfig())
    assert err.value.exit_code == 1


@pytest.mark.parametrize(
    ("b", "c", "p"),
    [(0, 0, 1.0), (10, 0, 2 / 1024), (0, 10, 2 / 1024), (5, 5, 1.0), (1, 0, 1.0), (8, 2, 0.109375)],
)
def test_mcnemar_exact_known_values(b, c, p):
    assert mcnemar_exact(b, c) == pytest.approx(p)
    assert mcnemar_exact(b, c) == mcnemar_exact(c, b)


def test_gold_outcome_from_report_and_tags_round_trip():
    items = [
        ScoredExample("take off", "a", "a", "takeoff", 1.0),
        ScoredExample("land", "b", "x", "land", 0.0),
        ScoredExample("land now", "b", "b", "land", 1.0),
        ScoredExample("hover", "c", "rm -rf", "hover", 0.0, forbidden="rm"),
    ]
    per_category = {"hover": {"accuracy": 0.0}, "land": {"accuracy": 0.5}, "takeoff": {"accuracy": 1.0}}
    report = EvalReport(0.5, 2, 4, 2, per_category, forbidden_count=1, items=items)
    gold = GoldOutcome.from_report(report, "abc123", "custom (scorer.py sha256 0123456789ab)")
    assert gold.outcomes == "1010" and gold.total == 4 and gold.forbidden_count == 1
    assert gold.per_category == {"hover": 0.0, "land": 0.5, "takeoff": 1.0}
    tags = gold.to_tags()
    assert tags["forge.gold_hash"] == "abc123" and tags["forge.gold_outcomes"] == "1010"
    assert tags["forge.gold_scoring"] == "custom (scorer.py sha256 0123456789ab)"
    assert GoldOutcome.from_tags(tags) == gold
    older = {
        k: v for k, v in tags.items() if k != "forge.gold_scoring"
    }  # a version of before the rule was kept
    assert GoldOutcome.from_tags(older) == replace(gold, scoring="")
    with pytest.raises(ConfigError, match=r"forge\.gold"):
        GoldOutcome.from_tags({"forge.gold_hash": "abc123"})


def test_registry_config_checks_ranges():
    p = Problems("registry")
    RegistryConfig(
        model_name="a/b", gate=GateConfig(min_delta=2.0, significance=0.0, max_category_drop=-0.1)
    ).check(p)
    joined = "\n".join(p.messages)
    for key in ("registry.model_name", "gate.min_delta", "gate.significance", "gate.max_category_drop"):
        assert key in joined
    ok = Problems("registry")
    RegistryConfig(gate=GateConfig(significance=0.05, max_category_drop=0.1)).check(ok)
    assert ok.messages == []


# ---- a real registry: one tiny adapter trained for the module, registered from several runs ----


@dataclass
class Trained:
    cfg: object
    project: object
    summary: object
    client: object
    uri: str
    gold_hash: str
    system_prompt: str
    outcome: GoldOutcome
    other_runs: list[str]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Trained:
    from hydra.core.global_hydra import GlobalHydra
    from mlflow import MlflowClient

    from forge_ml.compose import compose_config
    from forge_ml.data.project_data import read_system_prompt
    from forge_ml.jobs.train import run_train
    from forge_ml.project import init_project

    project = init_project(tmp_path_factory.mktemp("registry") / "small", example="drone-router")
    shrink_jsonl(project.root / "dataset" / "canonical.jsonl", 240)
    shrink_jsonl(project.root / "dataset" / "gold.jsonl", 27)
    GlobalHydra.instance().clear()
    cfg = compose_config(project, FAST)
    GlobalHydra.instance().clear()
    summary = run_train(cfg)
    uri = f"sqlite:///{project.root / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    run = client.get_run(summary.run_id)
    others = []
    for _ in range(3):  # more source runs: the same adapter, registered again as later rounds
        other = client.create_run(run.info.experiment_id)
        client.set_terminated(other.info.run_id)
        others.append(other.info.run_id)
    gold_hash = run.data.tags["forge.data.gold_hash"]
    return Trained(
        cfg,
        project,
        summary,
        client,
        uri,
        gold_hash,
        read_system_prompt(project, cfg.task),
        GoldOutcome.from_report(summary.gold, gold_hash, scoring_rule(cfg.eval, project.root)),
        others,
    )


@pytest.fixture
def models_uri(trained, monkeypatch):
    """Point `models:/` URIs at the test store (fluent API) for this test only."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", trained.uri)
    monkeypatch.setenv("MLFLOW_REGISTRY_URI", trained.uri)
    monkeypatch.setenv("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")


def register(registry: Registry, t: Trained, run_id: str):
    return registry.register(
        run_id,
        adapter_dir=t.summary.adapter_dir,
        base=t.summary.base,
        system_prompt=t.system_prompt,
        system_role=t.cfg.model.system_role,
        max_new_tokens=t.cfg.eval.max_new_tokens,
        outcome=t.outcome,
        tags={"forge.round": 1},
        batch_size=t.cfg.eval.batch_size,
    )


def alias(t: Trained, name: str, which: str) -> str:
    return str(t.client.get_model_version_by_alias(name, which).version)


@pytest.mark.slow
def test_register_gate_and_load_the_champion(trained, models_uri):
    import mlflow.pyfunc
    import pandas as pd

    t, name = trained, "router"
    registry = Registry(RegistryConfig(), t.client, name)
    assert registry.champion() is None
    registry.check_gold("anything", "exact")  # no champion yet: nothing to compare with

    v1 = register(registry, t, t.summary.run_id)
    assert str(v1.version) == "1" and v1.run_id == t.summary.run_id
    assert v1.source == f"runs:/{t.summary.run_id}/model"
    assert alias(t, name, CHALLENGER) == "1"
    assert v1.tags["forge.gold_hash"] == t.gold_hash and v1.tags["forge.round"] == "1"
    assert GoldOutcome.from_tags(v1.tags) == t.outcome
    assert str(register(registry, t, t.summary.run_id).version) == "1"  # a retry registers nothing new
    assert len(t.client.search_model_versions(f"name = '{name}'")) == 1

    first = registry.gate(v1, t.outcome, GateConfig())
    assert first.promote and first.reasons[0].startswith("first version")
    assert alias(t, name, CHAMPION) == "1"
    tags = t.client.get_model_version(name, "1").tags
    assert tags["forge.gate.decision"] == "promoted" and tags["forge.gate.compared_to"] == "none"
    assert registry.gate(v1, t.outcome, GateConfig(min_delta=0.5)).reasons == ["v1 is already the champion"]

    v2 = register(registry, t, t.other_runs[0])
    assert str(v2.version) == "2" and alias(t, name, CHALLENGER) == "2" and alias(t, name, CHAMPION) == "1"
    refused = registry.gate(v2, t.outcome, GateConfig(min_delta=0.01))
    assert not refused.promote and alias(t, name, CHAMPION) == "1"
    tags = t.client.get_model_version(name, "2").tags
    assert tags["forge.gate.decision"] == "refused" and "+ min_delta 0.01" in tags["forge.gate.reasons"]
    tie = registry.gate(v2, t.outcome, GateConfig())  # the same gold outcome: no better, refused
    assert not tie.promote and alias(t, name, CHAMPION) == "1"
    assert "a tie is refused" in t.client.get_model_version(name, "2").tags["forge.gate.reasons"]
    # ... and the version's description says it in one line, as the MLflow UI lists it
    acc = _fig(t.outcome.accuracy)
    assert t.client.get_model_version(name, "2").description == (
        f"round 1 — gold {acc} vs champion v1 {acc} — refused: gold accuracy {acc} ties champion {acc}: "
        "a tie is refused (a challenger must be better; min_delta 0.00)"
    )
    assert t.client.get_model_version(name, "1").description == (
        f"round 1 — gold {acc}, no champion yet — promoted: first version (gold accuracy {acc})"
    )
    promoted = registry.gate(v2, t.outcome, GateConfig(min_delta=-0.01))  # a small loss tolerated
    assert promoted.promote and promoted.compared_to == "1"
    assert alias(t, name, CHAMPION) == "2" and alias(t, name, CHALLENGER) == "2"
    assert t.client.get_model_version(name, "2").tags["forge.gate.decision"] == "promoted"

    registry.check_gold(t.gold_hash, t.outcome.scoring)
    with pytest.raises(ConfigError, match="gold set changed") as err:
        registry.check_gold("0" * 64, t.outcome.scoring)
    assert err.value.exit_code == 1 and "forge-ml promote --rebaseline" in str(err.value)
    with pytest.raises(ConfigError, match="scoring changed") as err:
        registry.check_gold(t.gold_hash, "custom (scorer.py sha256 0123456789ab)")
    said = str(err.value)
    assert f"was scored by {t.outcome.scoring}, the project's eval now scores by custom (scorer.py" in said
    assert err.value.exit_code == 1 and "forge-ml promote --rebaseline" in said

    model = mlflow.pyfunc.load_model(f"models:/{name}@champion")
    answers = model.predict(["take off to 30 m"])
    assert isinstance(answers, list) and len(answers) == 1 and answers[0].strip()
    assert model.predict(pd.DataFrame({"prompt": ["take off to 30 m"]})) == answers
    assert model.predict("take off to 30 m") == answers
    # the same rendering and greedy batched generation as evaluation: the gold answers come out again
    gold = t.summary.gold.items
    assert model.predict([item.input for item in gold]) == [item.actual for item in gold]


@pytest.mark.slow
def test_stage_transitions_on_request(trained):
    t, name = trained, "router-staged"
    registry = Registry(RegistryConfig(stages=True), t.client, name)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        v1 = register(registry, t, t.summary.run_id)  # the run's model is logged already: reused
        assert v1.current_stage == "Staging"
        registry.gate(v1, t.outcome, GateConfig())
        assert t.client.get_model_version(name, "1").current_stage == "Production"
        v2 = register(registry, t, t.other_runs[1])
        assert v2.current_stage == "Staging"
        assert registry.gate(v2, t.outcome, GateConfig(min_delta=-0.01)).promote  # a tie, accepted on request
    assert not [w for w in caught if "stage" in str(w.message).lower()]
    assert t.client.get_model_version(name, "1").current_stage == "Archived"
    assert t.client.get_model_version(name, "2").current_stage == "Production"
    assert alias(t, name, CHAMPION) == "2"


@pytest.mark.slow
def test_a_half_logged_model_is_completed_on_retry(trained, models_uri, tmp_path):
    """A crash mid-upload leaves files without MLmodel: the retry uploads again and registers once."""
    import mlflow.pyfunc

    t, name = trained, "router-retry"
    run_id = t.other_runs[2]
    model_dir = save_adapter_model(
        tmp_path / "model",
        adapter_dir=t.summary.adapter_dir,
        base=t.summary.base,
        system_prompt=t.system_prompt,
        system_role=True,
        max_new_tokens=4,
    )
    t.client.log_artifacts(run_id, str(model_dir / "artifacts"), "model/artifacts")  # crashed here
    registry = Registry(RegistryConfig(), t.client, name)
    version = register(registry, t, run_id)
    assert str(register(registry, t, run_id).version) == str(version.version) == "1"
    assert len(t.client.search_model_versions(f"name = '{name}'")) == 1
    answers = mlflow.pyfunc.load_model(f"models:/{name}/1").predict(["land"])
    assert len(answers) == 1


def test_the_old_import_path_keeps_the_moved_names():
    """forge_ml.registry re-exports the gate and the pyfunc model: older callers and saved models import them."""
    import forge_ml.registry as registry
    from forge_ml import gate
    from forge_ml.models import pyfunc

    assert registry.AdapterModel is pyfunc.AdapterModel
    assert registry.save_adapter_model is pyfunc.save_adapter_model
    assert registry.GoldOutcome is gate.GoldOutcome and registry.decide is gate.decide
    assert "from forge_adapter_model.pyfunc import AdapterModel" in pyfunc.MODEL_CODE  # the copy it ships


@pytest.mark.slow
def test_a_model_saved_with_the_old_model_code_still_loads(trained, tmp_path):
    """A version saved before forge_ml/models/pyfunc.py existed: its model_code.py imports forge_ml.registry."""
    import mlflow.pyfunc

    t = trained
    model_dir = save_adapter_model(
        tmp_path / "model",
        adapter_dir=t.summary.adapter_dir,
        base=t.summary.base,
        system_prompt=t.system_prompt,
        system_role=True,
        max_new_tokens=4,
    )
    (model_dir / "model_code.py").write_text(LEGACY_MODEL_CODE, encoding="utf-8")
    assert len(mlflow.pyfunc.load_model(str(model_dir)).predict(["land"])) == 1


@pytest.mark.slow
def test_load_through_the_registry_client_and_rebaseline(trained):
    """No global tracking URI here: load() reads through the registry's own client."""
    t, name = trained, "router-rebaseline"
    registry = Registry(RegistryConfig(), t.client, name)
    version = register(registry, t, t.summary.run_id)
    assert registry.gate(version, t.outcome, GateConfig()).promote
    assert len(registry.load(version).predict(["land"])) == 1

    remeasured = replace(t.outcome, gold_hash="f" * 64, accuracy=0.5)
    with pytest.raises(ConfigError, match="gold set changed"):
        registry.check_gold(remeasured.gold_hash, t.outcome.scoring)
    registry.rebaseline(version, remeasured, previous=t.outcome)
    registry.check_gold(remeasured.gold_hash, t.outcome.scoring)
    found = registry.champion()
    champion, outcome = found.version, found.outcome
    assert str(champion.version) == str(version.version) and outcome == remeasured
    assert champion.tags["forge.rebaseline.previous_gold_hash"] == t.gold_hash

    # the rule and the hash are written last: a re-baseline cut short leaves the old ones, which the
    # project's gold and scorer do not match, so check_gold asks for it again rather than trusting a mix
    written: list[str] = []

    class Recording(type(t.client)):  # the real client, its writes of version tags noted in order
        def set_model_version_tag(self, name, version, key, value):
            written.append(key)
            return super().set_model_version_tag(name, version, key, value)

    rescored = replace(remeasured, scoring="custom (scorer.py sha256 0123456789ab)", accuracy=0.6)
    Registry(RegistryConfig(), Recording(tracking_uri=t.uri), name).rebaseline(
        version, rescored, previous=remeasured
    )
    assert written[-2:] == ["forge.gold_scoring", "forge.gold_hash"] and "forge.gold_accuracy" in written[:-2]
    assert registry.champion().outcome == rescored


def test_for_project_uses_the_project_store_and_name(tmp_path):
    from forge_ml.config import ForgeConfig
    from forge_ml.project import Project

    cfg = replace(ForgeConfig(), name="proj", project_dir=str(tmp_path))
    registry = Registry.for_project(cfg, Project(Path(tmp_path)))
    assert registry.name == "proj" and registry.uri() == "models:/proj@champion"
    assert registry.client.tracking_uri == f"sqlite:///{tmp_path / 'mlflow.db'}"
    cfg.registry = RegistryConfig(model_name="other")
    assert Registry.for_project(cfg, Project(Path(tmp_path))).name == "other"


def test_outcomes_scored_under_different_rules_are_never_compared():
    """The same answers score higher under a partial-credit scorer.py than under `exact`: the gate
    refuses to compare them, naming both rules. A champion of before the rule was recorded ("")
    compares on its gold set alone."""
    exact, custom = "exact", "custom (scorer.py sha256 0123456789ab)"
    with pytest.raises(ConfigError) as err:
        decide(
            replace(outcome(right(15)), scoring=custom),
            replace(outcome(right(10)), scoring=exact),
            GateConfig(),
        )
    said = str(err.value)
    assert err.value.exit_code == 1 and f"scored by {custom}, the champion by {exact}" in said
    assert "forge-ml promote --rebaseline" in said
    same = decide(
        replace(outcome(right(15)), scoring=custom), replace(outcome(right(10)), scoring=custom), GateConfig()
    )
    assert same.promote
    older = decide(replace(outcome(right(15)), scoring=custom), outcome(right(10)), GateConfig())
    assert older.promote


CONFIGS = st.fixed_dictionaries(
    {
        "scorer": st.sampled_from(["exact", "json_cmd", "json_match", "custom"]),
        "json_field": st.sampled_from(["cmd", "action"]),
        "forbidden_outputs": st.lists(
            st.sampled_from(["(?i)as an ai", "rm -rf", "sorry"]), max_size=2, unique=True
        ),
        "body": st.sampled_from(["return 1.0", "return 0.5", "return float(expected == actual)"]),
    }
)


@given(a=CONFIGS, b=CONFIGS)
@settings(max_examples=200, deadline=None)
def test_two_scoring_rules_are_the_same_exactly_when_they_score_alike(a, b, tmp_path_factory):
    """Equal for configs that score every answer alike (the same scorer; the same field for json_cmd,
    the same scorer.py bytes for custom; the same forbidden patterns in any order); else different."""
    from forge_ml.config import EvalConfig

    def rule(c: dict) -> str:
        root = tmp_path_factory.mktemp("rule")
        (root / "scorer.py").write_text(f"def score(expected, actual):\n    {c['body']}\n")
        cfg = EvalConfig(
            scorer=c["scorer"], json_field=c["json_field"], forbidden_outputs=c["forbidden_outputs"]
        )
        return scoring_rule(cfg, root)

    def meaning(c: dict) -> tuple:
        own = {"json_cmd": c["json_field"], "custom": c["body"]}.get(c["scorer"])
        return c["scorer"], own, frozenset(c["forbidden_outputs"])

    assert (rule(a) == rule(b)) == (meaning(a) == meaning(b))
    assert rule(a).startswith(a["scorer"])
