"""`forge-ml eval`: evaluate an adapter, a registry version or a model on gold, without training.

What is evaluated: the last trained adapter, `--adapter DIR`, or `model=` on the command line
(`models:/<name>@<alias>`, `models:/<name>/<version>`, or a local adapter or model directory). A
registry version is downloaded to a temp dir and evaluated with the project's eval config and
scorer, prompted as it was registered (its system prompt). The eval is always its own MLflow run
(forge.kind=eval), never a write to the version or its run.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forge_ml.config import ForgeConfig
from forge_ml.data.examples import dataset_hash
from forge_ml.data.project_data import read_gold, read_system_prompt
from forge_ml.errors import ConfigError, InputError
from forge_ml.evaluation.evaluate import evaluate_examples
from forge_ml.evaluation.report import EvalReport, write_report
from forge_ml.evaluation.room import check_answer_room
from forge_ml.evaluation.scorers import make_scorer
from forge_ml.jobs.train import LAST_TRAIN
from forge_ml.models.adapters import is_adapter_dir, load_adapter
from forge_ml.models.loader import BaseModelRef, adapter_base, load_base_model, load_tokenizer
from forge_ml.models.source import resolve_model_source
from forge_ml.project import Project
from forge_ml.tracking import Tracker

REGISTRY_SCHEME = "models:/"
MODEL_ARG = "model="


@dataclass
class JudgeOptions:
    """`--judge claude`: score the answers with Claude, `items` per request, through Message Batches."""

    items: int = 20
    batch: bool = False


@dataclass
class EvalSummary:
    run_id: str
    target: str
    report: EvalReport
    results_path: Path
    version: str | None = None  # the registry version evaluated
    judge: Any | None = None  # forge_ml.evaluation.judge.JudgeResult with --judge


@dataclass
class RegistryRef:
    """`models:/<name>@<alias>` or `models:/<name>/<version>`."""

    uri: str
    name: str
    version: str | None = None
    alias: str | None = None


def split_model_argument(overrides: list[str]) -> tuple[str | None, list[str]]:
    """Take the eval target `model=<models:/ uri or path>` out of `overrides`; return (target, the rest).

    `model=<group option>` (e.g. `model=tiny`) stays a Hydra override: only a `models:/` URI or a
    value that looks like a path (has a `/`, or starts with `.` or `~`) is a target.
    """
    targets = [o for o in overrides if o.startswith(MODEL_ARG) and _is_target(o[len(MODEL_ARG) :])]
    if len(targets) > 1:
        raise InputError(f"model=: give one model to evaluate, got {', '.join(targets)}")
    rest = [o for o in overrides if o not in targets]
    return (targets[0][len(MODEL_ARG) :] if targets else None), rest


def _is_target(value: str) -> bool:
    return value.startswith(REGISTRY_SCHEME) or "/" in value or value.startswith((".", "~"))


def parse_registry_uri(uri: str) -> RegistryRef:
    """Return the parts of a `models:/` URI; InputError naming it when it is malformed."""
    rest = uri[len(REGISTRY_SCHEME) :]
    name, at, alias = rest.partition("@")
    if at:
        if name and alias and "/" not in name:
            return RegistryRef(uri, name, alias=alias)
    else:
        name, _, number = rest.rpartition("/")
        if name and number.isdigit():
            return RegistryRef(uri, name, version=number)
    raise InputError(f"model={uri}: expected models:/<name>@<alias> or models:/<name>/<version number>")


def resolve_target(
    cfg: ForgeConfig, project: Project, adapter: str | None, *, arg: str = "--adapter"
) -> tuple[BaseModelRef, Path | None]:
    """Return (base model, adapter dir or None) to evaluate; default: the last trained adapter.

    `arg` names where the path came from in error messages (`--adapter` or `model=`).
    """
    if adapter is None:
        last = project.output / LAST_TRAIN
        if not last.is_file():
            raise InputError(f"{last}: nothing trained yet; run `forge-ml train` or pass --adapter PATH")
        adapter = json.loads(last.read_text())["adapter"]
    path = project.resolve(adapter)
    if not path.is_dir():
        raise InputError(f"{arg}: {path} not found")
    if is_adapter_dir(path):
        base = adapter_base(path)
        if not base:
            raise InputError(f"{path / 'adapter_config.json'}: no base_model_name_or_path recorded")
        source = resolve_model_source(base, project)
        return BaseModelRef(source=source, revision=cfg.model.revision, built_locally=False), path
    if (path / "config.json").is_file():  # a full model (lora=full) or a merged one
        return BaseModelRef(source=str(path), revision=None, built_locally=False), None
    raise InputError(f"{arg}: {path} holds neither a PEFT adapter nor a model")


@dataclass
class _Loaded:
    """A model ready to evaluate, and how to name it."""

    model: Any
    tokenizer: Any
    target: str
    system_prompt: str
    system_role: bool
    version: Any | None = None  # the registry version


def _load_local(
    cfg: ForgeConfig, project: Project, path: str | None, system_prompt: str, arg: str
) -> _Loaded:
    base, adapter_dir = resolve_target(cfg, project, path, arg=arg)
    tokenizer = load_tokenizer(base, cfg.model, project)
    model = load_base_model(base, cfg)
    if adapter_dir is not None:
        model = load_adapter(model, adapter_dir)
    return _Loaded(model, tokenizer, str(adapter_dir or base.source), system_prompt, cfg.model.system_role)


def _load_version(cfg: ForgeConfig, project: Project, ref: RegistryRef, workdir: Path) -> _Loaded:
    """Download a registry version and load it; it answers with the prompt it was registered with."""
    from forge_ml.registry import Registry
    from forge_ml.tracking import client_for

    registry = Registry(cfg.registry, client_for(cfg, project), ref.name)
    version = registry.version(ref.version, alias=ref.alias)
    files = registry.download(version, workdir)
    settings = files.settings
    tokenizer = load_tokenizer(BaseModelRef(str(files.adapter), None, False), cfg.model, project)
    model = load_adapter(load_base_model(files.base_ref(), cfg), files.adapter)
    return _Loaded(model, tokenizer, ref.uri, settings["system_prompt"], settings["system_role"], version)


def _check_judge(judge: JudgeOptions | None) -> None:
    from forge_ml.llm import API_KEY_ENV, claude_available

    if judge is not None and not claude_available():
        raise ConfigError(f"--judge claude: {API_KEY_ENV} is not set in the environment")


def run_eval(
    cfg: ForgeConfig,
    adapter: str | None = None,
    *,
    model: str | None = None,
    judge: JudgeOptions | None = None,
    tags: dict[str, Any] | None = None,
) -> EvalSummary:
    """Evaluate on gold, write output/eval_results.json + eval_failures.jsonl, log an MLflow eval run.

    `adapter` is `--adapter` (default: the last trained adapter); `model` is the `model=` target.
    """
    if adapter is not None and model is not None:
        raise InputError(f"give either --adapter {adapter} or model={model}, not both")
    _check_judge(judge)
    project = Project(Path(cfg.project_dir))
    gold = read_gold(project, cfg.task)
    scorer = make_scorer(cfg.eval, project.root)
    with tempfile.TemporaryDirectory(prefix="forge-eval-") as tmp:
        if model is not None and model.startswith(REGISTRY_SCHEME):
            loaded = _load_version(cfg, project, parse_registry_uri(model), Path(tmp))
        else:
            prompt = read_system_prompt(project, cfg.task)
            arg = "--adapter" if model is None else f"model={model}"
            loaded = _load_local(cfg, project, model or adapter, prompt, arg)
        check_answer_room(loaded.tokenizer, gold, cfg.eval, refuse=False)
        number = None if loaded.version is None else str(loaded.version.version)
        run_tags = {
            "forge.kind": "eval",
            "forge.eval_target": loaded.target,
            "forge.eval_version": number,
            "forge.eval_source_run": None if loaded.version is None else loaded.version.run_id,
            "forge.data.gold_hash": dataset_hash(gold),
            **(tags or {}),
        }
        with Tracker(cfg, project).start_run("eval", run_tags) as run:
            report = evaluate_examples(
                loaded.model,
                loaded.tokenizer,
                gold,
                system_prompt=loaded.system_prompt,
                system_role=loaded.system_role,
                cfg=cfg.eval,
                scorer=scorer,
                label="gold",
            )
            run.log_metrics(report.metrics("gold"))
            judged = None if judge is None else _judge(cfg, run, gold, report, loaded.system_prompt, judge)
            extra = {"run_id": run.run_id, "target": loaded.target, "version": number, "split": "gold"}
            if judged is not None:
                extra["judge"] = judged.summary()
            results, failures = write_report(report, project.output, extra)
            run.log_artifact(results, "eval")
            run.log_artifact(failures, "eval")
    return EvalSummary(run.run_id, loaded.target, report, results, number, judged)


def _judge(
    cfg: ForgeConfig, run: Any, gold: list, report: EvalReport, system_prompt: str, opts: JudgeOptions
) -> Any:
    """Score the answers with Claude; log `judge/*` metrics and the judgements on the eval run."""
    from forge_ml.evaluation.judge import judge_answers
    from forge_ml.llm import make_client

    judged = judge_answers(
        make_client(cfg.planner),
        cfg.planner,
        gold,
        report,
        system_prompt=system_prompt,
        eval_cfg=cfg.eval,
        items_per_request=opts.items,
        batch=opts.batch,
    )
    run.log_metrics(judged.metrics())
    run.set_tags(
        {
            "forge.judge": "claude",
            "forge.judge.model": cfg.planner.model,
            "forge.judge.batch_id": judged.batch_id,
        }
    )
    with tempfile.TemporaryDirectory(prefix="forge-judge-") as tmp:
        path = Path(tmp) / "judge_scores.jsonl"
        judged.write_scores(path)
        run.log_artifact(path, "eval")
    return judged


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
