"""`forge-ml` command line: dispatch, Hydra overrides after the command, exit codes.

Exit codes: 0 success · 1 bad configuration or input · 2 runtime failure · 3 gate refused.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import warnings
from pathlib import Path
from typing import Any

from forge_ml import __version__
from forge_ml.console import console, print_round, results
from forge_ml.errors import EXIT_GATE, EXIT_OK, EXIT_RUNTIME, ConfigError, ForgeError, RuntimeFault
from forge_ml.project import Project, find_project, init_project, packaged_examples

log = logging.getLogger("forge_ml")
QUIET_ENV = {
    "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "TRANSFORMERS_VERBOSITY": "error",
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="forge-ml", description="Self-improving fine-tuning of small models."
    )
    parser.add_argument("--version", action="version", version=f"forge-ml {__version__}")
    parser.add_argument(
        "-p", "--project", help="project directory (default: the current directory or a parent)"
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("init", help="create a project directory")
    p.add_argument("name", help="directory to create (its name becomes the project name)")
    p.add_argument("--example", help=f"copy a ready example ({', '.join(packaged_examples()) or 'none'})")

    p = sub.add_parser("train", help="train one LoRA adapter, evaluate it, record it in MLflow")
    p.add_argument("-m", "--multirun", action="store_true", help="Hydra multirun: one job per sweep point")
    p.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. lora.r=16 training.epochs=3")

    p = sub.add_parser("tune", help="run one round: parallel Ray Tune trials over a search space")
    p.add_argument(
        "overrides", nargs="*", help="sweeps form the space ('lora.r=choice(4,8)'); other overrides are fixed"
    )

    p = sub.add_parser("flywheel", help="improve the model round after round toward eval.target_accuracy")
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
    p.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. planner=offline tune.num_samples=4")

    p = sub.add_parser("clean", help="remove generated examples from canonical (seed and hand-written stay)")
    p.add_argument("overrides", nargs="*")

    p = sub.add_parser("eval", help="evaluate an adapter (default: the last trained) on gold")
    p.add_argument("--adapter", help="adapter or model directory (default: output/last_train.json)")
    p.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. eval.batch_size=64")

    p = sub.add_parser("status", help="dataset sizes and latest scores")
    p.add_argument("overrides", nargs="*")

    p = sub.add_parser("ui", help="start the MLflow UI on the project's tracking store")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=5000)
    p.add_argument("overrides", nargs="*")
    return parser


def _project(args: argparse.Namespace) -> Project:
    return find_project(args.project, explicit=args.project is not None)


def cmd_init(args: argparse.Namespace, _extra: list[str]) -> int:
    parent = Path(args.project) if args.project else Path.cwd()
    project = init_project(parent / args.name, example=args.example)
    console.print(f"[green]created[/] {project.root}")
    console.print(f"next: cd {project.root} && forge-ml train")
    return EXIT_OK


def _print_train_summary(summary: Any) -> None:
    from rich.table import Table

    table = Table(
        title=f"run {summary.run_id[:8]}: gold accuracy {summary.gold.accuracy:.3f} "
        f"({summary.gold.correct}/{summary.gold.total}), dev accuracy {summary.dev.accuracy:.3f}"
    )
    for column in ("category", "gold accuracy", "correct", "total"):
        table.add_column(column)
    for name, stats in summary.gold.per_category.items():
        table.add_row(name, f"{stats['accuracy']:.3f}", str(stats["correct"]), str(stats["total"]))
    results.print(table)


def cmd_train(args: argparse.Namespace, extra: list[str]) -> int:
    from forge_ml.compose import compose_config, expand_sweeps, launch
    from forge_ml.jobs.train import run_train

    project = _project(args)
    hydra_flags = [a for a in extra if a.startswith("--")]
    overrides = [*args.overrides, *(a for a in extra if not a.startswith("--"))]
    if not hydra_flags:  # validate every job up front, before any model loads
        for job_overrides in expand_sweeps(overrides) if args.multirun else [overrides]:
            compose_config(project, job_overrides)

    def job(cfg: Any, context: dict[str, Any]) -> Any:
        summary = run_train(cfg, run_name="train", tags=context)
        _print_train_summary(summary)
        return summary

    result = launch(project, overrides, job, multirun=args.multirun, hydra_flags=hydra_flags)
    if result.failed and not args.multirun:
        raise result.failed[0].error
    for failed in result.failed:
        shown = " ".join(o for o in failed.overrides if not o.startswith("++project_dir="))
        console.print(f"[red]job failed[/] ({shown}): {failed.error}", soft_wrap=True, highlight=False)
    if result.failed:
        console.print(f"{len(result.failed)} of {len(result.jobs)} job(s) failed")
        return max(_exit_code(f.error) for f in result.failed)
    if result.jobs:
        console.print(f"see the runs: forge-ml -p {project.root} ui   (MLflow UI on http://127.0.0.1:5000)")
    return EXIT_OK


def cmd_tune(args: argparse.Namespace, extra: list[str]) -> int:
    from forge_ml.compose import compose_config
    from forge_ml.search import split_sweep_overrides
    from forge_ml.tuning.engine import run_round

    project = _project(args)
    space, fixed = split_sweep_overrides([*args.overrides, *extra])
    cfg = compose_config(project, fixed)
    result = run_round(cfg, {**cfg.tune.space, **space})
    print_round(result, cfg.tune.metric)
    console.print(f"see the round: forge-ml -p {project.root} ui")
    return EXIT_OK


def _print_rounds(records: list[dict[str, Any]]) -> None:
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


def cmd_flywheel(args: argparse.Namespace, extra: list[str]) -> int:
    from forge_ml.flywheel import Flywheel

    project = _project(args)
    if args.rounds is not None and args.rounds < 1:
        raise ConfigError(f"--rounds {args.rounds}: must be at least 1")
    wheel = Flywheel(project, [*args.overrides, *extra], max_rounds=args.rounds, skip_train=args.skip_train)
    outcome = wheel.run(rebaseline=args.rebaseline)
    _print_rounds(outcome.records)
    champion = "none" if outcome.champion_accuracy is None else f"{outcome.champion_accuracy:.3f}"
    results.print(f"stopped: {outcome.stop_reason}; champion gold accuracy {champion}", highlight=False)
    console.print(
        f"see every round and trial: forge-ml -p {project.root} ui   (MLflow UI on http://127.0.0.1:5000)"
    )
    if args.require_target and not outcome.target_reached:
        return EXIT_GATE
    return EXIT_OK


def cmd_clean(args: argparse.Namespace, extra: list[str]) -> int:
    from forge_ml.compose import compose_config
    from forge_ml.jobs.clean import clean_generated

    project = _project(args)
    summary = clean_generated(compose_config(project, [*args.overrides, *extra]))
    removed = ", ".join(f"{n} {source}" for source, n in sorted(summary.removed.items())) or "nothing"
    results.print(f"{summary.path}: removed {removed}; {summary.kept} example(s) kept", highlight=False)
    return EXIT_OK


def cmd_eval(args: argparse.Namespace, extra: list[str]) -> int:
    from forge_ml.compose import compose_config
    from forge_ml.jobs.evaluate import run_eval

    project = _project(args)
    cfg = compose_config(project, [*args.overrides, *extra])
    summary = run_eval(cfg, args.adapter)
    r = summary.report
    results.print(f"gold accuracy {r.accuracy:.3f} ({r.correct}/{r.total}) for {summary.target}")
    console.print(f"results: {summary.results_path}")
    return EXIT_OK


def cmd_status(args: argparse.Namespace, extra: list[str]) -> int:
    from forge_ml.compose import compose_config
    from forge_ml.jobs.status import status_tables

    project = _project(args)
    cfg = compose_config(project, [*args.overrides, *extra])
    results.print(f"[bold]{cfg.name}[/] — {project.root}")
    for table in status_tables(cfg, project):
        results.print(table)
    return EXIT_OK


def cmd_ui(args: argparse.Namespace, extra: list[str]) -> int:
    from forge_ml.compose import compose_config
    from forge_ml.tracking import tracking_uri

    project = _project(args)
    cfg = compose_config(project, [*args.overrides, *extra])
    uri = tracking_uri(cfg, project)
    if not uri.startswith(("sqlite:", "file:", "postgresql:", "mysql:")) and "://" in uri:
        console.print(f"the tracking server is already serving its UI: open {uri}")
        return EXIT_OK
    console.print(f"MLflow UI for {uri} on http://{args.host}:{args.port} (Ctrl-C to stop)")
    argv = [
        sys.executable,
        "-m",
        "mlflow",
        "ui",
        "--backend-store-uri",
        uri,
        "--host",
        args.host,
        "--port",
        str(args.port),
    ]
    os.execv(sys.executable, argv)
    return EXIT_OK  # not reached


COMMANDS = {
    "init": cmd_init,
    "train": cmd_train,
    "tune": cmd_tune,
    "flywheel": cmd_flywheel,
    "clean": cmd_clean,
    "eval": cmd_eval,
    "status": cmd_status,
    "ui": cmd_ui,
}


def _exit_code(error: BaseException | None) -> int:
    if isinstance(error, ForgeError):
        return error.exit_code
    if isinstance(error, KeyboardInterrupt):
        return 130
    return EXIT_RUNTIME


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("forge_ml").setLevel(logging.DEBUG if verbose else logging.INFO)
    for noisy in ("mlflow", "alembic", "urllib3", "httpx", "filelock"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def main(argv: list[str] | None = None) -> int:
    args, extra = _parser().parse_known_args(argv)
    _setup_logging(args.verbose)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    for name, value in QUIET_ENV.items():  # progress bars of libraries clutter the command's own output
        os.environ.setdefault(name, value)
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
    try:
        return COMMANDS[args.command](args, extra)
    except ForgeError as exc:
        console.print(f"[red]error:[/] {exc}", highlight=False, soft_wrap=True)
        return exc.exit_code
    except KeyboardInterrupt:
        console.print("[yellow]interrupted[/]")
        return 130
    except Exception as exc:
        log.debug("unexpected failure", exc_info=True)
        fault = RuntimeFault(f"{type(exc).__name__}: {exc}")
        console.print(
            f"[red]error:[/] {fault} (run with -v for the traceback)", highlight=False, soft_wrap=True
        )
        return fault.exit_code


if __name__ == "__main__":
    sys.exit(main())
