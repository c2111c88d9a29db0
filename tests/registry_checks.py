"""The registry command tests' shared project: one tiny adapter trained once (per worker), registered
as version 1 (gated: champion) and again from a second run as version 2 (challenger).

Promote tests register their own model names, so the project's model keeps v1 as champion for the
eval and merge tests (tests/test_registry_commands.py, tests/test_promote_commands.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from conftest import FAST, run_cli, shrink_jsonl

from forge_ml.config.registry import RegistryConfig
from forge_ml.evaluation.scorers import scoring_rule
from forge_ml.gate import GoldOutcome
from forge_ml.registry import Registry

COMMON = ["command", "success", "exit_code", "run_id", "config_hash"]
KEYS = {
    "eval": "target accuracy correct total per_category unfinished results_path version judge".split(),  # noqa: SIM905
    "promote": ["model", "version", "decision", "reasons", "p_value", "compared_to", "champion"],
    "merge": ["model", "version", "out", "base", "adapter_run_id"],
}
NAME = "router"
API_KEY = "sk-ant-test-registry-commands-0123456789"


@dataclass
class Trained:
    root: Path
    client: object
    train_run: str  # the run version 1 was registered from
    other_run: str  # the run version 2 was registered from
    adapter: Path
    base: str
    gold: list  # forge_ml Example objects
    failures: list[dict]  # the train run's gold failures
    accuracy: float
    outcome: GoldOutcome
    system_prompt: str


def envelope(result) -> dict:
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1, result.stdout + result.stderr[-3000:]
    return json.loads(lines[0])


def cli(t: Trained, *args: str, env: dict | None = None):
    """Run `forge-ml --json <args>` on the module's project; return (envelope, CompletedProcess)."""
    result = run_cli("-p", str(t.root), "--json", *args, env=env)
    return envelope(result), result


def register_pair(t: Trained, name: str, *, stages: bool = False, better: bool = False) -> Registry:
    """Register model `name`: v1 from the train run (gated: champion), v2 from the other (challenger).

    v2's recorded gold outcome ties v1's, or with `better` has one more gold example right.
    """
    registry = Registry(RegistryConfig(stages=stages), t.client, name)
    first, second = improved_pair(t.outcome) if better else (t.outcome, t.outcome)
    kwargs = {
        "adapter_dir": t.adapter,
        "base": _base_ref(t),
        "system_prompt": t.system_prompt,
        "system_role": True,
        "max_new_tokens": 24,
    }
    v1 = registry.register(t.train_run, outcome=first, **kwargs)
    assert registry.gate(v1, first, RegistryConfig().gate).promote
    registry.register(t.other_run, outcome=second, **kwargs)
    return registry


def improved_pair(outcome: GoldOutcome) -> tuple[GoldOutcome, GoldOutcome]:
    """Two outcomes on the same gold set, the second with one more example right."""

    def with_bits(bits: str) -> GoldOutcome:
        return replace(outcome, outcomes=bits, accuracy=bits.count("1") / len(bits))

    if "0" in outcome.outcomes:
        return outcome, with_bits(outcome.outcomes.replace("0", "1", 1))
    return with_bits(outcome.outcomes.replace("1", "0", 1)), outcome


def _base_ref(t: Trained):
    from forge_ml.models.loader import BaseModelRef

    return BaseModelRef(t.base, None, True)


def build_shared(tmp_path_factory) -> Trained:
    """Train the tiny adapter once through the CLI, register it as v1 (champion) and v2 (challenger)."""
    from mlflow import MlflowClient

    from forge_ml.data.examples import read_examples
    from forge_ml.project import init_project

    project = init_project(tmp_path_factory.mktemp("regcmd") / NAME, example="drone-router")
    shrink_jsonl(project.root / "dataset" / "canonical.jsonl", 240)
    shrink_jsonl(project.root / "dataset" / "gold.jsonl", 27)
    root = project.root
    result = run_cli("-p", str(root), "--json", "train", *FAST)
    assert result.returncode == 0, result.stderr[-4000:]
    (line,) = (
        result.stdout.strip().splitlines()
    )  # --json: the envelope alone on stdout (Hydra's job log goes to stderr)
    trained_run = json.loads(line)
    client = MlflowClient(tracking_uri=f"sqlite:///{root / 'mlflow.db'}")
    run = client.get_run(trained_run["run_id"])
    losses = {m.step: m.value for m in client.get_metric_history(run.info.run_id, "dev/loss")}
    for epoch in (1, 2):  # one line per epoch, with the figures the run recorded; no trainer log dicts
        assert (
            f"epoch {epoch}/2: train/loss " in result.stderr
            and f"dev/loss {losses[epoch]:.4f}" in result.stderr
        )
    assert "{'loss'" not in result.stderr + result.stdout and "grad_norm" not in result.stderr
    other = client.create_run(run.info.experiment_id)
    client.set_terminated(other.info.run_id)

    gold = read_examples(root / "dataset" / "gold.jsonl")
    failures = [
        json.loads(line) for line in (root / "output" / "eval_failures.jsonl").read_text().splitlines()
    ]
    failed = {f["input"] for f in failures}
    results = json.loads((root / "output" / "eval_results.json").read_text())
    outcome = GoldOutcome(
        accuracy=results["accuracy"],
        per_category={k: v["accuracy"] for k, v in results["per_category"].items()},
        outcomes="".join("0" if ex.user in failed else "1" for ex in gold),
        forbidden_count=0,
        gold_hash=run.data.tags["forge.data.gold_hash"],
        total=len(gold),
        scoring=scoring_rule(project_cfg_eval(root), root),
    )
    t = Trained(
        root,
        client,
        run.info.run_id,
        other.info.run_id,
        Path(trained_run["adapter"]),
        results["base_model"],
        gold,
        failures,
        results["accuracy"],
        outcome,
        (root / "system_prompt.md").read_text(encoding="utf-8"),
    )
    register_pair(t, NAME)
    return t


def runs_of(t: Trained, kind: str) -> list:
    exp = t.client.get_experiment_by_name(NAME)
    return t.client.search_runs([exp.experiment_id], f"tags.`forge.kind` = '{kind}'")


def artifacts(t: Trained, run_id: str, path: str = "") -> set[str]:
    found = set()
    for item in t.client.list_artifacts(run_id, path or None):
        found |= artifacts(t, run_id, item.path) if item.is_dir else {item.path}
    return found


def snapshot(t: Trained, run_id: str) -> tuple:
    """What a run holds: tags, params, metric histories, artifact paths."""
    run = t.client.get_run(run_id)
    histories = {k: [m.value for m in t.client.get_metric_history(run_id, k)] for k in run.data.metrics}
    return run.data.tags, run.data.params, histories, artifacts(t, run_id)


def project_cfg_eval(root: Path):
    """The project's composed `eval` config (its scorer: what its gold outcomes were scored by)."""
    from hydra.core.global_hydra import GlobalHydra

    from forge_ml.compose import compose_config
    from forge_ml.project import Project

    GlobalHydra.instance().clear()
    cfg = compose_config(Project(root), FAST)
    GlobalHydra.instance().clear()
    return cfg.eval


def aliases(t: Trained, name: str) -> dict[str, str]:
    return {k: str(v) for k, v in t.client.get_registered_model(name).aliases.items()}
