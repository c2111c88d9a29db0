"""MLflow provenance of a change to training data: the dataset version after it, and counts by name."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

from forge_ml.config import ForgeConfig
from forge_ml.data.examples import Example, dataset_hash
from forge_ml.tracking import TrackedRun

_UNSAFE = re.compile(r"[^\w\-./]+")


def metric_name(*parts: str) -> str:
    """An MLflow metric name from free text (categories, drop reasons): `data/dropped/matches_a_gold_input`."""
    return "/".join(_UNSAFE.sub("_", part.replace("'", "")).strip("_") or "_" for part in parts)


def count_metrics(prefix: str, counts: Mapping[str, int]) -> dict[str, float]:
    """`{prefix/name: count}` for every name in `counts`."""
    return {metric_name(prefix, name): float(n) for name, n in counts.items()}


def log_data_version(
    run: TrackedRun, cfg: ForgeConfig, *, name: str, examples: list[Example], path: Path
) -> str:
    """Record the dataset version at `path`: hash (tag and dataset input digest), size, sources; return the hash."""
    digest = dataset_hash(examples)
    sources = Counter(str(e.meta.get("source", "unknown")) for e in examples)
    run.set_tags({"forge.data.name": name, "forge.data.path": str(path), "forge.data.hash": digest})
    run.log_metrics({"data/size": float(len(examples))} | count_metrics("data/source", sources))
    if cfg.tracking.log_datasets:
        run.log_dataset(name, examples, digest, path, "training")
    return digest
