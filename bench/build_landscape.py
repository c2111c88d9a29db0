"""Build a tabulated landscape: real LoRA trainings over a grid of a task's config, per epoch, in a CSV.

Each configuration of a task's grid (learning rate x epochs x batch size x LoRA rank; every
other key keeps the task's configured value) is trained for real, once per seed, with forge-ml's
own trainer (`training.train_sft`, TRL + PEFT) on the task's train split. After every epoch the
dev loss is recorded and the adapter is evaluated on dev by greedy generation and the task's
scorer (dev accuracy). bench/search_landscapes.py then replays search methods on the table
instead of training, so hundreds of seeds take seconds. A full grid, not a scattered design:
a point any method proposes then snaps to the grid value of each key, so a trust region that
moves or shrinks sees the landscape move with it.

Landscapes (`--task`):
  drone-router           the example, tiny model (64 wide), 160 examples, its bounds' keys
  ticket-triage          six-queue ticket routing (bench/landscapes/ticket_triage.py), exact
                         scorer, tiny model, the default bounds' range of learning rate and epochs
  ticket-triage-smollm2  ticket routing on SmolLM2-135M-Instruct (the offline copy), a small
                         grid (a CPU's hours)

Trials run `--workers` at a time, one thread each. Finished trials are appended to
`<out>.part` as they end, so an interrupted build continues where it stopped (same arguments);
the CSV is written, with the command and library versions in its header, when all are done.

    .venv/bin/python bench/build_landscape.py --task drone-router [--seeds 2] [--workers 2] [--limit N]
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import multiprocessing
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _common import keep_every_kth, quiet_libraries

quiet_libraries()

HERE = Path(__file__).resolve().parent
METRICS = ["epoch", "train_loss", "dev_loss", "dev_accuracy", "seconds"]


@dataclass(frozen=True)
class Task:
    name: str
    overrides: tuple[str, ...]  # composed onto the project's config
    examples: int  # canonical lines kept (dev is split off them)
    gold: int
    grid: dict[str, tuple[Any, ...]]  # the values trained for each searched key; the rest keep the task's


TINY = ("model.tiny.hidden_size=64", "model.tiny.intermediate_size=128")
FIXED_SHOWN = (
    "training.warmup_ratio",
    "training.weight_decay",
    "lora.alpha",
    "lora.dropout",
    "training.max_seq_length",
)
LR, EPOCHS, BATCH, RANK = "training.learning_rate", "training.epochs", "training.batch_size", "lora.r"
TASKS = {
    "drone-router": Task(
        "drone-router",
        (*TINY, "eval.max_new_tokens=32", "task.dev_min=40"),
        160,
        20,
        {
            LR: (1e-3, 1.78e-3, 3.16e-3, 5.62e-3, 1e-2),
            EPOCHS: (3, 4, 5, 6),
            BATCH: (8, 16, 32),
            RANK: (4, 16, 64),
        },
    ),
    "ticket-triage": Task(
        "ticket-triage",
        (
            "model=tiny",
            "training=tiny",
            *TINY,
            "eval.scorer=exact",
            "eval.max_new_tokens=6",
            "task.dev_min=40",
        ),
        240,
        30,
        {
            LR: (1e-5, 1e-4, 3.16e-4, 1e-3, 3.16e-3, 1e-2),
            EPOCHS: (1, 2, 4, 6, 8),
            BATCH: (8, 16, 32),
            RANK: (4, 16, 64),
        },
    ),
    "ticket-triage-smollm2": Task(
        "ticket-triage-smollm2",
        (
            "model=smollm2-135m-instruct",
            "training=default",
            "training.batch_size=8",
            "eval.scorer=exact",
            "eval.max_new_tokens=6",
            "task.dev_min=16",
            "task.dev_max=16",
        ),
        48,
        10,
        {LR: (1e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2), EPOCHS: (1, 2, 3, 6), RANK: (4, 16)},
    ),
}


def make_project(task: Task, root: Path) -> Any:
    from forge_ml.project import init_project

    if task.name.startswith("drone-router"):
        project = init_project(root / task.name, example="drone-router")
    else:
        from landscapes.ticket_triage import write_project

        project = init_project(root / task.name)
        write_project(project.root, examples=task.examples, gold=task.gold)
    keep_every_kth(project.root / "dataset" / "canonical.jsonl", task.examples)
    keep_every_kth(project.root / "dataset" / "gold.jsonl", task.gold)
    (project.root / "dataset" / "seed.jsonl").write_text("", encoding="utf-8")
    return project


def compose(task: Task, project_root: Path) -> Any:
    from forge_ml.compose import compose_config
    from forge_ml.config import BoundConfig
    from forge_ml.project import Project

    cfg = compose_config(Project(project_root), list(task.overrides))
    bounds = {}
    for key, values in task.grid.items():  # the grid's hull, on the scale the task's bound uses
        bound = cfg.planner.bounds[key]
        if bound.choices is not None:
            bounds[key] = BoundConfig(choices=list(values))
        else:
            bounds[key] = BoundConfig(low=min(values), high=max(values), log=bound.log)
    cfg.planner.bounds = bounds
    return cfg


def grid(task: Task) -> list[dict[str, Any]]:
    """Every combination of the task's grid values."""
    keys = list(task.grid)
    return [dict(zip(keys, values, strict=True)) for values in itertools.product(*task.grid.values())]


class Worker:
    """One process's model, data and tokenizer, loaded once; trains one (config, seed) at a time."""

    def __init__(self, task: Task, project_root: Path) -> None:
        import torch

        from forge_ml.data.project_data import load_project_data
        from forge_ml.data.tokens import sft_datasets, token_cache
        from forge_ml.evaluation.scorers import make_scorer
        from forge_ml.models.loader import load_base_model, load_tokenizer, resolve_base
        from forge_ml.progress import set_quiet
        from forge_ml.project import Project

        set_quiet(True)
        torch.set_num_threads(1)
        self.cfg = compose(task, project_root)
        project = Project(project_root)
        self.data = load_project_data(project, self.cfg.task, write_seed=False)
        base = resolve_base(self.cfg, project, self.data.training_text())
        self.tokenizer = load_tokenizer(base, self.cfg.model, project)
        self.tokens = sft_datasets(
            self.data,
            self.tokenizer,
            system_role=self.cfg.model.system_role,
            max_length=None,
            cache=token_cache(project),
        )
        self.base = load_base_model(base, self.cfg)
        self.scorer = make_scorer(self.cfg.eval, project.root)
        self.dev = self.data.dev

    def trial(self, point: dict[str, Any], seed: int) -> list[dict[str, float]]:
        import copy
        import tempfile

        import transformers
        from peft import get_peft_model

        from forge_ml.config.overrides import with_overrides
        from forge_ml.evaluation.evaluate import evaluate_examples
        from forge_ml.models.adapters import peft_config_for
        from forge_ml.training import train_sft

        cfg = with_overrides(self.cfg, {**point, "training.seed": seed})
        cfg.training.threads = 1
        transformers.set_seed(seed)
        model = get_peft_model(copy.deepcopy(self.base), peft_config_for(cfg))
        rows: list[dict[str, float]] = []
        started = time.perf_counter()

        def on_epoch(metrics: dict[str, float], epoch: int) -> None:
            report = evaluate_examples(
                model,
                self.tokenizer,
                self.dev,
                system_prompt=self.data.system_prompt,
                system_role=cfg.model.system_role,
                cfg=cfg.eval,
                scorer=self.scorer,
                label="dev",
            )
            rows.append(
                {
                    "epoch": epoch,
                    "train_loss": metrics.get("train/loss", float("nan")),
                    "dev_loss": metrics["dev/loss"],
                    "dev_accuracy": report.accuracy,
                    "seconds": time.perf_counter() - started - sum(r["seconds"] for r in rows),
                }
            )

        with tempfile.TemporaryDirectory(prefix="forge-landscape-") as tmp:
            train_sft(
                cfg,
                model,
                self.tokenizer,
                self.tokens.train,
                self.tokens.dev,
                Path(tmp) / "a",
                on_epoch=on_epoch,
                tqdm=False,
                scratch_dir=Path(tmp) / "s",
            )
        return rows


_worker: Worker | None = None


def _init(task: Task, project_root: Path) -> None:
    global _worker
    sys.stdout = open(os.devnull, "w")  # noqa: SIM115 -- the trainer's per-epoch log dicts, for the worker's life
    _worker = Worker(task, project_root)


def _run(job: tuple[int, int, dict[str, Any]]) -> tuple[int, int, list[dict[str, float]]]:
    config_id, seed, point = job
    assert _worker is not None
    try:
        return config_id, seed, _worker.trial(point, seed)
    except Exception as exc:  # a diverged or failed trial is a point of the landscape too
        print(f"config {config_id} seed {seed}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return config_id, seed, []


def versions() -> str:
    import importlib.metadata as md

    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=HERE)
    libs = ["torch", "transformers", "trl", "peft", "ray", "optuna"]
    return ", ".join(
        [f"forge-ml {rev.stdout.strip() or '?'}", f"python {sys.version.split()[0]}"]
        + [f"{lib} {md.version(lib)}" for lib in libs]
    )


def done_jobs(part: Path) -> set[tuple[int, int]]:
    if not part.exists():
        return set()
    with part.open(encoding="utf-8") as f:
        return {(int(r["config"]), int(r["seed"])) for r in csv.DictReader(f)}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--task", choices=sorted(TASKS), required=True)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--limit", type=int, default=None, help="stop after this many trials (a timing check)"
    )
    parser.add_argument("--out", type=Path, default=None, help="default bench/landscapes/<task>.csv")
    parser.add_argument("--work", type=Path, default=Path("/tmp/forge-landscapes"), help="the task's project")
    args = parser.parse_args()
    task = TASKS[args.task]
    out = args.out or HERE / "landscapes" / f"{task.name}.csv"
    part = out.with_name(out.name + ".part")
    out.parent.mkdir(parents=True, exist_ok=True)

    project_root = args.work / task.name
    if not project_root.exists():
        args.work.mkdir(parents=True, exist_ok=True)
        make_project(task, args.work)
    cfg = compose(task, project_root)
    bounds = cfg.planner.bounds
    keys = list(bounds)
    points = grid(task)
    jobs = [(c, s, points[c]) for s in range(args.seeds) for c in range(len(points))]
    finished = done_jobs(part)
    todo = [j for j in jobs if (j[0], j[1]) not in finished][: args.limit]
    print(f"{task.name}: {len(jobs)} trials, {len(finished)} done, running {len(todo)}", flush=True)

    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1, initializer=_init, initargs=(task, project_root)) as pool:
        pool.apply(time.sleep, (0,))  # tiny model and token cache built once, before the workers race
    new = not part.exists()
    started = time.perf_counter()
    with (
        part.open("a", newline="", encoding="utf-8") as f,
        ctx.Pool(args.workers, initializer=_init, initargs=(task, project_root)) as pool,
    ):
        writer = csv.DictWriter(f, ["config", "seed", *keys, *METRICS])
        if new:
            writer.writeheader()
        for n, (config_id, seed, rows) in enumerate(pool.imap_unordered(_run, todo), 1):
            for row in rows or [dict.fromkeys(METRICS, float("nan"))]:
                writer.writerow({"config": config_id, "seed": seed, **points[config_id], **row})
            f.flush()
            if n % 10 == 0 or n == len(todo):
                rate = (time.perf_counter() - started) / n
                print(
                    f"  {n}/{len(todo)} trials, {rate:.1f} s each, ~{rate * (len(todo) - n) / 60:.0f} min left",
                    flush=True,
                )
    if done_jobs(part) >= {(c, s) for c, s, _ in jobs}:
        write_table(part, out, task, cfg, args)
        part.unlink()
        print(f"wrote {out}")
    return 0


def write_table(part: Path, out: Path, task: Task, cfg: Any, args: argparse.Namespace) -> None:
    """Write the sorted rows of `part` to `out` under a header: how they were made, and the task's config
    values of the bounded keys (the offline planner's first point)."""
    from forge_ml.config.overrides import config_value

    with part.open(encoding="utf-8") as f:
        rows = sorted(
            csv.DictReader(f), key=lambda r: (int(r["config"]), int(r["seed"]), float(r["epoch"] or 0))
        )
    data_note = f"{task.examples} examples kept from canonical (dev split off them), {task.gold} gold unused"
    bounds = {
        k: {
            f: getattr(b, f)
            for f in ("low", "high", "choices", "log")
            if getattr(b, f) is not None and getattr(b, f) is not False
        }
        for k, b in cfg.planner.bounds.items()
    }
    header = [
        f"# landscape: {task.name}; {data_note}",
        f"# command: .venv/bin/python bench/build_landscape.py --task {task.name} --seeds {args.seeds}",
        f"# overrides: {' '.join(task.overrides)}",
        f"# bounds: {json.dumps(bounds)}",
        f"# start: {json.dumps({k: config_value(cfg, k) for k in cfg.planner.bounds})}",
        f"# fixed: {json.dumps({k: config_value(cfg, k) for k in FIXED_SHOWN if k not in cfg.planner.bounds})}",
        f"# versions: {versions()}",
        f"# built: {time.strftime('%Y-%m-%d')} on {multiprocessing.cpu_count()} CPU cores, {args.workers} trials at a"
        " time, one thread each",
    ]
    tmp = out.with_name(out.name + ".tmp")
    with tmp.open("w", newline="", encoding="utf-8") as f:
        f.write("\n".join(header) + "\n")
        writer = csv.DictWriter(f, list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    tmp.replace(out)


if __name__ == "__main__":
    sys.exit(main())
