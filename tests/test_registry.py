"""registry.py on a real MLflow registry (sqlite) with a trained tiny adapter; the gate's own logic is in
tests/test_gate.py."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from conftest import FAST, shrink_jsonl

from forge_ml.config.registry import GateConfig, RegistryConfig
from forge_ml.errors import ConfigError
from forge_ml.evaluation.scorers import scoring_rule
from forge_ml.gate import GoldOutcome, _fig
from forge_ml.models.pyfunc import save_adapter_model
from forge_ml.registry import CHALLENGER, CHAMPION, Registry

# what save_adapter_model wrote as model_code.py before the pyfunc model moved to forge_ml/models/pyfunc.py
LEGACY_MODEL_CODE = (
    "import mlflow\nfrom forge_ml.registry import AdapterModel\n\nmlflow.models.set_model(AdapterModel())\n"
)


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
