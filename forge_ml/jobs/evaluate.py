"""`forge-ml eval`: evaluate a trained adapter (or the base model) on gold, without training."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forge_ml.config import ForgeConfig
from forge_ml.data.project_data import read_gold, read_system_prompt
from forge_ml.errors import InputError
from forge_ml.evaluation.evaluate import evaluate_examples
from forge_ml.evaluation.report import EvalReport, write_report
from forge_ml.evaluation.scorers import make_scorer
from forge_ml.jobs.train import LAST_TRAIN
from forge_ml.models.adapters import is_adapter_dir, load_adapter
from forge_ml.models.loader import BaseModelRef, adapter_base, load_base_model, load_tokenizer
from forge_ml.models.source import resolve_model_source
from forge_ml.project import Project
from forge_ml.tracking import Tracker


@dataclass
class EvalSummary:
    run_id: str
    target: str
    report: EvalReport
    results_path: Path


def resolve_target(
    cfg: ForgeConfig, project: Project, adapter: str | None
) -> tuple[BaseModelRef, Path | None]:
    """Return (base model, adapter dir or None) to evaluate; default: the last trained adapter."""
    if adapter is None:
        last = project.output / LAST_TRAIN
        if not last.is_file():
            raise InputError(f"{last}: nothing trained yet; run `forge-ml train` or pass --adapter PATH")
        adapter = json.loads(last.read_text())["adapter"]
    path = project.resolve(adapter)
    if not path.is_dir():
        raise InputError(f"--adapter: {path} not found")
    if is_adapter_dir(path):
        base = adapter_base(path)
        if not base:
            raise InputError(f"{path / 'adapter_config.json'}: no base_model_name_or_path recorded")
        source = resolve_model_source(base, project)
        return BaseModelRef(source=source, revision=cfg.model.revision, built_locally=False), path
    if (path / "config.json").is_file():  # a full model (lora=full) or a merged one
        return BaseModelRef(source=str(path), revision=None, built_locally=False), None
    raise InputError(f"--adapter: {path} holds neither a PEFT adapter nor a model")


def run_eval(
    cfg: ForgeConfig, adapter: str | None = None, *, tags: dict[str, Any] | None = None
) -> EvalSummary:
    """Evaluate on gold, write output/eval_results.json + eval_failures.jsonl, log an MLflow run."""
    project = Project(Path(cfg.project_dir))
    system_prompt = read_system_prompt(project, cfg.task)
    gold = read_gold(project, cfg.task)
    scorer = make_scorer(cfg.eval, project.root)
    base, adapter_dir = resolve_target(cfg, project, adapter)
    tokenizer = load_tokenizer(base, cfg.model, project)
    model = load_base_model(base, cfg)
    if adapter_dir is not None:
        model = load_adapter(model, adapter_dir)
    target = str(adapter_dir or base.source)
    with Tracker(cfg, project).start_run(
        "eval", {"forge.kind": "eval", "forge.eval_target": target, **(tags or {})}
    ) as run:
        report = evaluate_examples(
            model,
            tokenizer,
            gold,
            system_prompt=system_prompt,
            system_role=cfg.model.system_role,
            cfg=cfg.eval,
            scorer=scorer,
            label="gold",
        )
        run.log_metrics(report.metrics("gold"))
        results, failures = write_report(
            report, project.output, {"run_id": run.run_id, "target": target, "split": "gold"}
        )
        run.log_artifact(results, "eval")
        run.log_artifact(failures, "eval")
    return EvalSummary(run.run_id, target, report, results)


def evaluate_adapter(
    cfg: ForgeConfig,
    project: Project,
    base: BaseModelRef,
    adapter_dir: Path,
    examples: list,
    *,
    system_prompt: str,
    label: str = "gold",
) -> EvalReport:
    """Return the report of base + adapter on `examples` (no MLflow run: the caller records it)."""
    scorer = make_scorer(cfg.eval, project.root)
    tokenizer = load_tokenizer(BaseModelRef(str(adapter_dir), None, False), cfg.model, project)
    model = load_adapter(load_base_model(base, cfg), adapter_dir)
    return evaluate_examples(
        model,
        tokenizer,
        examples,
        system_prompt=system_prompt,
        system_role=cfg.model.system_role,
        cfg=cfg.eval,
        scorer=scorer,
        label=label,
    )
