"""Search efficiency on real training: forge-ml's planner + TPE against random search and TPE alone.

Every method searches the same tabulated landscape (bench/landscapes/*.csv, real LoRA trainings
with per-epoch dev loss; see bench/_landscape.py for how a point is answered) with the same
budget, `--concurrency` trials at a time:

  random          uniform draws over the task's planner.bounds
  tpe             Optuna TPE over the full bounds in one run of `--cap` trials: what a user of
                  Ray Tune + OptunaSearch (the engine's own `make_searcher`) or of Hydra's Optuna
                  sweeper gets
  planner+tpe     rounds as the flywheel runs them: the offline planner's plan from every trial so
                  far (the whole bounds; first points: the configured values in round 1, then
                  points in a trust region around the best trial, one of them a pattern move
                  after a round that moved the best), and the engine's searcher
                  (TPE warm-started with every earlier trial) suggesting the rest of the
                  `--samples` points of the round

each with FIFO (every trial runs all its epochs) and with ASHA (Ray's scheduler, built by the
engine's `make_scheduler`, stopping trials at the epochs' reports; a stopped trial reports its
last dev loss, and only a trial that ran to its end can be the answer). Under ASHA the epochs are
its budget, not a key: training.epochs is set to the top of its bound, every method holds it
there (the offline planner does not search it under ASHA), and ASHA decides how many each trial
trains.

Figures per landscape and method, over `--seeds` seeds: median and 90th percentile of the trials
(and epochs) until a trial that ran to its end is within 1 % of the table's best dev loss, and the
simple regret (true dev loss of the trial the run would pick, minus the table's best) after 8, 16
and 32 trials; each ratio with a 90 % bootstrap interval over the seeds (paired: both sides' runs
of a seed drawn together). Bounds, on every landscape:
  planner+tpe / random, median trials-to-1 %   <= 0.5
  planner+tpe / tpe,    median trials-to-1 %   <= 0.8, and 90th percentile no worse than tpe's
  planner+tpe with ASHA / without, median epochs-to-1 %   <= 0.6

    .venv/bin/python bench/search_landscapes.py [--seeds 300] [--first-seed 0] [--cap 200]
                                                [--samples 8] [--concurrency 2] [--workers 2]
                                                [bench/landscapes/<name>.csv ...]
"""

from __future__ import annotations

import argparse
import functools
import math
import multiprocessing
import random
import statistics
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _common import bootstrap_ratio, percentile, print_table, quiet_libraries
from _landscape import METRIC, MODE, Done, Landscape, UniformPoints, read_landscape, run_round

HERE = Path(__file__).resolve().parent
EPOCHS = "training.epochs"
METHODS = ("random", "tpe", "planner+tpe")
REGRET_AT = (8, 16, 32)


@dataclass(frozen=True)
class Outcome:
    trials: int  # trials until one within 1 % (the cap when never)
    epochs: int  # epochs until then
    regret: tuple[float, ...]  # at REGRET_AT trials


def config_for(
    landscape: Landscape,
    seed: int,
    *,
    asha: bool,
    samples: int,
    concurrency: int,
    overrides: dict[str, Any] | None = None,
) -> Any:
    from forge_ml.config import ForgeConfig
    from forge_ml.config.overrides import with_overrides

    cfg = ForgeConfig(name="bench", project_dir="/nonexistent")
    cfg.planner.bounds = dict(landscape.bounds)
    cfg = with_overrides(cfg, landscape.start)
    cfg.tune.seed, cfg.tune.num_samples, cfg.tune.max_concurrent_trials = seed, samples, concurrency
    cfg.tune.metric, cfg.tune.mode = METRIC, MODE
    cfg.tune.scheduler = "asha" if asha else "fifo"
    if asha and EPOCHS in cfg.planner.bounds:  # ASHA's budget: the most epochs the bounds allow
        cfg.training.epochs = most_epochs(cfg.planner.bounds[EPOCHS])
    cfg.tune.searcher = "optuna"
    cfg.planner.max_samples = max(cfg.planner.max_samples, samples)
    return with_overrides(cfg, overrides or {})


def most_epochs(bound: Any) -> int:
    """The top of the epochs bound: the budget an ASHA user gives every trial."""
    return int(max(bound.choices)) if bound.choices is not None else math.floor(bound.high)


def baseline_bounds(cfg: Any) -> dict[str, Any]:
    """planner.bounds as random search and TPE alone search them: under ASHA, the epochs held at the
    configured budget, as the offline planner holds them (ASHA's rungs are epochs)."""
    from forge_ml.config import BoundConfig

    bounds = dict(cfg.planner.bounds)
    if cfg.tune.scheduler == "asha" and EPOCHS in bounds:
        bounds[EPOCHS] = BoundConfig(choices=[cfg.training.epochs])
    return bounds


def full_space(cfg: Any) -> dict[str, Any]:
    """The whole of the baselines' bounds as a search space."""
    from forge_ml.planner.offline import bound_expression
    from forge_ml.search import parse_space

    space = {k: bound_expression(k, b) for k, b in baseline_bounds(cfg).items()}
    return parse_space({k: v for k, v in space.items() if v is not None})


def _scheduler(cfg: Any, params: dict[str, Any]) -> Any | None:
    from forge_ml.tuning.engine import make_scheduler

    return make_scheduler(cfg, params) if cfg.tune.scheduler == "asha" else None


def trials_of(method: str, landscape: Landscape, cfg: Any, rng: random.Random, cap: int) -> Iterator[Done]:
    """The method's trials, in the order they end, until `cap` have ended."""
    from forge_ml.config.overrides import config_value
    from forge_ml.planner.history import History, TrialRow
    from forge_ml.planner.offline import offline_plan
    from forge_ml.search import parse_space, tune_space
    from forge_ml.tuning.engine import make_searcher

    concurrency = cfg.tune.max_concurrent_trials
    if method in ("random", "tpe"):
        params = full_space(cfg)
        if method == "random":
            searcher: Any = UniformPoints(baseline_bounds(cfg), rng)
        else:
            searcher = make_searcher(cfg, params, [], [])
            searcher.set_search_properties(METRIC, MODE, tune_space(params))
        for done, _ in run_round(
            landscape,
            searcher,
            _scheduler(cfg, params),
            samples=cap,
            fixed={},
            concurrency=concurrency,
            rng=rng,
            epochs_before=0,
            prefix="t",
        ):
            yield done
        return
    history, ended, epochs = History(), 0, 0
    for number in range(1, cap + 1):
        plan = offline_plan(cfg, history, round_number=number)
        params = parse_space(plan.search_space)
        searcher = make_searcher(cfg, params, history.warm_start(params, METRIC), plan.first_points)
        searcher.set_search_properties(METRIC, MODE, tune_space(params))
        round_cfg = plan.apply(cfg)  # what every trial of the round gets for the keys it does not search
        fixed = {key: config_value(round_cfg, key) for key in cfg.planner.bounds if key not in params}
        samples = min(plan.num_samples, cap - ended)
        for done, point in run_round(
            landscape,
            searcher,
            _scheduler(cfg, params),
            samples=samples,
            fixed=fixed,
            concurrency=concurrency,
            rng=rng,
            epochs_before=epochs,
            prefix=f"{number}-",
        ):
            status = "FINISHED" if done.completed else "STOPPED"
            history.trials.append(
                TrialRow(number, f"{number}-{ended}", status, dict(point), {METRIC: done.loss})
            )
            ended, epochs = ended + 1, done.epochs_so_far
            yield done
        if ended >= cap:
            return


@dataclass(frozen=True)
class Setup:
    """What every method gets alike."""

    cap: int = 200  # trials per run at most
    samples: int = 8  # trials per planned round
    concurrency: int = 2
    overrides: tuple[tuple[str, Any], ...] = ()  # config values set for every method (--set)


def measure(method: str, landscape: Landscape, seed: int, *, asha: bool, setup: Setup) -> Outcome:
    cap = setup.cap
    cfg = config_for(
        landscape,
        seed,
        asha=asha,
        samples=setup.samples,
        concurrency=setup.concurrency,
        overrides=dict(setup.overrides),
    )
    rng = random.Random(seed * 7919 + 17)
    target = landscape.best * 1.01
    reached: tuple[int, int] | None = None
    regret: list[float] = []
    pick: tuple[float, int] | None = None  # (observed loss, config) of the best trial that ran to its end
    for n, done in enumerate(trials_of(method, landscape, cfg, rng, cap), 1):
        if done.completed and (pick is None or done.loss < pick[0]):
            pick = (done.loss, done.config)
        if reached is None and done.completed and landscape.true[done.config] <= target:
            reached = (n, done.epochs_so_far)
        if n in REGRET_AT:
            regret.append(landscape.true[pick[1]] - landscape.best if pick else math.inf)
        if reached is not None and n >= max(REGRET_AT):
            break
    if reached is None:
        reached = (cap, done.epochs_so_far)
    return Outcome(reached[0], reached[1], tuple(regret))


def _job(args: tuple[Path, str, int, bool, Setup]) -> tuple[str, str, bool, int, Outcome]:
    path, method, seed, asha, setup = args
    landscape = _landscapes.get(path) or _landscapes.setdefault(path, read_landscape(path))
    return path.stem, method, asha, seed, measure(method, landscape, seed, asha=asha, setup=setup)


_landscapes: dict[Path, Landscape] = {}


def parse_set(items: list[str]) -> list[tuple[str, Any]]:
    import yaml

    pairs = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--set {item!r}: expected KEY=VALUE")
        pairs.append((key.strip(), yaml.safe_load(value)))
    return pairs


def describe(values: list[float]) -> str:
    return f"{statistics.median(values):g} / {percentile(values, 90):g}"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("tables", nargs="*", type=Path)
    parser.add_argument("--seeds", type=int, default=300)  # 100 moved ratios by 0.1 between seed sets
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument(
        "--cap", type=int, default=200, help="trials per run at most (a miss counts as the cap)"
    )
    parser.add_argument("--samples", type=int, default=8, help="trials per planned round")
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a config value for every method, e.g. planner.trust_radius=0.5 or tune.reduction_factor=3",
    )
    args = parser.parse_args()
    quiet_libraries()  # here, not at import: the tests import this module into their own process
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # a study per round, each announced at INFO
    paths = args.tables or sorted((HERE / "landscapes").glob("*.csv"))
    started = time.perf_counter()
    setup = Setup(args.cap, args.samples, args.concurrency, tuple(parse_set(args.set)))
    jobs = [
        (path, method, seed, asha, setup)
        for path in paths
        for asha in (False, True)
        for method in METHODS
        for seed in range(args.first_seed, args.first_seed + args.seeds)
    ]
    results: dict[tuple[str, str, bool], list[Outcome]] = {}
    with multiprocessing.get_context("fork").Pool(args.workers) as pool:
        by_seed = sorted(pool.imap_unordered(_job, jobs, chunksize=4), key=lambda r: r[3])
    for name, method, asha, _, outcome in by_seed:  # seed order: every method's i-th run is the same seed
        results.setdefault((name, method, asha), []).append(outcome)
    ok = True
    for path in paths:
        ok &= report(read_landscape(path), results, args)
    print(
        f"\n({args.seeds} seeds from {args.first_seed}, cap {args.cap} trials, {args.samples} trials per planned"
        f" round, {args.concurrency} at a time{''.join(f', {k}={v}' for k, v in setup.overrides)};"
        f" {time.perf_counter() - started:.0f}s)"
    )
    return 0 if ok else 1


def describe_landscape(landscape: Landscape) -> str:
    """The table's shape in one line: the best point, its accuracy, the spread, the seeds' noise."""
    best = landscape.true.index(landscape.best)
    point = ", ".join(f"{k.split('.')[-1]}={v:g}" for k, v in landscape.configs[best].items())
    accuracy = statistics.mean(c.accuracies[-1] for c in landscape.curves[best])
    finite = sorted(v for v in landscape.true if math.isfinite(v))
    noise = [
        (max(c.losses[-1] for c in cs) - min(c.losses[-1] for c in cs)) / landscape.true[i]
        for i, cs in enumerate(landscape.curves)
        if len(cs) > 1 and all(math.isfinite(c.losses[-1]) for c in cs)
    ]
    diverged = sum(not math.isfinite(c.losses[-1]) for cs in landscape.curves for c in cs)
    spread = f"median {statistics.median(finite):.3f}, worst {finite[-1]:.3f}"
    seeds = f"; seed-to-seed spread of the final loss: median {statistics.median(noise):.1%}" if noise else ""
    return (
        f"best: {point} (dev accuracy {accuracy:.3f}); dev loss {spread}; {diverged} trial(s) diverged{seeds}"
    )


def report(
    landscape: Landscape, results: dict[tuple[str, str, bool], list[Outcome]], args: argparse.Namespace
) -> bool:
    name = landscape.name
    near = landscape.within(0.01)
    print(
        f"\n== {name}: {len(landscape.configs)} configurations x {len(landscape.curves[0])} seeds;"
        f" best dev loss {landscape.best:.4f}, {len(near)} configuration(s) within 1 %"
    )
    for line in landscape.header:
        if line.startswith(("# command", "# landscape")):
            print(f"   {line[2:]}")
    print(f"   {describe_landscape(landscape)}")
    rows = []
    for asha in (False, True):
        for method in METHODS:
            outs = results[(name, method, asha)]
            capped = sum(o.trials >= args.cap for o in outs)
            rows.append(
                [
                    method + (" +ASHA" if asha else ""),
                    describe([o.trials for o in outs]),
                    describe([o.epochs for o in outs]),
                    *(f"{statistics.median(o.regret[i] for o in outs):.4f}" for i in range(len(REGRET_AT))),
                    f"{capped}/{len(outs)}",
                ]
            )
    print_table(
        [
            "method",
            "trials to 1 % (median / p90)",
            "epochs to 1 %",
            *(f"regret@{n}" for n in REGRET_AT),
            "missed",
        ],
        rows,
    )

    def values(method: str, asha: bool, what: str = "trials") -> list[float]:
        return [getattr(o, what) for o in results[(name, method, asha)]]

    p90 = functools.partial(percentile, q=90)
    checks = [
        (
            "planner+tpe / random, median trials",
            values("planner+tpe", False),
            values("random", False),
            statistics.median,
            0.5,
        ),
        (
            "planner+tpe / tpe, median trials",
            values("planner+tpe", False),
            values("tpe", False),
            statistics.median,
            0.8,
        ),
        ("planner+tpe / tpe, p90 trials", values("planner+tpe", False), values("tpe", False), p90, 1.0),
        (
            "planner+tpe ASHA / FIFO, median epochs",
            values("planner+tpe", True, "epochs"),
            values("planner+tpe", False, "epochs"),
            statistics.median,
            0.6,
        ),
    ]
    ok = True
    for label, top, bottom, stat, bound in checks:
        ratio = stat(top) / stat(bottom)
        low, high = bootstrap_ratio(top, bottom, stat)
        passed = ratio <= bound
        ok &= passed
        print(
            f"  {label}: {ratio:.3f} (90 % interval over seeds {low:.2f}..{high:.2f})"
            f"   bound <= {bound}: {'PASS' if passed else 'FAIL'}"
        )
    return ok


if __name__ == "__main__":
    sys.exit(main())
