"""`forge-ml clean`: drop generated examples from canonical, keeping seed and hand-written ones.

One MLflow run (`forge.kind=clean`) records what was removed, per source, and the dataset
version left behind (an MLflow dataset input with its content hash).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from forge_ml.augment.provenance import count_metrics, log_data_version
from forge_ml.config import ForgeConfig
from forge_ml.data.examples import read_examples
from forge_ml.data.table import load_table
from forge_ml.fileio import atomic_write_text
from forge_ml.project import Project, ProjectLock
from forge_ml.tracking import Tracker

GENERATED = ("generate", "augment", "patch")


@dataclass
class CleanSummary:
    path: Path
    kept: int
    removed: Counter
    dataset_hash: str = ""
    run_id: str | None = None


def clean_generated(cfg: ForgeConfig, *, on_run: Callable[[str], None] | None = None) -> CleanSummary:
    """Rewrite canonical.jsonl (atomically, under the project lock) without generated examples; record it."""
    project = Project(Path(cfg.project_dir))
    path = project.resolve(cfg.task.canonical_path)
    examples = read_examples(path, required=False)
    kept = [e for e in examples if str(e.meta.get("source", "")) not in GENERATED]
    removed = Counter(
        str(e.meta.get("source")) for e in examples if str(e.meta.get("source", "")) in GENERATED
    )
    summary = CleanSummary(path, len(kept), removed)
    with ProjectLock(project), Tracker(cfg, project).start_run("clean", {"forge.kind": "clean"}) as run:
        summary.run_id = run.run_id
        if on_run is not None:
            on_run(run.run_id)
        if removed:
            atomic_write_text(
                path, "".join(json.dumps(e.to_record(), ensure_ascii=False) + "\n" for e in kept)
            )
        run.log_metrics(
            {"data/removed": float(sum(removed.values())), "data/kept": float(len(kept))}
            | count_metrics("data/removed", removed)
        )
        table = load_table(path, project.output, split_seed=cfg.task.split_seed)
        summary.dataset_hash = log_data_version(run, cfg, name="canonical", table=table, path=path)
    return summary
