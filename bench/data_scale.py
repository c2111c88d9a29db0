"""Benchmark: preparing a large dataset for training, cold, warm and after a round's additions.

drone-router with canonical.jsonl grown by its offline generator to 1k, 10k, 100k and 200k
distinct examples (gold inputs left out, no seed file). "Data preparation" is everything
`forge-ml train` does with the data before the model loads: read canonical (Arrow cache),
dedup, gold check, dev split, content hashes, the tiny model's tokenizer, and the tokenised
train/dev datasets with their length checks. Each measurement is a fresh interpreter with the
libraries already imported; its wall time and peak RSS above that baseline are reported.

  cold    no cache in output/ (the first command on a project)
  warm    nothing changed since the last command
  +1 %    1 % new examples appended to canonical (what a flywheel round does)
  before  the path this replaced: every line parsed into Examples, each example tokenised one
          at a time into Python lists (`chat.tokenize_for_sft` + `Dataset.from_dict`), no cache

Then `forge-ml train training.max_steps=2` at the largest size, cold, for its peak RSS.
Bounds at 200k on 2 cores: cold <= 30 s, warm <= 3 s, +1 % <= 5 s, train peak RSS <= 2 GB, and
cold time growing no faster than linearly (fitted exponent over the sizes from 10k <= 1.1).

    .venv/bin/python bench/data_scale.py [--sizes 1000,10000,100000,200000] [--no-before]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from _common import EXAMPLE, FORGE_ML

ROOT = Path(__file__).resolve().parent.parent
BOUNDS = {"cold": 30.0, "warm": 3.0, "grow": 5.0, "train_rss_gb": 2.0, "exponent": 1.1}

CHILD = r"""
import json, os, resource, sys, time, warnings
warnings.filterwarnings("ignore")
import datasets, pyarrow, torch, transformers, trl  # the baseline: libraries imported
from pathlib import Path
from forge_ml.compose import compose_config
from forge_ml.project import Project
from forge_ml.progress import set_quiet
set_quiet(True)
project = Project(Path(sys.argv[1]))
cfg = compose_config(project, [])
mode = sys.argv[2]
from forge_ml.data.project_data import load_project_data
from forge_ml.models.loader import load_tokenizer, resolve_base
import forge_ml.data.chat
base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
started = time.perf_counter()
if mode == "before":
    import hashlib
    from datasets import Dataset
    from forge_ml.data.chat import tokenize_for_sft
    from forge_ml.data.examples import dataset_hash, read_examples
    from forge_ml.data.project_data import read_gold, read_system_prompt
    system_prompt, gold = read_system_prompt(project, cfg.task), read_gold(project, cfg.task)
    examples = read_examples(project.resolve(cfg.task.canonical_path))
    gold_keys = {ex.key for ex in gold}
    assert not any(ex.key in gold_keys for ex in examples)
    seen, kept = set(), []
    for ex in examples:
        if ex.key not in seen:
            seen.add(ex.key); kept.append(ex)
    t = cfg.task
    size = min(max(round(len(kept) * t.dev_fraction), t.dev_min), t.dev_max, len(kept) - 1)
    rank = lambda ex: hashlib.sha256(f"{t.split_seed}\x00{ex.key}".encode()).hexdigest()
    dev_keys = {ex.key for ex in sorted(kept, key=rank)[:size]}
    train = [ex for ex in kept if ex.key not in dev_keys]
    dev = [ex for ex in kept if ex.key in dev_keys]
    hashes = (dataset_hash(train), dataset_hash(dev), dataset_hash(gold))
    text = [system_prompt] + [s for ex in train + dev for s in (ex.user, ex.assistant)]
    base = resolve_base(cfg, project, text)
    tokenizer = load_tokenizer(base, cfg.model, project)
    train_ds = Dataset.from_dict(tokenize_for_sft(train, tokenizer, system_prompt))
    dev_ds = Dataset.from_dict(tokenize_for_sft(dev, tokenizer, system_prompt))
    rows = len(train_ds)
else:
    from forge_ml.data.tokens import sft_datasets, token_cache
    data = load_project_data(project, cfg.task, write_seed=False)
    hashes = data.hashes
    base = resolve_base(cfg, project, data.training_text())
    tokenizer = load_tokenizer(base, cfg.model, project)
    sets = sft_datasets(data, tokenizer, system_role=cfg.model.system_role,
                        max_length=cfg.training.max_seq_length, cache=token_cache(project))
    rows = len(sets.train)
wall = time.perf_counter() - started
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"wall": wall, "rss_mb": (peak - base_rss) / 1024, "base_mb": base_rss / 1024, "rows": rows}))
"""


def load_generator():
    spec = importlib.util.spec_from_file_location("generator", ROOT / "examples" / EXAMPLE / "generator.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def distinct_examples(count: int, avoid: set[str]) -> list[str]:
    """`count` JSONL lines of generated examples, no two with the same normalised user text, none in `avoid`."""
    from forge_ml.data.examples import normalize_text

    generator, lines, seen, seed = load_generator(), [], set(avoid), 0
    while len(lines) < count:
        for record in generator.generate(100_000, seed=seed):
            key = normalize_text(record["messages"][0]["content"])
            if key not in seen:
                seen.add(key)
                lines.append(json.dumps(record, ensure_ascii=False) + "\n")
                if len(lines) == count:
                    break
        seed += 1
    return lines


def make_project(folder: Path, lines: list[str]) -> Path:
    from forge_ml.project import init_project

    project = init_project(folder, example=EXAMPLE)
    (project.root / "dataset" / "seed.jsonl").unlink()
    (project.root / "dataset" / "canonical.jsonl").write_text("".join(lines), encoding="utf-8")
    return project.root


def measure(project: Path, mode: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "true"}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(project), mode],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if out.returncode != 0:
        raise SystemExit(f"{mode} at {project}: exit {out.returncode}\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def clear_caches(project: Path) -> None:
    for name in ("cache", "models"):
        shutil.rmtree(project / "output" / name, ignore_errors=True)


def exponent(sizes: list[int], times: list[float]) -> float:
    """Least-squares slope of log(time) on log(size)."""
    xs, ys = [math.log(s) for s in sizes], [math.log(t) for t in times]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


TRAIN_WRAPPER = r"""
import resource, subprocess, sys, time
started = time.perf_counter()
code = subprocess.run(sys.argv[1:], capture_output=True).returncode
# the largest of this process's descendants: `train` itself (its tokenising workers are smaller)
print(code, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, time.perf_counter() - started)
"""


def train_peak_rss_gb(project: Path) -> tuple[float, float]:
    """Peak RSS (GB) and wall (s) of a cold `forge-ml train training.max_steps=2`, measured in a
    wrapper process of its own (this process's RUSAGE_CHILDREN also holds the earlier children)."""
    clear_caches(project)
    command = [*FORGE_ML, "-p", str(project), "train", "training.max_steps=2", "tracking.log_adapter=false"]
    out = subprocess.run(
        [sys.executable, "-c", TRAIN_WRAPPER, *command],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    code, kb, wall = out.stdout.split()
    if int(code) != 0:
        raise SystemExit(f"train: exit {code}")
    return int(kb) / 2**20, float(wall)


@dataclass
class Figures:
    size: int
    cold: list[dict]
    warm: list[dict]
    grow: list[dict]
    before: list[dict]


def med(runs: list[dict], key: str = "wall") -> float:
    return statistics.median(r[key] for r in runs) if runs else float("nan")


def spread(runs: list[dict]) -> str:
    if not runs:
        return "-"
    walls = [r["wall"] for r in runs]
    return f"{statistics.median(walls):.2f} ({min(walls):.2f}-{max(walls):.2f})"


def measure_size(root: Path, size: int, pool: list[str], repeats: int, before_repeats: int) -> Figures:
    """Cold then warm, `repeats` times; then `repeats` rounds that each add 1 % to the warm cache; then `before`."""
    project = make_project(root, pool[:size])
    canonical = project / "dataset" / "canonical.jsonl"
    figures = Figures(size, [], [], [], [])
    for _ in range(repeats):
        clear_caches(project)
        figures.cold.append(measure(project, "cold"))
        figures.warm.append(measure(project, "warm"))
    snapshot = root.with_name(root.name + "-warm")
    for name in ("cache", "models"):
        shutil.copytree(project / "output" / name, snapshot / name)
    grown = "".join(pool[: size + max(1, size // 100)])
    for _ in range(repeats):
        clear_caches(project)
        for name in ("cache", "models"):
            shutil.copytree(snapshot / name, project / "output" / name)
        canonical.write_text(grown, encoding="utf-8")
        figures.grow.append(measure(project, "grow"))
        canonical.write_text("".join(pool[:size]), encoding="utf-8")
    for _ in range(before_repeats):
        clear_caches(project)
        figures.before.append(measure(project, "before"))
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="1000,10000,100000,200000")
    parser.add_argument("--repeats", type=int, default=3, help="cold, warm and +1 %% measurements per size")
    parser.add_argument(
        "--before-repeats", type=int, default=1, help="measurements of the path this replaced"
    )
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    from forge_ml.data.examples import read_examples

    gold = {ex.key for ex in read_examples(ROOT / "examples" / EXAMPLE / "dataset" / "gold.jsonl")}
    largest = max(sizes)
    pool = distinct_examples(largest + largest // 100 + 1, gold)
    print(f"cores: {os.cpu_count()}; drone-router generator, distinct examples, gold left out")
    print(
        f"seconds: median (range) of {args.repeats}; 'before': {args.before_repeats} run(s); RSS: MB above the baseline"
    )
    print(
        f"{'examples':>9} {'cold':>18} {'warm':>18} {'+1 %':>18} {'before':>18} {'cold/before':>11} "
        f"{'RSS cold':>8} {'RSS before':>10}"
    )
    results, verdicts = [], []
    with tempfile.TemporaryDirectory(prefix="forge-data-scale-") as tmp:
        for size in sizes:
            f = measure_size(Path(tmp) / f"p{size}", size, pool, args.repeats, args.before_repeats)
            results.append(f)
            ratio = f"{med(f.cold) / med(f.before):.3f}" if f.before else "-"
            print(
                f"{size:>9,} {spread(f.cold):>18} {spread(f.warm):>18} {spread(f.grow):>18} {spread(f.before):>18} "
                f"{ratio:>11} {med(f.cold, 'rss_mb'):>8.0f} {med(f.before, 'rss_mb'):>10.0f}",
                flush=True,
            )
        gb, wall = train_peak_rss_gb(Path(tmp) / f"p{largest}")
    print(f"forge-ml train training.max_steps=2 at {largest:,}, cold: peak RSS {gb:.2f} GB, {wall:.1f} s")
    top = results[-1]
    verdicts = [
        (f"cold s at {top.size:,}", med(top.cold), BOUNDS["cold"]),
        (f"warm s at {top.size:,}", med(top.warm), BOUNDS["warm"]),
        (f"+1 % s at {top.size:,}", med(top.grow), BOUNDS["grow"]),
        (f"train peak RSS GB at {top.size:,}", gb, BOUNDS["train_rss_gb"]),
    ]
    fitted = [f for f in results if f.size >= 10_000]
    if len(fitted) >= 2:
        slope = exponent([f.size for f in fitted], [med(f.cold) for f in fitted])
        rss = exponent([f.size for f in fitted], [max(1.0, med(f.cold, "rss_mb")) for f in fitted])
        print(
            f"growth exponent over sizes >= 10k: cold time {slope:.2f}, cold RSS above the baseline {rss:.2f}"
        )
        verdicts.append(("cold time growth exponent", slope, BOUNDS["exponent"]))
    failed = 0
    for name, value, bound in verdicts:
        ok = value <= bound
        failed += not ok
        print(f"{name}: {value:.2f} (bound <= {bound}) {'PASS' if ok else 'FAIL'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
