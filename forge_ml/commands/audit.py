"""Data and knowledge commands: audit (review canonical, fix it), probe (domain knowledge), pretrain (raw text)."""

from __future__ import annotations

import json
from typing import Any

from forge_ml.commands import Command, Context, overrides_argument
from forge_ml.console import console, results
from forge_ml.errors import EXIT_OK, ConfigError, InputError


def wants_claude(cfg: Any) -> bool:
    """Whether Claude takes part: planner.backend=claude (the key required), or auto with ANTHROPIC_API_KEY set."""
    from forge_ml.llm import claude_available

    backend = cfg.planner.backend
    if backend == "claude" and not claude_available():
        raise ConfigError("planner.backend=claude needs ANTHROPIC_API_KEY in the environment")
    return backend == "claude" or (backend == "auto" and claude_available())


def _table(title: str, columns: tuple[str, ...], rows: list[tuple[Any, ...]]) -> Any:
    from rich.table import Table

    table = Table(title=title)
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*(str(cell) for cell in row))
    return table


def _figure(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


# ---- audit --------------------------------------------------------------------------------------------


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

    args = ctx.args
    if args.min_severity not in SEVERITIES:
        raise InputError(f"--min-severity {args.min_severity!r}: expected one of {', '.join(SEVERITIES)}")
    if args.batch_size is not None and not 1 <= args.batch_size <= 500:
        raise InputError(f"--batch-size {args.batch_size}: expected 1..500 examples per request")
    cfg = ctx.compose()
    batch_size = args.batch_size or cfg.planner.augment_batch
    summary = audit(
        cfg, claude=wants_claude(cfg), fix=args.fix, min_severity=args.min_severity, batch_size=batch_size
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
    results.print(_table(title, ("index", "line", "severity", "issue", "suggested_fix"), rows))
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
            "offline, --fix can only drop exact duplicates; the other findings need Claude or a hand edit",
            soft_wrap=True,
        )
    if summary.fix.refused:
        rows = [(r["index"], r["reason"]) for r in summary.fix.refused]
        results.print(_table("fixes not applied", ("index", "reason"), rows))
    applied = summary.applied
    results.print(
        f"{summary.path}: {len(applied.fixed)} fixed, {len(applied.dropped)} dropped, "
        f"{len(summary.fix.refused)} fix(es) refused"
        + (f"; the previous file is logged in MLflow run {summary.run_id}" if applied.changed else ""),
        highlight=False,
        soft_wrap=True,
    )


# ---- probe --------------------------------------------------------------------------------------------


def _probe_args(p) -> None:
    p.add_argument("--tag", help="pre | post: which side of the comparison this probe is")
    p.add_argument(
        "--model",
        help="models:/<name>@<alias>, models:/<name>/<version>, an adapter or model directory "
        "(default: the configured base model)",
    )
    p.add_argument("--compare", action="store_true", help="compare the latest pre and post probes")
    overrides_argument(p, "Hydra overrides, e.g. eval.max_new_tokens=128")


def run_probe(ctx: Context) -> int:
    from forge_ml.jobs.probe import TAGS

    args = ctx.args
    if args.compare == (args.tag is not None):
        raise InputError("probe: give either --tag pre|post or --compare")
    if args.compare and args.model:
        raise InputError("probe --compare reads earlier probe runs; --model has no meaning there")
    if args.tag is not None and args.tag not in TAGS:
        raise InputError(f"--tag {args.tag!r}: expected pre or post")
    cfg = ctx.compose()
    return _compare(ctx, cfg) if args.compare else _probe(ctx, cfg)


def _probe(ctx: Context, cfg: Any) -> int:
    from forge_ml.jobs.probe import run_probe as probe

    summary = probe(cfg, ctx.args.tag, ctx.args.model, claude=wants_claude(cfg))
    ctx.run_id = summary.run_id
    ctx.report(
        tag=summary.tag,
        target=summary.target,
        judge=summary.judge,
        score=summary.score,
        items=summary.items,
        cost_usd=summary.cost_usd,
    )
    title = f"probe {summary.tag} of {summary.target}: score {summary.score:.3f} ({summary.judge})"
    rows = [(r["index"], r["question"], r["answer"], _figure(r["score"])) for r in summary.items]
    results.print(_table(title, ("index", "question", "answer", "score"), rows))
    return EXIT_OK


def _compare(ctx: Context, cfg: Any) -> int:
    from forge_ml.jobs.probe import compare_probes

    comparison = compare_probes(cfg)
    pre, post = comparison.pre, comparison.post
    ctx.report(
        pre={"run_id": pre.run_id, "target": pre.target, "judge": pre.judge, "score": pre.score},
        post={"run_id": post.run_id, "target": post.target, "judge": post.judge, "score": post.score},
        delta=comparison.delta,
        per_question=comparison.rows,
    )
    rows = [
        (r["question"], _figure(r["pre"]), _figure(r["post"]), _signed(r["delta"])) for r in comparison.rows
    ]
    rows.append(("overall", _figure(pre.score), _figure(post.score), _signed(comparison.delta)))
    title = f"probe: pre {pre.target} → post {post.target}"
    results.print(_table(title, ("question", "pre", "post", "delta"), rows))
    if pre.judge != post.judge:
        console.print(
            f"[yellow]warning:[/] scored by different judges (pre {pre.judge}, post {post.judge}); "
            "the delta mixes scales",
            highlight=False,
            soft_wrap=True,
        )
    return EXIT_OK


def _signed(value: float | None) -> str:
    return "-" if value is None else f"{value:+.3f}"


# ---- pretrain -----------------------------------------------------------------------------------------


def _pretrain_args(p) -> None:
    p.add_argument("--epochs", type=int, help="passes over the corpus (default: training.epochs)")
    overrides_argument(p, "Hydra overrides, e.g. training.learning_rate=1e-4 lora=full")


def run_pretrain(ctx: Context) -> int:
    from forge_ml.jobs.pretrain import run_pretrain as pretrain

    epochs = ctx.args.epochs
    if epochs is not None and epochs < 1:
        raise InputError(f"--epochs {epochs}: expected at least 1")
    cfg = ctx.compose([*ctx.overrides, f"training.epochs={epochs}"] if epochs else None)
    summary = pretrain(cfg)
    ctx.run_id = summary.run_id
    corpus = summary.corpus
    ctx.report(
        merged_dir=str(summary.merged_dir),
        base_model=summary.base.source,
        method=cfg.lora.method,
        epochs=summary.epochs,
        corpus_hash=corpus.digest,
        files=len(corpus.files),
        documents=len(corpus.documents),
        tokens=summary.tokens,
        ignored=[str(p) for p in corpus.ignored],
        train_loss=summary.losses,
    )
    title = (
        f"pretrain ({cfg.lora.method}) on {len(corpus.documents)} document(s), {summary.tokens} tokens "
        f"from {corpus.root}"
    )
    rows = [(epoch, f"{loss:.4f}") for epoch, loss in enumerate(summary.losses, start=1)]
    results.print(_table(title, ("epoch", "train/loss"), rows))
    relative = summary.merged_dir.relative_to(ctx.project().root).as_posix()
    results.print(f"merged model: {summary.merged_dir}", highlight=False, soft_wrap=True)
    results.print(
        f"use it: forge-ml train model.name_or_path={relative}   "
        f"(probe it: forge-ml probe --tag post --model {relative})",
        highlight=False,
        soft_wrap=True,
    )
    return EXIT_OK


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
    Command(
        "probe",
        "score a model's domain knowledge on dataset/probe.jsonl (--tag pre|post), or --compare",
        _probe_args,
        run_probe,
        ("tag", "target", "judge", "score", "items", "pre", "post", "delta", "per_question", "cost_usd"),
    ),
    Command(
        "pretrain",
        "continue training the base model on the raw text in dataset/corpus/, merged to full weights",
        _pretrain_args,
        run_pretrain,
        (
            "merged_dir",
            "base_model",
            "method",
            "epochs",
            "corpus_hash",
            "files",
            "documents",
            "tokens",
            "ignored",
            "train_loss",
        ),
    ),
]
