"""Knowledge commands: probe (score a model's domain knowledge), pretrain (continue training on raw text)."""

from __future__ import annotations

from typing import Any

from forge_ml.commands import Command, Context, overrides_argument
from forge_ml.console import console, print_table, results
from forge_ml.errors import EXIT_OK, InputError

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
    from forge_ml.llm import claude_enabled

    summary = probe(cfg, ctx.args.tag, ctx.args.model, claude=claude_enabled(cfg.planner))
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
    print_table(title, ("index", "question", "answer", "score"), rows)
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
    print_table(title, ("question", "pre", "post", "delta"), rows)
    if pre.judge != post.judge:
        console.print(
            f"[yellow]warning:[/] scored by different judges (pre {pre.judge}, post {post.judge}); "
            "the delta mixes scales",
            highlight=False,
            soft_wrap=True,
        )
    return EXIT_OK


def _figure(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


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
        optimizer_steps=summary.steps,
        learning_rate=cfg.training.learning_rate,
        corpus_hash=corpus.digest,
        files=len(corpus.files),
        documents=len(corpus.documents),
        tokens=summary.tokens,
        ignored=[str(p) for p in corpus.ignored],
        train_loss=summary.losses,
        kept_base_of_versions=summary.kept_for,
    )
    # what it trained on is a line of its own: as the table's title it would wrap to the table's width
    results.print(
        f"pretrain ({cfg.lora.method}) on {len(corpus.documents)} document(s), {summary.tokens:,} tokens "
        f"from {corpus.root}: {summary.steps} optimizer step(s) at learning rate {cfg.training.learning_rate:g}",
        highlight=False,
        soft_wrap=True,
    )
    rows = [(epoch, f"{loss:.4f}") for epoch, loss in enumerate(summary.losses, start=1)]
    print_table("pretrain", ("epoch", "train/loss"), rows)
    relative = summary.merged_dir.relative_to(ctx.project().root).as_posix()
    if summary.kept_for:
        results.print(
            f"[yellow]note:[/] output/pretrain_merged is the base of registered version(s) "
            f"{', '.join(summary.kept_for)}: kept as it was; this pretrain's model is {relative}",
            highlight=False,
            soft_wrap=True,
        )
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
            "optimizer_steps",
            "learning_rate",
            "corpus_hash",
            "files",
            "documents",
            "tokens",
            "ignored",
            "train_loss",
            "kept_base_of_versions",
        ),
    ),
]
