"""The wheel a user installs: built offline from this checkout, installed into a fresh virtual
environment outside it, and run from there.

The fresh environment gets the wheel itself through pip (`--no-deps`) and borrows the
dependencies of the test's own environment through a `.pth` line (installing torch, Ray and
MLflow again would take minutes and the network). A `.pth` line adds that directory to sys.path
without processing the `.pth` files inside it, so the checkout's editable install is not seen:
what runs is the wheel, and the test checks that it is.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    build = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation"]
    done = subprocess.run([*build, "--wheel-dir", str(out), str(ROOT)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    (found,) = out.glob("forge_ml-*.whl")
    return found


@pytest.fixture(scope="module")
def fresh_env(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    env = tmp_path_factory.mktemp("venv") / "env"
    venv.EnvBuilder(with_pip=False).create(env)
    python = env / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(site, "borrowed-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    install = [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps"]
    done = subprocess.run([*install, "--no-index", str(wheel)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return env


def _run(env: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    clean["PATH"] = f"{env / 'bin'}{os.pathsep}{clean.get('PATH', '')}"
    return subprocess.run(list(args), cwd=cwd, env=clean, capture_output=True, text=True, timeout=300)


def test_the_wheel_ships_the_layout(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for shipped in (
        "forge_ml/packaged.py",
        "forge_ml/conf/forge.yaml",
        "forge_ml/conf/model/tiny.yaml",
        "forge_ml/conf/model/smollm2-135m-instruct.yaml",
        "forge_ml/examples/drone-router/forge.yaml",
        "forge_ml/examples/drone-router/dataset/gold.jsonl",
        "trainables/__init__.py",
        "trainables/sft.py",
        "hydra_plugins/forge_ml_searchpath/__init__.py",
        "hydra_plugins/forge_ml_tune_sweeper/tune_sweeper.py",
    ):
        assert shipped in names, f"{shipped} missing from {wheel.name}"
    # The checkout's top-level data folders live inside the package in the wheel, nowhere else.
    assert not [n for n in names if n.startswith(("conf/", "examples/"))]
    assert not [n for n in names if "/output/" in n or n.endswith(("mlflow.db", ".pyc"))]


def test_init_and_compose_from_a_fresh_environment(fresh_env: Path, tmp_path: Path) -> None:
    where = _run(
        fresh_env,
        tmp_path,
        "python",
        "-c",
        "import forge_ml, trainables.sft, forge_ml.packaged as p; "
        "print(forge_ml.__file__); print(trainables.sft.__file__); print(p.conf_root()); print(p.examples_root())",
    )
    assert where.returncode == 0, where.stderr[-3000:]
    for line in where.stdout.split():
        assert Path(line).resolve().is_relative_to(fresh_env.resolve()), (line, where.stdout)

    init = _run(fresh_env, tmp_path, "forge-ml", "init", "x", "--example", "drone-router")
    assert init.returncode == 0, init.stdout + init.stderr
    project = tmp_path / "x"
    assert (project / "forge.yaml").is_file() and (project / "dataset" / "gold.jsonl").is_file()
    assert (project / ".git").is_dir()  # init makes the project a repository

    job = _run(fresh_env, tmp_path, "forge-ml", "-p", "x", "train", "--cfg", "job")
    assert job.returncode == 0, job.stdout + job.stderr
    # Composed from the wheel's config tree: the example's choices over the packaged groups.
    import yaml

    composed = yaml.safe_load(job.stdout)
    assert composed["name"] == "x" and composed["eval"]["scorer"] == "json_cmd"  # the example's settings
    assert composed["model"]["name_or_path"] == "tiny" and composed["lora"]["r"] > 0  # the packaged groups
    assert composed["project_dir"] == str(project.resolve())

    override = _run(
        fresh_env, tmp_path, "forge-ml", "-p", "x", "train", "--cfg", "job", "model=smollm2-135m-instruct"
    )
    assert override.returncode == 0, override.stdout + override.stderr
    assert "SmolLM2-135M-Instruct" in yaml.safe_load(override.stdout)["model"]["name_or_path"]
