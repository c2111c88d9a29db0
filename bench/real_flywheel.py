"""The flywheel on the real pretrained base: gold accuracy and wall time per round.

    .venv/bin/python bench/real_flywheel.py                       # 3 rounds, 1 trial each (CPU: hours)
    .venv/bin/python bench/real_flywheel.py --rounds 5 --trials 4 # a GPU machine's budget

A fresh copy of the drone-router example, cleaned down to its 30 seed examples (as `make demo`
starts), runs `forge-ml flywheel` with the offline planner on `model=smollm2-135m-instruct`
(the offline copy when the Hub is not reachable). Each round the planner adds `--augment`
examples aimed at the categories that failed on gold, a round of `--trials` LoRA trials trains
on the grown set, and the gate decides on gold. The table is read from the project's own record
of its rounds (output/experiments.jsonl), so it shows what a user's project shows. This is a
benchmark, not a test: it trains a 135M-parameter model for real.
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

from _common import FORGE_ML

ROOT = Path(__file__).resolve().parents[1]
PRESET = "smollm2-135m-instruct"


def forge(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "160"}
    env.pop("ANTHROPIC_API_KEY", None)  # the offline planner: the figures do not depend on an API
    return subprocess.run([*FORGE_ML, *args], env=env, capture_output=True, text=True, check=False)


def pin_epochs(config_file: Path, epochs: int) -> None:
    """Let the planner move everything but the epochs (it would otherwise search up to 8)."""
    from ruamel.yaml import YAML

    yaml = YAML()
    data = yaml.load(config_file.read_text(encoding="utf-8"))
    bounds = data.setdefault("planner", {}).setdefault("bounds", {})
    bounds["training.epochs"] = {"low": None, "high": None, "choices": [epochs]}
    with config_file.open("w", encoding="utf-8") as out:
        yaml.dump(data, out)


def _fig(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--trials", type=int, default=1, help="LoRA trials per round (tune.num_samples)")
    parser.add_argument(
        "--augment", type=int, default=100, help="examples the offline planner adds per round"
    )
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--max-seq-length", type=int, default=256)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--keep", type=Path, help="keep the project here (default: a temporary directory)")
    opts = parser.parse_args(argv)

    workdir = Path(tempfile.mkdtemp(prefix="forge-real-flywheel-"))
    project = (opts.keep or workdir / "drone-router").resolve()
    started = time.perf_counter()
    try:
        for step in (
            ["init", str(project), "--example", "drone-router", "--no-git"],
            ["-p", str(project), "clean"],
        ):
            done = forge(*step)
            if done.returncode:
                print(done.stdout + done.stderr, file=sys.stderr)
                return 2
        pin_epochs(project / "forge.yaml", opts.epochs)
        overrides = [
            f"model={PRESET}",
            "training=default",
            f"training.learning_rate={opts.learning_rate}",
            f"training.epochs={opts.epochs}",
            f"training.max_seq_length={opts.max_seq_length}",
            "planner=offline",
            f"planner.augment_n={opts.augment}",
            f"planner.min_samples={opts.trials}",
            f"planner.max_samples={opts.trials}",
            f"tune.num_samples={opts.trials}",
        ]
        print(f"forge-ml -p {project} flywheel --rounds {opts.rounds} {' '.join(overrides)}", flush=True)
        run = forge("-p", str(project), "flywheel", "--rounds", str(opts.rounds), *overrides)
        total = time.perf_counter() - started
        if run.returncode:
            print(run.stdout[-4000:] + run.stderr[-4000:], file=sys.stderr)
            return run.returncode
        records = [
            json.loads(line)
            for line in (project / "output" / "experiments.jsonl").read_text().splitlines()
            if line
        ]
        print(
            "\n| round | canonical examples | added | dev accuracy | gold accuracy | gate | champion after | wall s |"
        )
        print("|---|---|---|---|---|---|---|---|")
        for r in records:
            print(
                f"| {r['round']} | {r['dataset_size']} | {r['examples_added']} | {_fig(r['dev_accuracy'])} | "
                f"{_fig(r['gold_accuracy'])} | {'promoted' if r['promoted'] else 'refused'} | "
                f"{_fig(r['champion_accuracy'])} | {r['wall_s']:.0f} |"
            )
        gold = [r["gold_accuracy"] for r in records if r["gold_accuracy"] is not None]
        print(
            f"\nreal_flywheel: gold accuracy {' -> '.join(f'{g:.3f}' for g in gold)} over {len(records)} rounds, "
            f"{total:.0f} s in all ({total / max(len(records), 1):.0f} s per round); {opts.trials} trial(s) a round, "
            f"{opts.epochs} epochs, +{opts.augment} examples a round"
        )
        return 0
    finally:
        if opts.keep is None:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
