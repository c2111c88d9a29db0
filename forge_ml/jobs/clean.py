"""`forge-ml clean`: drop generated examples from canonical, keeping seed and hand-written ones."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from forge_ml.config import ForgeConfig
from forge_ml.data.examples import read_examples
from forge_ml.fileio import atomic_write_text
from forge_ml.project import Project

GENERATED = ("generate", "augment", "patch")


@dataclass
class CleanSummary:
    path: Path
    kept: int
    removed: Counter


def clean_generated(cfg: ForgeConfig) -> CleanSummary:
    """Rewrite canonical.jsonl (atomically) without generated examples; seed examples always stay."""
    project = Project(Path(cfg.project_dir))
    path = project.resolve(cfg.task.canonical_path)
    examples = read_examples(path, required=False)
    kept = [e for e in examples if str(e.meta.get("source", "")) not in GENERATED]
    removed = Counter(
        str(e.meta.get("source")) for e in examples if str(e.meta.get("source", "")) in GENERATED
    )
    if removed:
        atomic_write_text(path, "".join(json.dumps(e.to_record(), ensure_ascii=False) + "\n" for e in kept))
    return CleanSummary(path, len(kept), removed)
