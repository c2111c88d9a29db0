"""`forge-ml flywheel`: rounds of plan → augment → tune → gold eval → gate → record."""

from __future__ import annotations

from typing import TYPE_CHECKING

from forge_ml.commands import Command, Context, overrides_argument
from forge_ml.console import console, mirrored_to, results, shell_path
from forge_ml.errors import EXIT_GATE, EXIT_OK, ConfigError

FLYWHEEL_LOG = "flywheel.log"  # under output/: what the run printed and logged, with times

if TYPE_CHECKING:
    from forge_ml.journal import RoundRecord


def _args(p) -> None:
    count = p.add_mutually_exclusive_group()
    count.add_argument(
        "--rounds", type=int, help="rounds in all, earlier runs included (default: flywheel.max_rounds)"
    )
    count.add_argument("--iters", type=int, help="this many more rounds, from where the project stands")
    p.add_argument("--skip-train", action="store_true", help="plan and add data only: no trials, no gate")
    p.add_argument(
        "--rebaseline",
        action="store_true",
        help="re-measure the champion first, after the gold set or eval.scorer changed",
    )
    p.add_argument(
        "--require-target",
        action="store_true",
        help="exit 3 unless the champion reaches eval.target_accuracy",
    )
    overrides_argument(p, "Hydra overrides, e.g. planner=offline tune.num_samples=4")


def _score(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def print_rounds(records: list[RoundRecord]) -> None:
    from rich.table import Table

    table = Table(
        title="flywheel rounds", caption="dev, gold, champion: accuracy (dev: the round's best trial)"
    )
    # Seven columns fit 80 (a pipe, a job's log): the wordy two fold at their spaces, the figures stay whole.
    for column in ("round", "planner", "examples", "dev", "gold", "version", "champion"):
        table.add_column(column, overflow="fold", no_wrap=column not in ("planner", "examples"))
    for r in records:
        table.add_row(
            str(r.round),
            r.planner,
            f"{r.dataset_size} (+{r.examples_added})",
            _score(r.dev_accuracy),
            _score(r.gold_accuracy),
            f"v{r.version} {'promoted' if r.promoted else 'refused'}" if r.version else "-",
            _score(r.champion_accuracy),
        )
    results.print(table)


def run_flywheel(ctx: Context) -> int:
    from forge_ml.flywheel import Flywheel

    args = ctx.args
    for flag, value in (("--rounds", args.rounds), ("--iters", args.iters)):
        if value is not None and value < 1:
            raise ConfigError(f"{flag} {value}: must be at least 1")
    project = ctx.project()
    ctx.compose()  # validates, and gives the envelope its config hash
    wheel = Flywheel(
        project, ctx.overrides, max_rounds=args.rounds, more_rounds=args.iters, skip_train=args.skip_train
    )
    with mirrored_to(project.output / FLYWHEEL_LOG):
        outcome = wheel.run(rebaseline=args.rebaseline)
        ctx.run_id = outcome.records[-1].round_run_id if outcome.records else None
        ctx.report(
            rounds_done=outcome.rounds_done,
            stop_reason=outcome.stop_reason,
            champion_accuracy=outcome.champion_accuracy,
            target_reached=outcome.target_reached,
            rounds=[
                {
                    k: getattr(r, k)
                    for k in ("round", "gold_accuracy", "promoted", "version", "round_run_id", "planner")
                }
                for r in outcome.records
            ],
        )
        print_rounds(outcome.records)
        champion = "none" if outcome.champion_accuracy is None else f"{outcome.champion_accuracy:.3f}"
        results.print(f"stopped: {outcome.stop_reason}; champion gold accuracy {champion}", highlight=False)
        console.print(
            f"see every round and trial: forge-ml -p {shell_path(project.root)} ui   (MLflow UI on http://127.0.0.1:5000)",
            highlight=False,
            soft_wrap=True,  # a line to copy: never cut
        )
    if args.require_target and not outcome.target_reached:
        return EXIT_GATE
    return EXIT_OK


COMMANDS = [
    Command(
        "flywheel",
        "improve the model round after round toward eval.target_accuracy",
        _args,
        run_flywheel,
        ("rounds_done", "stop_reason", "champion_accuracy", "target_reached", "rounds"),
    ),
]
