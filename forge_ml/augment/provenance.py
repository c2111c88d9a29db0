"""MLflow provenance of a change to training data: the dataset version after it, and counts by name."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

from forge_ml.config import ForgeConfig
from forge_ml.data.table import ExampleTable
from forge_ml.tracking import TrackedRun

_UNSAFE = re.compile(r"[^\w\-./]+")


def metric_name(*parts: str) -> str:
    """An MLflow metric name from free text (categories, drop reasons): `data/dropped/matches_a_gold_input`."""
    return "/".join(_UNSAFE.sub("_", part.replace("'", "")).strip("_") or "_" for part in parts)


def count_metrics(prefix: str, counts: Mapping[str, int]) -> dict[str, float]:
    """`{prefix/name: count}` for every name in `counts`."""
    return {metric_name(prefix, name): float(n) for name, n in counts.items()}


def log_data_version(run: TrackedRun, cfg: ForgeConfig, *, name: str, table: ExampleTable, path: Path) -> str:
    """Record the dataset version at `path` (its cached table): version hash (tag and dataset input
    digest), size, sources; return the hash."""
    digest = table.digest()
    sources = Counter(
        {
            str(item["values"] or "unknown"): int(item["counts"])
            for item in table.column("source").value_counts().to_pylist()
        }
    )
    run.set_tags({"forge.data.name": name, "forge.data.path": str(path), "forge.data.hash": digest})
    run.log_metrics({"data/size": float(len(table))} | count_metrics("data/source", sources))
    if cfg.tracking.log_datasets:
        frame = table.table.select(["user", "assistant", "category"]).to_pandas()
        run.log_dataset(name, frame, digest, path, "training")
    return digest
