"""Benchmark: `make install`'s main step, forge-ml and its dependencies, through pip and through uv.

Each repeat makes two fresh virtual environments as `make install` starts them (pip upgraded,
the CPU torch in through scripts/install_torch.sh, untimed: it runs first either way), then times
one command in each, both with their download caches off (a CI machine starts with none). The uv
side runs the uv that `make install` put in this environment:

  pip   pip install --no-cache-dir -e ".[dev]"                                  (what `make install` ran before)
  uv    uv pip install --no-cache --compile-bytecode --python <venv> -e ".[dev]"  (what it runs now)

The two alternate in order; the verdict is the ratio of the medians. It also checks that the two
environments are the same install: the same distributions at the same versions (uv itself aside),
and a fresh interpreter that imports the training stack (torch, transformers, TRL, PEFT, Ray,
MLflow, forge-ml's CLI) as fast in one as in the other, timed with PYTHONDONTWRITEBYTECODE=1 as
on these machines. pip writes each module's bytecode at install time and uv does not unless asked
(`--compile-bytecode`); without it, where the environment forbids writing bytecode, every process
the suite starts compiles the stack from source again (3.5 s more per import here; the suite took
twice as long). Needs the package registries. Bounds: uv / pip <= 0.5 for the install (0.3 before
uv wrote bytecode: that compared pip's install and compile with uv's install alone), and import
time uv / pip <= 1.15.

    .venv/bin/python bench/install_time.py [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import median, positive_int, ratio_range

BOUND = 0.5
IMPORT_BOUND = 1.15
IMPORT_REPEATS = 3
STACK = "import torch, transformers, trl, peft, ray, mlflow, forge_ml.cli"
ROOT = Path(__file__).resolve().parents[1]


def fresh_venv(folder: Path) -> Path:
    """A new venv as `make install` starts it (pip upgraded, the CPU torch in), untimed; return its python."""
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
    python = folder / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--upgrade", "pip"], check=True, capture_output=True
    )
    subprocess.run([str(ROOT / "scripts" / "install_torch.sh"), str(python)], check=True, capture_output=True)
    return python


def installed(python: Path) -> dict[str, str]:
    code = "import importlib.metadata as m, json; print(json.dumps({d.metadata['Name'].lower(): d.version for d in m.distributions()}))"
    out = subprocess.run([str(python), "-c", code], check=True, capture_output=True, text=True)
    found = json.loads(out.stdout)
    found.pop("uv", None)
    return found


def timed_install(kind: str, python: Path, uv: Path) -> float:
    target = ["--quiet", "-e", ".[dev]"]
    if kind == "pip":
        command = [str(python), "-m", "pip", "install", "--no-cache-dir", *target]
    else:
        command = [
            str(uv),
            "pip",
            "install",
            "--no-cache",
            "--compile-bytecode",
            "--python",
            str(python),
            *target,
        ]
    started = time.perf_counter()
    subprocess.run(command, cwd=ROOT, check=True, capture_output=True)
    return time.perf_counter() - started


def import_time(python: Path) -> float:
    """Seconds a fresh interpreter takes to import the training stack, bytecode writing off."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    started = time.perf_counter()
    subprocess.run([str(python), "-c", STACK], cwd=ROOT, env=env, check=True, capture_output=True)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=positive_int, default=2)
    args = parser.parse_args()
    uv = shutil.which("uv", path=str(Path(sys.executable).parent))
    if uv is None:
        print("uv is not installed in this environment: run `make install` first", file=sys.stderr)
        return 2
    times: dict[str, list[float]] = {"pip": [], "uv": []}
    imports: dict[str, list[float]] = {"pip": [], "uv": []}
    same = True
    with tempfile.TemporaryDirectory(prefix="forge-install-bench-") as tmp:
        for n in range(args.repeats):
            order = ("pip", "uv") if n % 2 == 0 else ("uv", "pip")
            pythons = {kind: fresh_venv(Path(tmp) / f"{kind}-{n}") for kind in order}
            for kind in order:
                times[kind].append(timed_install(kind, pythons[kind], Path(uv)))
            by_pip, by_uv = installed(pythons["pip"]), installed(pythons["uv"])
            if by_pip != by_uv:
                same = False
                differ = sorted(set(by_pip.items()) ^ set(by_uv.items()))
                print(f"repeat {n}: the two environments differ: {differ}")
            else:
                print(f"repeat {n}: both environments hold the same {len(by_pip)} distributions")
            for _ in range(IMPORT_REPEATS):
                for kind in order:
                    imports[kind].append(import_time(pythons[kind]))
    pip, uv_time = median(times["pip"]), median(times["uv"])
    ratio = uv_time / pip
    print(f"{'':5} {'median s':>9}  runs (s)")
    for kind, values in times.items():
        print(f"{kind:5} {median(values):9.1f}  {' '.join(f'{v:.1f}' for v in values)}")
    import_ratio = median(imports["uv"]) / median(imports["pip"])
    print(
        "importing the stack in a fresh interpreter (s): "
        + ", ".join(
            f"{kind} {median(values):.2f} ({' '.join(f'{v:.2f}' for v in values)})"
            for kind, values in imports.items()
        )
    )
    passed = ratio <= BOUND and same and import_ratio <= IMPORT_BOUND
    print(
        f"uv / pip = {ratio:.3f} (per-run range {ratio_range(times['uv'], times['pip'])}) bound <= {BOUND}, "
        f"same distributions: {'yes' if same else 'no'}, import time uv / pip = {import_ratio:.3f} "
        f"bound <= {IMPORT_BOUND}: {'PASS' if passed else 'FAIL'}"
    )
    return 0 if passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
