"""Data commands: generate, patch, augment (new training examples) and clean (drop generated ones).

Each composes the project's config (Hydra overrides accepted), changes the training data in one
atomic write, and records the change in one MLflow run tagged `forge.kind=<command>`.
"""

from __future__ import annotations

from typing import Any

from forge_ml.commands import Command, Context, overrides_argument
from forge_ml.console import results
from forge_ml.errors import EXIT_OK

DATA_KEYS = (
    "writer",
    "requested",
    "added",
    "dropped",
    "mended",
    "by_category",
    "focus",
    "output",
    "dataset_size",
    "dataset_hash",
    "requests",
    "input_tokens",
    "output_tokens",
    "cost_usd",
    "batch_id",
    "dry_run",
)


def _common_args(p, n: int) -> None:
    p.add_argument("-n", "--n", type=int, default=n, help=f"examples to add (default {n})")
    p.add_argument("--batch-size", type=int, default=50, help="examples per Claude request (default 50)")
    p.add_argument(
        "--batch", action="store_true", help="Claude: one Message Batch at half the price (slower)"
    )
    p.add_argument(
        "--batch-wait",
        type=float,
        metavar="SECONDS",
        help="--batch: the longest wait for the batch to end (default 86400: a batch expires in 24 h)",
    )
    p.add_argument("--dry-run", action="store_true", help="print the request count and cost; change nothing")


def _generate_args(p) -> None:
    _common_args(p, 500)
    p.add_argument(
        "--output",
        help="write the examples to this new JSONL file (relative to the project) instead of canonical",
    )
    p.add_argument("--force", action="store_true", help="--output: replace the file if it exists")
    overrides_argument(p)


def _patch_args(p) -> None:
    p.add_argument("description", help="the examples wanted, in plain English, e.g. 'hover with durations'")
    _common_args(p, 50)
    overrides_argument(p)


def _augment_args(p) -> None:
    _common_args(p, 100)
    overrides_argument(p)


def _print_data(summary: Any) -> None:
    from rich.table import Table

    if summary.dry_run:
        if summary.writer == "generator":
            results.print(
                f"dry run: generator.py would write {summary.requested} example(s) into {summary.output}; "
                "no Claude requests, no cost",
                highlight=False,
            )
        else:
            results.print(
                f"dry run: {summary.requests} write_examples request(s) for {summary.requested} example(s), "
                f"about {summary.usage.input_tokens} input and {summary.usage.output_tokens} output tokens, "
                f"estimated ${summary.cost_usd:.4f}"
                + (" (Message Batch: half price)" if summary.batch else ""),
                highlight=False,
            )
        return
    short = summary.requested - (summary.added or 0)
    results.print(
        f"{summary.kind}: added {summary.added} of {summary.requested} example(s) ({summary.writer})"
        + (
            f"; a Message Batch is not asked again: run it again for the {short} short"
            if summary.batch and short
            else ""
        ),
        highlight=False,
    )
    table = Table()
    table.add_column("category")
    table.add_column("added", justify="right")
    for name, n in sorted(summary.by_category.items()):
        table.add_row(name, str(n))
    results.print(table)
    if summary.dropped:
        dropped = ", ".join(f"{n} {reason}" for reason, n in sorted(summary.dropped.items()))
        results.print(f"dropped: {dropped}", highlight=False)
    if summary.mended:
        mended = ", ".join(f"{n} {reason}" for reason, n in sorted(summary.mended.items()))
        results.print(f"mended to the project's form: {mended}", highlight=False)
    if summary.writer == "claude":
        results.print(
            f"Claude: {summary.requests} request(s)"
            + (f" in Message Batch {summary.batch_id}" if summary.batch_id else "")
            + f", {summary.usage.input_tokens} input / {summary.usage.output_tokens} output tokens, "
            f"${summary.cost_usd:.4f}",
            highlight=False,
        )
    results.print(
        f"{summary.output}: {summary.dataset_size} example(s), dataset {summary.dataset_hash[:12]}",
        highlight=False,
    )


def _run_data(ctx: Context, kind: str) -> int:
    from forge_ml.jobs.data_job import DataJob
    from forge_ml.jobs.generate import run_data_job

    args = ctx.args
    job = DataJob(
        kind=kind,
        n=args.n,
        per_request=args.batch_size,
        output=getattr(args, "output", None),
        force=getattr(args, "force", False),
        batch=args.batch,
        dry_run=args.dry_run,
        description=getattr(args, "description", None),
        **({} if args.batch_wait is None else {"batch_wait_s": args.batch_wait}),
    )

    def started(run_id: str) -> None:
        ctx.run_id = run_id

    summary = run_data_job(ctx.compose(), job, on_run=started)
    ctx.report(**summary.fields())
    _print_data(summary)
    return EXIT_OK


def run_clean(ctx: Context) -> int:
    from forge_ml.jobs.clean import clean_generated

    def started(run_id: str) -> None:
        ctx.run_id = run_id

    summary = clean_generated(ctx.compose(), on_run=started)
    ctx.report(removed=dict(summary.removed), kept=summary.kept, path=str(summary.path))
    removed = ", ".join(f"{n} {source}" for source, n in sorted(summary.removed.items())) or "nothing"
    results.print(
        f"{summary.path}: removed {removed}; {summary.kept} example(s) kept, dataset {summary.dataset_hash[:12]}",
        highlight=False,
    )
    return EXIT_OK


COMMANDS = [
    Command(
        "generate",
        "write synthetic training examples (Claude, or the project's generator.py offline)",
        _generate_args,
        lambda ctx: _run_data(ctx, "generate"),
        DATA_KEYS,
    ),
    Command(
        "patch",
        "write examples for a plain-English description of what is missing",
        _patch_args,
        lambda ctx: _run_data(ctx, "patch"),
        DATA_KEYS,
    ),
    Command(
        "augment",
        "write examples aimed at the latest gold failures (output/eval_failures.jsonl)",
        _augment_args,
        lambda ctx: _run_data(ctx, "augment"),
        DATA_KEYS,
    ),
    Command(
        "clean",
        "remove generated examples from canonical (seed and hand-written stay)",
        overrides_argument,
        run_clean,
        ("removed", "kept", "path"),
    ),
]
