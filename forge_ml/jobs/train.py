"""`forge-ml train`: one LoRA run, read top to bottom as setup data → setup model → train → evaluate.

Everything the run produces lands in MLflow (params, per-epoch metrics, datasets, adapter,
eval results) and in the project's output/ directory.
"""

from __future__ import annotations

import logging
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forge_ml.config import ForgeConfig
from forge_ml.console import console
from forge_ml.data.project_data import ProjectData, load_project_data, merge_seed, read_gold
from forge_ml.data.tokens import sft_datasets, token_cache
from forge_ml.evaluation.evaluate import evaluate_examples
from forge_ml.evaluation.report import EvalReport, write_report
from forge_ml.evaluation.room import check_answer_room
from forge_ml.evaluation.scorers import make_scorer, scoring_rule
from forge_ml.fileio import atomic_write_json
from forge_ml.models.adapters import peft_config_for
from forge_ml.models.loader import BaseModelRef, load_base_model, load_tokenizer, pin_hub_commit, resolve_base
from forge_ml.progress import epoch_lines
from forge_ml.project import Project
from forge_ml.registry import GoldOutcome, Registry
from forge_ml.tracking import TrackedRun, Tracker, config_params
from forge_ml.training import train_sft

log = logging.getLogger(__name__)
LAST_TRAIN = "last_train.json"


@dataclass
class TrainSummary:
    run_id: str
    adapter_dir: Path
    base: BaseModelRef
    dev: EvalReport
    gold: EvalReport
    history: list[dict[str, float]] = field(default_factory=list)
    tokens_per_s: float = 0.0
    version: str | None = None  # the registry version, with `register`


def _of_epochs(cfg: ForgeConfig) -> str:
    """`/3` after an epoch's number, when the run is counted in epochs (not training.max_steps)."""
    return f"/{cfg.training.epochs}" if cfg.training.max_steps <= 0 else ""


def _epoch_line(run: TrackedRun, cfg: ForgeConfig) -> Any:
    """The epoch hook of `train`: log the epoch's metrics on the run and print one line for it."""
    started = time.perf_counter()
    of = _of_epochs(cfg)

    def hook(metrics: dict[str, float], epoch: int) -> None:
        nonlocal started
        run.log_metrics(metrics, step=epoch)
        now = time.perf_counter()
        figures = ", ".join(f"{name} {value:.4f}" for name, value in metrics.items())
        console.print(f"  epoch {epoch}{of}: {figures} ({now - started:.1f} s)", highlight=False)
        started = now

    return hook


def _log_data(run: TrackedRun, cfg: ForgeConfig, project: Project, data: ProjectData) -> None:
    hashes = data.hashes
    run.log_params(
        {
            "data.train_size": data.train_size,
            "data.dev_size": len(data.dev_rows),
            "data.gold_size": len(data.gold),
            "data.duplicates_dropped": data.duplicates_dropped,
        }
    )
    run.set_tags({f"forge.data.{name}_hash": digest for name, digest in hashes.items()})
    if not cfg.tracking.log_datasets:
        return
    canonical = project.resolve(cfg.task.canonical_path)
    run.log_dataset("train", data.frame("train"), hashes["train"], canonical, "training")
    run.log_dataset("dev", data.frame("dev"), hashes["dev"], canonical, "validation")
    run.log_dataset("gold", data.gold, hashes["gold"], project.resolve(cfg.task.gold_path), "evaluation")


def run_train(
    cfg: ForgeConfig, *, run_name: str = "train", tags: dict[str, Any] | None = None, register: bool = False
) -> TrainSummary:
    """Train one adapter on the project's data, evaluate it on dev and gold, record it all; return the summary.

    `register`: the adapter also becomes a version of the project's registered model, alias
    `challenger`, with its gold outcome (what a flywheel round registers), for `forge-ml promote`.
    """
    project = Project(Path(cfg.project_dir))
    # a broken scorer.py fails before training, and before the seed merge may rewrite canonical
    scorer = make_scorer(cfg.eval, project.root, probe=read_gold(project, cfg.task))
    data = load_project_data(project, cfg.task, write_seed=False)
    registry = Registry.for_project(cfg, project) if register else None
    if registry is not None:  # a champion measured on another gold set: refused before training
        registry.check_gold(data.hashes["gold"], scoring_rule(cfg.eval, project.root))
    base = resolve_base(cfg, project, data.training_text())
    tokenizer = load_tokenizer(base, cfg.model, project)
    check_answer_room(tokenizer, data.gold, cfg.eval, refuse=False)  # said before training, not after
    role = cfg.model.system_role
    tokens = sft_datasets(
        data, tokenizer, system_role=role, max_length=cfg.training.max_seq_length, cache=token_cache(project)
    )
    merge_seed(project, cfg.task, data)  # the run is on: the seed joins canonical

    tracker = Tracker(cfg, project)
    with tracker.start_run(run_name, tags) as run:
        run.log_params(config_params(cfg))
        run.log_params({"model.source": base.source})
        _log_data(run, cfg, project, data)

        adapter_dir = project.output / "adapters" / run.run_id
        scratch = project.output / "tmp" / run.run_id
        model = load_base_model(base, cfg)
        base = pin_hub_commit(base)  # a Hub base: the commit it loaded
        if base.provenance is not None:
            run.set_tags(base.provenance.tags())
        outcome = train_sft(
            cfg,
            model,
            tokenizer,
            tokens.train,
            tokens.dev,
            adapter_dir,
            on_epoch=_epoch_line(run, cfg),
            on_step=epoch_lines(_of_epochs(cfg)),  # away from a terminal, a line a minute inside an epoch
            peft_config=peft_config_for(cfg),
            scratch_dir=scratch,
            tqdm=console.is_terminal,
        )
        shutil.rmtree(scratch, ignore_errors=True)
        run.log_metrics(
            {"train/tokens_per_s": outcome.tokens_per_s, "train/runtime_s": outcome.train_runtime_s}
        )

        kwargs = {"system_prompt": data.system_prompt, "system_role": role, "cfg": cfg.eval, "scorer": scorer}
        dev = evaluate_examples(outcome.model, tokenizer, data.dev, label="dev", **kwargs)
        gold = evaluate_examples(outcome.model, tokenizer, data.gold, label="gold", **kwargs)
        step = cfg.training.epochs
        run.log_metrics(dev.metrics("dev") | gold.metrics("gold"), step=step)

        extra = {
            "run_id": run.run_id,
            "adapter": str(adapter_dir),
            "base_model": base.source,
            "split": "gold",
        }
        results, failures = write_report(gold, project.output, extra)
        run.log_artifact(results, "eval")
        run.log_artifact(failures, "eval")
        if cfg.tracking.log_adapter:
            run.log_artifacts(adapter_dir, "adapter")
        atomic_write_json(
            project.output / LAST_TRAIN,
            {
                "run_id": run.run_id,
                "adapter": str(adapter_dir),
                "base_model": base.source,
                "gold_accuracy": gold.accuracy,
                "dev_accuracy": dev.accuracy,
            },
        )
    summary = TrainSummary(run.run_id, adapter_dir, base, dev, gold, outcome.history, outcome.tokens_per_s)
    if registry is not None:
        version = registry.register_trained(
            cfg,
            summary.run_id,
            adapter_dir=adapter_dir,
            base=base,
            system_prompt=data.system_prompt,
            outcome=GoldOutcome.from_report(gold, data.hashes["gold"], scoring_rule(cfg.eval, project.root)),
            tags={"forge.registered_by": "train"},
            mission=project.mission_summary(),
        )
        summary.version = str(version.version)
    return summary
