"""`forge-ml flywheel`: rounds of plan → augment → tune → gold eval → gate → record."""

from __future__ import annotations

from typing import Any

from forge_ml.commands import Command, Context, overrides_argument
from forge_ml.console import console, results
from forge_ml.errors import EXIT_GATE, EXIT_OK, ConfigError


def _args(p) -> None:
    p.add_argument(
        "--rounds", type=int, help="rounds in all, earlier runs included (default: flywheel.max_rounds)"
    )
    p.add_argument("--skip-train", action="store_true", help="plan and add data only: no trials, no gate")
    p.add_argument(
        "--rebaseline", action="store_true", help="re-measure the champion on a changed gold set first"
    )
    p.add_argument(
        "--require-target",
        action="store_true",
        help="exit 3 unless the champion reaches eval.target_accuracy",
    )
    overrides_argument(p, "Hydra overrides, e.g. planner=offline tune.num_samples=4")


def print_rounds(records: list[dict[str, Any]]) -> None:
    from rich.table import Table

    table = Table(title="flywheel rounds")
    for column in (
        "round",
        "planner",
        "examples",
        "best dev acc",
        "gold acc",
        "version",
        "gate",
        "champion acc",
    ):
        table.add_column(column)
    for r in records:
        dev, gold, champion = r.get("dev_accuracy"), r.get("gold_accuracy"), r.get("champion_accuracy")
        table.add_row(
            str(r["iteration"]),
            str(r.get("planner", "")),
            f"{r.get('dataset_size', 0)} (+{r.get('examples_added', 0)})",
            "-" if dev is None else f"{dev:.3f}",
            "-" if gold is None else f"{gold:.3f}",
            f"v{r['version']}" if r.get("version") else "-",
            ("promoted" if r.get("promoted") else "refused") if r.get("version") else "-",
            "-" if champion is None else f"{champion:.3f}",
        )
    results.print(table)


def run_flywheel(ctx: Context) -> int:
    from forge_ml.flywheel import Flywheel

    args = ctx.args
    if args.rounds is not None and args.rounds < 1:
        raise ConfigError(f"--rounds {args.rounds}: must be at least 1")
    project = ctx.project()
    ctx.compose()  # validates, and gives the envelope its config hash
    wheel = Flywheel(project, ctx.overrides, max_rounds=args.rounds, skip_train=args.skip_train)
    outcome = wheel.run(rebaseline=args.rebaseline)
    last = outcome.records[-1] if outcome.records else {}
    ctx.run_id = last.get("round_run_id")
    ctx.report(
        rounds_done=outcome.rounds_done,
        stop_reason=outcome.stop_reason,
        champion_accuracy=outcome.champion_accuracy,
        target_reached=outcome.target_reached,
        rounds=[
            {
                k: r.get(k)
                for k in ("iteration", "gold_accuracy", "promoted", "version", "round_run_id", "planner")
            }
            for r in outcome.records
        ],
    )
    print_rounds(outcome.records)
    champion = "none" if outcome.champion_accuracy is None else f"{outcome.champion_accuracy:.3f}"
    results.print(f"stopped: {outcome.stop_reason}; champion gold accuracy {champion}", highlight=False)
    console.print(
        f"see every round and trial: forge-ml -p {project.root} ui   (MLflow UI on http://127.0.0.1:5000)"
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
