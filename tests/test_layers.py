"""The design's layers, checked by import-linter (the contracts are in pyproject.toml; `make lint` runs them too)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def lint_imports(cwd: Path) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("lint-imports")
    return subprocess.run(
        [str(exe), "--no-cache"],
        cwd=cwd,
        env={"PYTHONPATH": str(cwd), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_every_layer_contract_holds():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        ("forge_ml/config/planner.py", "import forge_ml.search", "no import cycle"),
        ("forge_ml/planner/plan.py", "import forge_ml.tuning.engine", "the planner decides what to run"),
        ("forge_ml/jobs/status.py", "import anthropic", "only llm.py talks to Anthropic"),
        ("forge_ml/flywheel.py", "import mlflow", "only tracking.py, registry.py"),
    ],
)
def test_a_contract_breaks_when_a_forbidden_import_appears(tmp_path, module, line, contract):
    """The contracts can fail: the same check on a copy of the package with one forbidden import added."""
    shutil.copytree(ROOT / "forge_ml", tmp_path / "forge_ml", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / module
    target.write_text(
        target.read_text(encoding="utf-8") + f"\n{line}  # injected by the test\n", encoding="utf-8"
    )
    result = lint_imports(tmp_path)
    assert result.returncode == 1
    broken = [row for row in result.stdout.splitlines() if row.rstrip().endswith("BROKEN")]
    assert any(contract in row for row in broken) or contract in result.stdout.split("Broken contracts")[-1]
