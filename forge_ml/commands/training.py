"""Training commands: train (one run, or a Hydra multirun), tune (one round of trials), eval."""

from __future__ import annotations

from typing import Any

from forge_ml.commands import Command, Context, overrides_argument
from forge_ml.console import console, print_round, print_table, results, shell_path, titled_table
from forge_ml.errors import EXIT_OK, error_exit_code


def _train_args(p) -> None:
    p.add_argument("-m", "--multirun", action="store_true", help="Hydra multirun: one job per sweep point")
    p.add_argument(
        "--register",
        action="store_true",
        help="register the adapter as a version of the project's model, alias challenger (then `forge-ml promote`)",
    )
    overrides_argument(p, "Hydra overrides, e.g. lora.r=16 training.epochs=3")


def _print_train_summary(summary: Any) -> None:
    table = titled_table(
        f"run {summary.run_id[:8]}: gold accuracy {summary.gold.accuracy:.3f} "
        f"({summary.gold.tally}), dev accuracy {summary.dev.accuracy:.3f}"
    )
    for column in ("category", "gold accuracy", "correct", "total"):
        table.add_column(column)
    for name, stats in summary.gold.per_category.items():
        table.add_row(name, f"{stats['accuracy']:.3f}", str(stats["correct"]), str(stats["total"]))
    results.print(table)
    _print_unfinished(summary.gold)


def _print_multirun(trained: list[tuple[str, Any]], jobs: int) -> None:
    """A multirun's jobs side by side, best gold accuracy first (ties: best dev accuracy), each named
    by the overrides that set it apart (those every job shares are left out)."""
    ranked = sorted(trained, key=lambda job: (-job[1].gold.accuracy, -job[1].dev.accuracy))
    shared = set.intersection(*(set(overrides.split()) for overrides, _ in trained))
    rows = [
        (
            " ".join(o for o in overrides.split() if o not in shared) or "(the same)",
            summary.run_id[:8],
            f"{summary.gold.accuracy:.3f} ({summary.gold.tally})",
            f"{summary.dev.accuracy:.3f}",
            "-" if summary.version is None else f"v{summary.version}",
        )
        for overrides, summary in ranked
    ]
    print_table(
        f"multirun: {len(trained)} of {jobs} jobs trained, best gold accuracy first",
        ("overrides", "run", "gold accuracy", "dev accuracy", "version"),
        rows,
    )


def _print_unfinished(report: Any) -> None:
    if report.unfinished:
        results.print(
            f"[yellow]{report.unfinished} of {report.total} gold outputs stopped at eval.max_new_tokens[/] "
            "before they ended (their scores count them cut short; see eval_failures.jsonl)",
            highlight=False,
        )


# Hydra's flags whose value is the next word (`--cfg job`); `--cfg=job` is one word
_VALUED_FLAGS = ("--cfg", "--package", "--config-path", "--config-name", "--config-dir")
_INFO_TOPICS = ("all", "config", "defaults", "defaults-tree", "plugins", "searchpath")


def hydra_flags_of(extra: list[str]) -> tuple[list[str], list[str]]:
    """Split the words argparse left over into Hydra's flags (each with its value) and overrides."""
    flags: list[str] = []
    rest: list[str] = []
    words = iter(extra)
    for word in words:
        if not word.startswith("--"):
            rest.append(word)
            continue
        flags.append(word)
        if word in _VALUED_FLAGS or word == "--info":
            value = next(words, None)
            if value is None:
                continue
            if word == "--info" and value not in _INFO_TOPICS:
                rest.append(value)  # `--info` alone, then an override
            else:
                flags.append(value)
    return flags, rest


def run_train(ctx: Context) -> int:
    from forge_ml.compose import expand_sweeps, launch
    from forge_ml.jobs.train import run_train as train_one

    project = ctx.project()
    hydra_flags, rest = hydra_flags_of(ctx.extra)
    overrides = [*ctx.args.overrides, *rest]
    if not hydra_flags:  # validate every job up front, before any model loads
        for job_overrides in expand_sweeps(overrides) if ctx.args.multirun else [overrides]:
            ctx.compose(job_overrides)
    runs: list[dict[str, Any]] = []
    trained: list[tuple[str, Any]] = []  # (the job's overrides, its summary), for a multirun's table

    def job(cfg: Any, context: dict[str, Any]) -> Any:
        summary = train_one(cfg, run_name="train", tags=context, register=ctx.args.register)
        trained.append((context["forge.overrides"], summary))
        runs.append(
            {
                "run_id": summary.run_id,
                "gold_accuracy": summary.gold.accuracy,
                "adapter": str(summary.adapter_dir),
                "version": summary.version,
            }
        )
        ctx.run_id = summary.run_id
        _print_train_summary(summary)
        if summary.version is not None:
            console.print(
                f"registered as {cfg.registry.model_name or cfg.name} v{summary.version} (alias challenger): "
                f"`forge-ml promote --version {summary.version}` runs the gate",
                highlight=False,
            )
        return summary

    result = launch(project, overrides, job, multirun=ctx.args.multirun, hydra_flags=hydra_flags)
    for round_result in result.rounds:  # `-m hydra/sweeper=tune`: one round of trials, no train job
        ctx.run_id = round_result.round_run_id
        runs += [
            {"run_id": t.run_id, "gold_accuracy": None, "adapter": t.checkpoint, "version": None}
            for t in round_result.trials
        ]
    ctx.report(runs=runs, failed_jobs=len(result.failed))
    if runs:
        ctx.report(
            gold_accuracy=runs[-1]["gold_accuracy"], adapter=runs[-1]["adapter"], version=runs[-1]["version"]
        )
    if result.failed and not ctx.args.multirun:
        raise result.failed[0].error
    for failed in result.failed:
        shown = " ".join(o for o in failed.overrides if not o.startswith("++project_dir="))
        console.print(f"[red]job failed[/] ({shown}): {failed.error}", soft_wrap=True, highlight=False)
    if len(trained) > 1:
        _print_multirun(trained, len(result.jobs))
    if result.failed:
        console.print(f"{len(result.failed)} of {len(result.jobs)} job(s) failed")
        return max(error_exit_code(f.error) for f in result.failed)
    if result.jobs:
        console.print(
            f"see the runs: forge-ml -p {shell_path(project.root)} ui   (MLflow UI on http://127.0.0.1:5000)",
            highlight=False,
            soft_wrap=True,  # a line to copy: never cut
        )
    return EXIT_OK


def run_tune(ctx: Context) -> int:
    from forge_ml.search import split_sweep_overrides, with_space
    from forge_ml.tuning.engine import run_round

    space, fixed = split_sweep_overrides(ctx.overrides)
    cfg = with_space(ctx.compose(fixed), space)
    result = run_round(cfg)
    ctx.run_id = result.round_run_id
    best = result.best
    ctx.report(
        round=result.name,
        trials=len(result.trials),
        best_trial=best.trial_id,
        best_run_id=best.run_id,
        best_metrics=best.metrics,
        wall_s=result.wall_s,
    )
    print_round(result, cfg.tune.metric)
    console.print(f"see the round: forge-ml -p {shell_path(ctx.project().root)} ui")
    return EXIT_OK


def _eval_args(p) -> None:
    p.add_argument("--adapter", help="adapter or model directory (default: output/last_train.json)")
    p.add_argument(
        "--judge", choices=["claude"], help="also score the answers with Claude as judge (judge/* metrics)"
    )
    p.add_argument(
        "--judge-items", type=int, default=20, metavar="N", help="answers per judge request (default 20)"
    )
    p.add_argument("--batch", action="store_true", help="send the judge requests as one Message Batch")
    overrides_argument(
        p,
        "model=<models:/NAME@ALIAS | models:/NAME/VERSION | adapter path> to evaluate, "
        "and Hydra overrides, e.g. eval.batch_size=64",
    )


def _judge_options(args: Any) -> Any:
    from forge_ml.errors import InputError
    from forge_ml.jobs.evaluate import JudgeOptions

    if args.judge is None:
        if args.batch:
            raise InputError("--batch sends the judge's requests: use it with --judge claude")
        return None
    if not 1 <= args.judge_items <= 200:
        raise InputError(f"--judge-items {args.judge_items}: must be between 1 and 200")
    return JudgeOptions(items=args.judge_items, batch=args.batch)


def _print_eval(summary: Any) -> None:
    r, judged = summary.report, summary.judge
    shown = summary.target + (f" (v{summary.version})" if summary.version else "")
    results.print(f"evaluated: {shown}", highlight=False, soft_wrap=True)  # a path: a title would fold it
    title = f"gold accuracy {r.accuracy:.3f} ({r.tally})"
    if judged is not None:
        title += (
            f", judge accuracy {judged.report.accuracy:.3f} "
            f"({judged.usage.requests} requests, ${judged.cost_usd:.4f})"
        )
    table = titled_table(title)
    for column in ("category", "gold accuracy", "correct", "total", *(["judge accuracy"] if judged else [])):
        table.add_column(column)
    for name, stats in r.per_category.items():
        judge_column = [f"{judged.report.per_category[name]['accuracy']:.3f}"] if judged else []
        table.add_row(
            name, f"{stats['accuracy']:.3f}", str(stats["correct"]), str(stats["total"]), *judge_column
        )
    results.print(table)
    _print_unfinished(r)


def run_eval(ctx: Context) -> int:
    from forge_ml.jobs.evaluate import run_eval as evaluate
    from forge_ml.jobs.evaluate import split_model_argument

    judge = _judge_options(ctx.args)
    model, overrides = split_model_argument(ctx.overrides)
    summary = evaluate(ctx.compose(overrides), ctx.args.adapter, model=model, judge=judge)
    r = summary.report
    ctx.run_id = summary.run_id
    ctx.report(
        target=summary.target,
        accuracy=r.accuracy,
        correct=r.correct,
        total=r.total,
        per_category={k: v["accuracy"] for k, v in r.per_category.items()},
        unfinished=r.unfinished,
        results_path=str(summary.results_path),
        version=summary.version,
        judge=None if summary.judge is None else summary.judge.summary(),
    )
    _print_eval(summary)
    console.print(f"results: {summary.results_path}")
    return EXIT_OK


COMMANDS = [
    Command(
        "train",
        "train one LoRA adapter, evaluate it, record it in MLflow",
        _train_args,
        run_train,
        ("runs", "failed_jobs", "gold_accuracy", "adapter", "version"),
    ),
    Command(
        "tune",
        "run one round: parallel Ray Tune trials over a search space",
        lambda p: overrides_argument(
            p, "sweeps form the space ('lora.r=choice(4,8)'); other overrides are fixed"
        ),
        run_tune,
        ("round", "trials", "best_trial", "best_run_id", "best_metrics", "wall_s"),
    ),
    Command(
        "eval",
        "evaluate an adapter or a registry version (default: the last trained adapter) on gold",
        _eval_args,
        run_eval,
        (
            "target",
            "accuracy",
            "correct",
            "total",
            "per_category",
            "unfinished",
            "results_path",
            "version",
            "judge",
        ),
    ),
]
