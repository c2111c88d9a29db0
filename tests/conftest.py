"""Shared fixtures: real projects in temp dirs, shrunk so the suite runs on 2 CPU cores."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from forge_ml.project import Project, init_project

pytest_plugins = ["reliability"]  # the `proof` fixture and --reliability-report (tests/reliability.py)

# Compute threads per test: the suite's workers (pytest-xdist) share the cores, and torch's
# OpenMP threads slow down sharply when oversubscribed (a Ray round beside a 2-thread training
# took 200 s instead of 75 s on 2 cores). Every training the suite starts, in this process, in a
# CLI subprocess or in a Ray worker, gets the worker's share; OMP_NUM_THREADS covers the
# processes that leave training.threads at 0.
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
THREADS = max(1, (os.cpu_count() or 1) // WORKERS)
os.environ.setdefault("OMP_NUM_THREADS", str(THREADS))

# A smaller tiny model and one short epoch: enough to exercise every stage quickly.
FAST = [
    "model.tiny.hidden_size=64",
    "model.tiny.intermediate_size=128",
    "model.tiny.vocab_size=512",
    "training.epochs=2",
    "training.batch_size=16",
    f"training.threads={THREADS}",
    "eval.max_new_tokens=24",
    # one trial at a time: each concurrent trial is a Ray actor importing torch, transformers, TRL
    # and PEFT (~6 s of CPU), and the suite's workers already keep the cores busy; the tests of
    # concurrency (test_tuning, test_cluster, test_real_model) set 2
    "tune.max_concurrent_trials=1",
]


def shrink_jsonl(path: Path, keep: int) -> None:
    """Keep an even spread of `keep` lines (every k-th) so categories stay mixed."""
    lines = path.read_text(encoding="utf-8").splitlines()
    step = max(1, len(lines) // keep)
    path.write_text("\n".join(lines[::step][:keep]) + "\n", encoding="utf-8")


@pytest.fixture(autouse=True, scope="session")
def _temp_files_under_basetemp(tmp_path_factory):
    """Temporary files of this process and of every process a test starts (forge-ml, Ray's workers,
    servers) go under pytest's basetemp, which pytest prunes, not /tmp: MLflow's downloads without
    a destination stay where they land, and a test can check that a command left nothing behind.
    Ray's session directory stays under /tmp/ray (RAY_TMPDIR): its socket paths must stay short."""
    folder = str(tmp_path_factory.mktemp("tmp"))
    saved = {name: os.environ.get(name) for name in ("TMPDIR", "RAY_TMPDIR")}
    os.environ["TMPDIR"] = folder
    os.environ.setdefault("RAY_TMPDIR", "/tmp")
    before, tempfile.tempdir = tempfile.tempdir, folder
    yield
    tempfile.tempdir = before
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


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
    """drone-router with 120 training and 18 gold examples, an even spread of its commands."""
    project = init_project(tmp_path / "small", example="drone-router")
    shrink_jsonl(project.root / "dataset" / "canonical.jsonl", 120)
    shrink_jsonl(project.root / "dataset" / "gold.jsonl", 18)
    return project


def chat_record(user: str, assistant: str = "ok", **meta) -> dict:
    """One JSONL record of a user turn and its answer (with `meta` when given)."""
    record = {"messages": [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]}
    if meta:
        record["meta"] = meta
    return record


@pytest.fixture
def bare_project(tmp_path: Path) -> Project:
    """A new project with one gold example ("a gold question"), no seed and no canonical yet."""
    project = init_project(tmp_path / "p")
    write_jsonl(project.root / "dataset" / "gold.jsonl", [chat_record("a gold question")])
    (project.root / "dataset" / "seed.jsonl").unlink(missing_ok=True)
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


# The modules that take longest (test-time sums on 2 cores, `--durations=0`, 2026-12-04: 394 s,
# 351, 236, 235, 210, 141, 140, 124, 117, 110, 90, 82, 69, 65), started first so that the
# parallel workers do not end with one waiting on a long module picked up last. `make test`
# runs pytest-xdist with --dist=loadfile --no-loadscope-reorder: one module per worker at a
# time, in this order (xdist's default reorders modules by their number of tests).
LONGEST_FIRST = (
    "test_real_model.py",
    "test_resilience.py",
    "test_tuning.py",
    "test_plan_fuzz.py",
    "test_train_e2e.py",
    "test_stopping.py",
    "test_registry_commands.py",
    "test_promote_commands.py",
    "test_secret_paths.py",
    "test_probe_pretrain.py",
    "test_data_claude.py",
    "test_cluster.py",
    "test_push.py",
    "test_serving.py",
    "test_flywheel.py",
    "test_data_commands.py",
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


@pytest.fixture(scope="session")
def shared(tmp_path_factory):
    """The registry command tests' project: a tiny adapter trained once per worker, registered as
    v1 (champion) and v2 (challenger); tests/registry_checks.py."""
    from registry_checks import build_shared

    return build_shared(tmp_path_factory)


@pytest.fixture
def fake(monkeypatch):
    """The fake Messages API on loopback, the SDK pointed at it by ANTHROPIC_API_KEY and
    ANTHROPIC_BASE_URL (a module with its own `fake` fixture uses that one instead)."""
    from fake_anthropic import FakeAnthropic

    with FakeAnthropic() as server:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-0123456789abcdef")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
        yield server
