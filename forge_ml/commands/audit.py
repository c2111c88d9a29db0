"""`forge-ml audit`: review every canonical example (Claude or rules); --fix rewrites the flagged ones."""

from __future__ import annotations

import json
from typing import Any

from forge_ml.commands import Command, Context, overrides_argument
from forge_ml.console import console, print_table, results
from forge_ml.errors import EXIT_OK, InputError


def _audit_args(p) -> None:
    p.add_argument(
        "--fix", action="store_true", help="rewrite the flagged examples in place (see docs/cli.md)"
    )
    p.add_argument(
        "--min-severity", default="info", help="show (and fix) findings at or above: error | warning | info"
    )
    p.add_argument(
        "--batch-size", type=int, help="examples per Claude request (default: planner.augment_batch)"
    )
    overrides_argument(p)


def _shown_fix(finding: Any) -> str:
    if finding.drop:
        return "(drop)"
    fix = finding.suggested_fix
    return "" if fix is None else fix if isinstance(fix, str) else json.dumps(fix, ensure_ascii=False)


def run_audit(ctx: Context) -> int:
    from forge_ml.jobs.audit import SEVERITIES
    from forge_ml.jobs.audit import run_audit as audit
    from forge_ml.llm import claude_enabled

    args = ctx.args
    if args.min_severity not in SEVERITIES:
        raise InputError(f"--min-severity {args.min_severity!r}: expected one of {', '.join(SEVERITIES)}")
    if args.batch_size is not None and not 1 <= args.batch_size <= 500:
        raise InputError(f"--batch-size {args.batch_size}: expected 1..500 examples per request")
    cfg = ctx.compose()
    batch_size = args.batch_size or cfg.planner.augment_batch
    summary = audit(
        cfg,
        claude=claude_enabled(cfg.planner),
        fix=args.fix,
        min_severity=args.min_severity,
        batch_size=batch_size,
    )
    ctx.run_id = summary.run_id
    applied = summary.applied
    ctx.report(
        reviewer=summary.reviewer,
        examples=summary.examples,
        counts=summary.counts,
        findings=[f.to_dict() for f in summary.shown],
        fixed=applied.fixed,
        dropped=applied.dropped,
        refused=summary.fix.refused if summary.fix else [],
        canonical=str(summary.path),
        previous_hash=summary.previous_hash,
        dataset_hash=summary.dataset_hash,
        cost_usd=summary.usage.cost_usd(cfg.planner) if summary.usage.requests else None,
    )
    _print_audit(summary, args)
    if summary.fix_blocked:
        raise InputError(f"{summary.path}: --fix refused, nothing rewritten: {summary.fix_blocked}")
    return EXIT_OK


def _print_audit(summary: Any, args: Any) -> None:
    counts = ", ".join(f"{n} {severity}" for severity, n in summary.counts.items())
    title = f"{summary.path}: {summary.examples} example(s) audited by {summary.reviewer} — {counts}"
    rows = [(f.index, f.line.rsplit(":", 1)[-1], f.severity, f.issue, _shown_fix(f)) for f in summary.shown]
    if rows:
        print_table(title, ("index", "line", "severity", "issue", "suggested_fix"), rows)
    else:
        results.print(f"{title}: nothing to show at --min-severity {args.min_severity}", highlight=False)
    if summary.fallback_reason:
        console.print(f"[yellow]warning:[/] {summary.fallback_reason}", highlight=False, soft_wrap=True)
    if summary.failed_batches:
        console.print(
            f"[yellow]warning:[/] {summary.failed_batches} review request(s) failed",
            highlight=False,
            soft_wrap=True,
        )
    if summary.usage.requests:
        console.print(f"Claude: {summary.usage.requests} request(s)", highlight=False, soft_wrap=True)
    if not args.fix:
        return
    if summary.reviewer == "rules":
        console.print(
            "offline, --fix drops exact duplicates and unwraps wrapped JSON answers; the other findings need "
            "Claude or a hand edit",
            soft_wrap=True,
        )
    if summary.fix.refused:
        rows = [(r["index"], r["reason"]) for r in summary.fix.refused]
        print_table("fixes not applied", ("index", "reason"), rows)
    applied = summary.applied
    results.print(
        f"{summary.path}: {len(applied.fixed)} fixed, {len(applied.dropped)} dropped, "
        f"{len(summary.fix.refused)} fix(es) refused"
        + (f"; the previous file is logged in MLflow run {summary.run_id}" if applied.changed else ""),
        highlight=False,
        soft_wrap=True,
    )


COMMANDS = [
    Command(
        "audit",
        "review every canonical example (Claude or rules); --fix rewrites the flagged ones",
        _audit_args,
        run_audit,
        (
            "reviewer",
            "examples",
            "counts",
            "findings",
            "fixed",
            "dropped",
            "refused",
            "canonical",
            "previous_hash",
            "dataset_hash",
            "cost_usd",
        ),
    ),
]
