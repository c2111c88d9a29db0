"""Registry commands: promote (run the gate by hand, or force it) and merge (export a version).

`forge-ml eval model=models:/<name>@<alias>` (forge_ml/commands/training.py) evaluates a version.
"""

from __future__ import annotations

from forge_ml.commands import Command, Context, overrides_argument
from forge_ml.console import console, results
from forge_ml.errors import EXIT_GATE, EXIT_OK


def _promote_args(p) -> None:
    p.add_argument("--version", type=int, help="the version to promote (default: the challenger)")
    p.add_argument("--force", action="store_true", help="promote regardless of the gate (needs --reason)")
    p.add_argument("--reason", help="why the gate is overridden; recorded with the version")
    p.add_argument(
        "--rebaseline",
        action="store_true",
        help="re-measure the champion on the current gold set under the current eval.scorer (after either changed)",
    )
    overrides_argument(p, "Hydra overrides, e.g. registry.gate.min_delta=0.02")


def run_promote(ctx: Context) -> int:
    from forge_ml.jobs.promote import describe
    from forge_ml.jobs.promote import run_promote as promote

    a = ctx.args
    result = promote(
        ctx.compose(), version=a.version, force=a.force, reason=a.reason, rebaseline=a.rebaseline
    )
    ctx.run_id = result.run_id
    ctx.report(
        model=result.model,
        version=result.version,
        decision=result.decision,
        reasons=result.reasons,
        p_value=result.p_value,
        compared_to=result.compared_to,
        champion=result.champion,
    )
    results.print(describe(result))
    return EXIT_GATE if result.refused else EXIT_OK


def _merge_args(p) -> None:
    which = p.add_mutually_exclusive_group()
    which.add_argument("--alias", help="merge the version this alias points at (default: champion)")
    which.add_argument("--version", type=int, help="merge this version")
    p.add_argument(
        "--out", help="output directory (default: output/merged/<name>-v<N>); must be new or empty"
    )
    overrides_argument(p, "Hydra overrides, e.g. model.dtype=bfloat16")


def run_merge(ctx: Context) -> int:
    from forge_ml.jobs.merge import run_merge as merge

    a = ctx.args
    result = merge(ctx.compose(), alias=a.alias, version=a.version, out=a.out)
    ctx.run_id = result.run_id
    ctx.report(
        model=result.model,
        version=result.version,
        out=str(result.out),
        base=result.base,
        adapter_run_id=result.adapter_run_id,
    )
    results.print(
        f"merged {result.model} v{result.version} into its base ({result.base}): {result.out}",
        highlight=False,
    )
    console.print(f"load it with AutoModelForCausalLM.from_pretrained({str(result.out)!r})", highlight=False)
    return EXIT_OK


COMMANDS = [
    Command(
        "promote",
        "run the promotion gate on a registry version (default: the challenger), or --force it",
        _promote_args,
        run_promote,
        ("model", "version", "decision", "reasons", "p_value", "compared_to", "champion"),
    ),
    Command(
        "merge",
        "merge a registry version's adapter into its base model, for export",
        _merge_args,
        run_merge,
        ("model", "version", "out", "base", "adapter_run_id"),
    ),
]
