"""Shared fixtures: real projects in temp dirs, shrunk so the suite runs on 2 CPU cores."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from forge_ml.project import Project, init_project

pytest_plugins = ["reliability"]  # the `proof` fixture and --reliability-report (tests/reliability.py)

# A smaller tiny model and one short epoch: enough to exercise every stage quickly.
FAST = [
    "model.tiny.hidden_size=64",
    "model.tiny.intermediate_size=128",
    "model.tiny.vocab_size=512",
    "training.epochs=2",
    "training.batch_size=16",
    "training.threads=2",
    "eval.max_new_tokens=24",
]


def shrink_jsonl(path: Path, keep: int) -> None:
    """Keep an even spread of `keep` lines (every k-th) so categories stay mixed."""
    lines = path.read_text(encoding="utf-8").splitlines()
    step = max(1, len(lines) // keep)
    path.write_text("\n".join(lines[::step][:keep]) + "\n", encoding="utf-8")


@pytest.fixture(autouse=True)
def _clean_hydra():
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    yield
    GlobalHydra.instance().clear()


@pytest.fixture
def example_project(tmp_path: Path) -> Project:
    """The full drone-router example, copied into a temp dir."""
    return init_project(tmp_path / "drone-router", example="drone-router")


@pytest.fixture
def small_project(tmp_path: Path) -> Project:
    """drone-router with 240 training and 27 gold examples."""
    project = init_project(tmp_path / "small", example="drone-router")
    shrink_jsonl(project.root / "dataset" / "canonical.jsonl", 240)
    shrink_jsonl(project.root / "dataset" / "gold.jsonl", 27)
    return project


def run_cli(*args: str, cwd: Path | None = None, env: dict | None = None, timeout: int = 600):
    """Run the installed `forge-ml` console script; return the CompletedProcess."""
    exe = Path(sys.executable).with_name("forge-ml")
    full_env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200", **(env or {})}
    return subprocess.run(
        [str(exe), *args], cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout, check=False
    )


def edit_config(project: Project, *path_and_value) -> None:
    """Set a nested value in the project's forge.yaml (keys may contain dots, e.g. planner.bounds entries)."""
    from ruamel.yaml import YAML

    *keys, value = path_and_value
    yaml = YAML()
    data = yaml.load(project.config_file.read_text(encoding="utf-8"))
    node = data
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    node[keys[-1]] = value
    with project.config_file.open("w", encoding="utf-8") as fh:
        yaml.dump(data, fh)


def write_jsonl(path: Path, rows: list) -> None:
    path.write_text(
        "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8"
    )


# The modules that take longest (seconds on 2 cores, from `--durations`), started first so that
# parallel workers (`make test` runs pytest-xdist, one module per worker at a time) do not end
# waiting on one long module picked up last.
LONGEST_FIRST = (
    "test_resilience.py",
    "test_real_model.py",
    "test_tuning.py",
    "test_train_e2e.py",
    "test_plan_fuzz.py",
    "test_stopping.py",
    "test_flywheel.py",
    "test_registry_commands.py",
    "test_audit_probe_pretrain.py",
    "test_serving.py",
    "test_cluster.py",
)


def pytest_collection_modifyitems(config, items):
    """Longest modules first; tests marked `gpu` need CUDA: skip them (with the reason) without it."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest keep their order
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:  # pragma: no cover
        has_cuda = False
    if has_cuda:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
