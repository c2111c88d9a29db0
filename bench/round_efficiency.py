"""How close a round of Ray Tune trials comes to the ideal, and what ASHA saves.

Prints, from one run on the drone-router example and the tiny model:
  (a) round wall time / ideal, where ideal = sum of the same trials' bare training times
      (train + dev eval in this process, one thread each) / concurrency   — bound: <= 1.15
      The rounds run in steady state, as in a flywheel: Ray is already up and the tiny
      model cached; the Ray start-up is printed apart.
  (b) tokenisation passes over the training set per round                 — bound: == 1
  (c) MLflow logging overhead: driver time in the MLflow callback / round wall time,
      plus the round wall time with tracking on vs off for reference      — bound: <= 2 %
  (d) epochs trained by ASHA vs FIFO on the same space and first points, with the best dev
      loss each reached                                                   — bound: <= 0.6

    .venv/bin/python bench/round_efficiency.py [--trials 8] [--epochs 6] [--examples 400] [--keep]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from _common import example_project, print_table, quiet_libraries

quiet_libraries()

# A space with clearly good and clearly bad learning rates, so that early stopping has work.
SPACE = {"training.learning_rate": "choice(5e-3, 2e-3, 1e-5, 1e-6)", "lora.r": "choice(4,8)"}
GOOD, BAD = [5e-3, 2e-3], [1e-5, 1e-6]


def first_points(n: int) -> list[dict]:
    """Alternate good and bad points so both schedulers see the same, mixed, order."""
    lrs = [GOOD[0], BAD[0], GOOD[1], BAD[1]]
    return [{"training.learning_rate": lrs[i % 4], "lora.r": (4, 8)[(i // 4) % 2]} for i in range(n)]


def bare_seconds(cfg, trial_configs: list[dict]) -> list[float]:
    """Time each trial's work (model load, train, dev eval) in this process, one thread."""
    import torch

    from forge_ml.config.overrides import with_overrides
    from forge_ml.data.chat import sft_dataset
    from forge_ml.data.project_data import load_project_data
    from forge_ml.evaluation.evaluate import evaluate_examples
    from forge_ml.evaluation.scorers import make_scorer
    from forge_ml.models.adapters import peft_config_for
    from forge_ml.models.loader import load_base_model, load_tokenizer, resolve_base
    from forge_ml.project import Project
    from forge_ml.training import train_sft

    project = Project(Path(cfg.project_dir))
    data = load_project_data(project, cfg.task)
    base = resolve_base(cfg, project, data.training_text())
    tokenizer = load_tokenizer(base, cfg.model, project)
    train = sft_dataset(data.train, tokenizer, data.system_prompt)
    dev = sft_dataset(data.dev, tokenizer, data.system_prompt)
    torch.set_num_threads(1)
    times = []
    for overrides in trial_configs:
        trial_cfg = with_overrides(cfg, overrides)
        trial_cfg.training.threads = 1
        started = time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp:
            model = load_base_model(base, trial_cfg)
            outcome = train_sft(
                trial_cfg,
                model,
                tokenizer,
                train,
                dev,
                Path(tmp) / "a",
                peft_config=peft_config_for(trial_cfg),
                tqdm=False,
                scratch_dir=Path(tmp) / "s",
                on_checkpoint=lambda *a: None,
            )
            evaluate_examples(
                outcome.model,
                tokenizer,
                data.dev,
                system_prompt=data.system_prompt,
                system_role=True,
                cfg=trial_cfg.eval,
                scorer=make_scorer(trial_cfg.eval, project.root),
                label="dev",
            )
        times.append(time.perf_counter() - started)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=6, help="enough epochs for ASHA rungs at 1, 2 and 4")
    parser.add_argument("--examples", type=int, default=400, help="training examples kept from the example")
    parser.add_argument(
        "--keep", action="store_true", help="keep the temp project (MLflow store, Ray results)"
    )
    args = parser.parse_args()
    concurrency = 2
    overrides = [
        "model.tiny.hidden_size=64",
        "model.tiny.intermediate_size=128",
        "model.tiny.vocab_size=512",
        f"training.epochs={args.epochs}",
        "training.batch_size=16",
        "eval.max_new_tokens=24",
        f"tune.num_samples={args.trials}",
        f"tune.max_concurrent_trials={concurrency}",
        "tune.resources.cpu=1",
        f"tune.num_cpus={concurrency}",
        "tune.searcher=random",
        "tune.grace_period=1",
        "tune.reduction_factor=2",
    ]
    from forge_ml.config.overrides import with_overrides
    from forge_ml.data.chat import PASS_LOG_ENV
    from forge_ml.data.project_data import load_project_data
    from forge_ml.models.loader import resolve_base
    from forge_ml.search import with_space
    from forge_ml.tuning.engine import run_round
    from forge_ml.tuning.runtime import ray_runtime

    with example_project(overrides, keep=args.keep) as bench:
        cfg = with_space(bench.cfg, SPACE)
        canonical = bench.project.root / "dataset" / "canonical.jsonl"
        lines = canonical.read_text(encoding="utf-8").splitlines()
        canonical.write_text("\n".join(lines[:: max(1, len(lines) // args.examples)][: args.examples]) + "\n")
        points = first_points(args.trials)
        # Steady state, as across flywheel rounds: the tiny model is cached and Ray is up.
        resolve_base(cfg, bench.project, load_project_data(bench.project, cfg.task).training_text())
        ray_started = time.perf_counter()
        runtime = ray_runtime(cfg.tune)
        runtime.__enter__()
        ray_start_s = time.perf_counter() - ray_started
        log_file = bench.tmpdir / "tokenize.log"
        os.environ[PASS_LOG_ENV] = str(log_file)
        fifo = run_round(with_overrides(cfg, {"tune.scheduler": "fifo"}), first_points=points)
        os.environ.pop(PASS_LOG_ENV)
        passes = [line.split() for line in log_file.read_text().splitlines()]
        n_train = max(int(n) for _, n in passes)
        train_passes = sum(1 for _, n in passes if int(n) == n_train)
        foreign = {pid for pid, _ in passes if int(pid) != os.getpid()}

        untracked = run_round(
            with_overrides(cfg, {"tune.scheduler": "fifo"}), first_points=points, track=False
        )
        asha = run_round(with_overrides(cfg, {"tune.scheduler": "asha"}), first_points=points)
        runtime.__exit__(None, None, None)
        bare = bare_seconds(cfg, [t.config for t in fifo.trials])

    ideal = sum(bare) / concurrency
    ratio_a = fifo.wall_s / ideal
    overhead_c = fifo.tracking_s / fifo.wall_s
    on_off = fifo.wall_s / untracked.wall_s
    fifo_best = min(t.metrics["dev/loss"] for t in fifo.trials)
    asha_best = min(t.metrics["dev/loss"] for t in asha.trials)
    ratio_d = asha.epochs_trained / fifo.epochs_trained
    same_best = asha_best <= fifo_best * 1.02

    print(
        f"round_efficiency: {args.trials} trials x {args.epochs} epochs, concurrency {concurrency}, tiny model"
    )
    print_table(
        ["figure", "value", "bound", "verdict"],
        [
            [
                "(a) round wall / ideal",
                f"{ratio_a:.3f}  ({fifo.wall_s:.1f}s vs {ideal:.1f}s)",
                "<= 1.15",
                "PASS" if ratio_a <= 1.15 else "FAIL",
            ],
            [
                "(b) tokenisation passes",
                f"{train_passes} (workers: {len(foreign)})",
                "== 1",
                "PASS" if train_passes == 1 and not foreign else "FAIL",
            ],
            [
                "(c) MLflow overhead",
                f"{overhead_c:.2%}  (on/off wall {on_off:.3f})",
                "<= 2%",
                "PASS" if overhead_c <= 0.02 else "FAIL",
            ],
            [
                "(d) ASHA/FIFO epochs",
                f"{ratio_d:.3f}  ({asha.epochs_trained} vs {fifo.epochs_trained})",
                "<= 0.6",
                "PASS" if ratio_d <= 0.6 and same_best else "FAIL",
            ],
            [
                "    best dev loss",
                f"ASHA {asha_best:.4f} / FIFO {fifo_best:.4f}",
                "ASHA <= FIFO +2%",
                "PASS" if same_best else "FAIL",
            ],
        ],
        left=1,
    )
    print("bare trial seconds:", ", ".join(f"{b:.1f}" for b in bare))
    print(
        f"round walls: FIFO tracked {fifo.wall_s:.1f}s, FIFO untracked {untracked.wall_s:.1f}s, ASHA {asha.wall_s:.1f}s;"
        f" Ray runtime start (once, not in the rounds) {ray_start_s:.1f}s"
    )
    ok = (
        ratio_a <= 1.15
        and train_passes == 1
        and not foreign
        and overhead_c <= 0.02
        and ratio_d <= 0.6
        and same_best
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
