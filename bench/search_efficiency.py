"""How many trials the offline planner + the round engine's searcher need, against random search.

A deterministic synthetic objective stands in for a round's dev loss over the default
`planner.bounds` (eight keys): a bowl around an optimum inside the bounds, steep in the
learning rate, gentler in epochs and rank, nearly flat in the rest — the usual shape of LoRA
hyperparameter landscapes. For each seed, both methods draw trials until one comes within 1 %
of the optimum (loss <= 1.01 x the optimal loss):

  planner + searcher   rounds as the flywheel runs them: the offline planner's plan (the whole
                       bounds, and first points around the best trial so far), the engine's
                       searcher (`make_searcher`: TPE warm-started with every earlier trial)
                       suggesting the rest of the `--samples` points per round, `--concurrency`
                       at a time
  random               uniform draws over the same bounds (log scale where the bound says so)

Prints the median trials-to-1 % over the seeds with their spread (quartiles, range) and the
ratio of the medians planner / random with a bootstrap 90 % interval over the seeds — bound: the
median ratio <= 0.5. The figures depend on the seeds only: the same seeds print the same table,
so a re-run that tests anything uses other seeds (`--first-seed`).

    .venv/bin/python bench/search_efficiency.py [--seeds 30] [--first-seed 0] [--samples 8]
                                                [--concurrency 2] [--cap 2000]
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time

from _common import bootstrap_ratio, percentile, print_table, quiet_libraries
from _landscape import unit

quiet_libraries()

from forge_ml.config import BoundConfig, ForgeConfig  # noqa: E402
from forge_ml.planner.history import History, TrialRow  # noqa: E402
from forge_ml.planner.offline import offline_plan  # noqa: E402
from forge_ml.search import parse_space, tune_space  # noqa: E402
from forge_ml.tuning.engine import make_searcher  # noqa: E402

METRIC, MODE = "dev/loss", "min"
BEST_LOSS = 0.30
# The optimum, and how much each key matters (per unit of its normalised range, squared).
OPTIMUM = {
    "training.learning_rate": 1.5e-3,
    "training.epochs": 5,
    "training.batch_size": 16,
    "training.warmup_ratio": 0.06,
    "training.weight_decay": 0.02,
    "lora.r": 32,
    "lora.alpha": 48,
    "lora.dropout": 0.1,
}
WEIGHT = {
    "training.learning_rate": 0.5,
    "training.epochs": 0.12,
    "lora.r": 0.04,
    "training.batch_size": 0.025,
    "lora.alpha": 0.04,
    "lora.dropout": 0.02,
    "training.warmup_ratio": 0.02,
    "training.weight_decay": 0.01,
}


def objective(bounds: dict[str, BoundConfig], point: dict[str, float]) -> float:
    return BEST_LOSS * (
        1 + sum(w * (unit(bounds[k], point[k]) - unit(bounds[k], OPTIMUM[k])) ** 2 for k, w in WEIGHT.items())
    )


def config(seed: int, samples: int, concurrency: int) -> ForgeConfig:
    cfg = ForgeConfig(name="bench", project_dir="/nonexistent")
    cfg.tune.seed, cfg.tune.num_samples, cfg.tune.max_concurrent_trials = seed, samples, concurrency
    cfg.tune.metric, cfg.tune.mode = METRIC, MODE
    cfg.tune.scheduler = "fifo"  # every trial runs its epochs: the epochs are a key to search, as for random
    cfg.planner.max_samples = max(cfg.planner.max_samples, samples)
    return cfg


def planner_trials(seed: int, samples: int, concurrency: int, cap: int) -> int:
    """Trials until one is within 1 % of the optimum, with the planner choosing each round's space."""
    cfg = config(seed, samples, concurrency)
    bounds, target = cfg.planner.bounds, BEST_LOSS * 1.01
    history = History()
    used = 0
    for number in range(1, cap + 1):
        plan = offline_plan(cfg, history, round_number=number)
        params = parse_space(plan.search_space)
        searcher = make_searcher(cfg, params, history.warm_start(params, METRIC), plan.first_points)
        searcher.set_search_properties(METRIC, MODE, tune_space(params))
        pending = 0
        while pending < plan.num_samples:
            batch = [f"{number}-{pending + i}" for i in range(min(concurrency, plan.num_samples - pending))]
            points = {tid: searcher.suggest(tid) for tid in batch}
            pending += len(batch)
            for tid, point in points.items():
                full = {**plan.fixed_overrides, **point}
                loss = objective(bounds, full)
                searcher.on_trial_complete(tid, {METRIC: loss, **point})
                history.trials.append(TrialRow(number, tid, "FINISHED", dict(full), {METRIC: loss}))
                used += 1
                if loss <= target or used >= cap:
                    return used
    return used


def random_trials(seed: int, cap: int) -> int:
    """Trials until one is within 1 % of the optimum, drawing uniformly over the bounds."""
    bounds = config(seed, 8, 2).planner.bounds
    rng = random.Random(seed)
    for used in range(1, cap + 1):
        point = {}
        for key, b in bounds.items():
            if b.choices is not None:
                point[key] = rng.choice(b.choices)
            elif b.log:
                point[key] = math.exp(rng.uniform(math.log(b.low), math.log(b.high)))
            else:
                point[key] = rng.uniform(b.low, b.high)
            if key in ("training.epochs", "lora.alpha") and b.choices is None:
                point[key] = min(max(round(point[key]), int(b.low)), int(b.high))
        if objective(bounds, point) <= BEST_LOSS * 1.01:
            return used
    return cap


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, default=30)
    parser.add_argument("--first-seed", type=int, default=0, help="seeds are first-seed, first-seed+1, ...")
    parser.add_argument("--samples", type=int, default=8, help="trials per planned round")
    parser.add_argument(
        "--concurrency", type=int, default=2, help="trials suggested before results come back"
    )
    parser.add_argument(
        "--cap", type=int, default=2000, help="give up after this many trials (counted as the cap)"
    )
    args = parser.parse_args()

    started = time.perf_counter()
    rows, planned, randomised = [], [], []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        p = planner_trials(seed, args.samples, args.concurrency, args.cap)
        r = random_trials(seed, args.cap)
        planned.append(p)
        randomised.append(r)
        rows.append([seed, p, r])
    print_table(["seed", "planner + searcher", "random"], rows)
    ratio = statistics.median(planned) / statistics.median(randomised)
    low, high = bootstrap_ratio(planned, randomised)
    capped = sum(p >= args.cap for p in planned), sum(r >= args.cap for r in randomised)
    ok = ratio <= 0.5
    print("\ntrials to come within 1 % of the optimum, median (quartiles; range):")
    print(f"  planner + searcher  {quartiles(planned)}")
    print(f"  random              {quartiles(randomised)}")
    print(f"  runs that hit the cap of {args.cap}: {capped[0]} / {capped[1]}")
    print(
        f"ratio of medians planner / random: {ratio:.3f} (bootstrap 90 % interval {low:.3f}..{high:.3f})"
        f"   bound <= 0.5: {'PASS' if ok else 'FAIL'}"
    )
    print(
        f"(seeds {args.first_seed}..{args.first_seed + args.seeds - 1}, {args.samples} trials per round,"
        f" {time.perf_counter() - started:.0f}s)"
    )
    return 0 if ok else 1


def quartiles(values: list[int]) -> str:
    return (
        f"{statistics.median(values):g} (q1..q3 {percentile(values, 25):g}..{percentile(values, 75):g};"
        f" range {min(values)}..{max(values)}, n={len(values)})"
    )


if __name__ == "__main__":
    sys.exit(main())
