"""A flywheel round's new training examples, aimed at its plan's focus and the latest failures.

Claude writes them (`write_examples`) when the planner uses Claude; otherwise the project's
generator.py does. Every example is brought into the project's form and admitted by
`validate.admit` (well-formed, accepted by the scorer, new, not a gold input), and carries
`meta.source`, `meta.round` and `meta.focus`. Either writer is asked again for what the drops left
short (ATTEMPTS calls at most; Claude is not asked again after a call that added nothing).
Appending rewrites canonical.jsonl atomically, once per round: a resumed round that already
added its examples adds nothing again.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forge_ml.augment.conventions import Conventions
from forge_ml.augment.offline import GENERATOR_FILE, generate_offline, load_generator
from forge_ml.augment.reference import reference_rows
from forge_ml.augment.validate import Admission, admit, refuse_garbage
from forge_ml.config import ForgeConfig
from forge_ml.data.examples import dataset_hash, read_examples
from forge_ml.data.gold_guard import GoldGuard
from forge_ml.data.project_data import read_gold, read_system_prompt
from forge_ml.evaluation.scorers import make_scorer
from forge_ml.fileio import atomic_write_text
from forge_ml.llm import ClaudeUnavailable, Usage, project_notes
from forge_ml.planner.plan import ExperimentPlan
from forge_ml.project import Project

log = logging.getLogger("forge_ml.augment")  # the package's name: log lines read as before the split
ATTEMPTS = 3  # generator calls per round to make up for dropped duplicates
SOURCE = "augment"


@dataclass
class AugmentResult:
    added: int
    requested: int
    writer: str  # claude | generator | none
    dropped: dict[str, int] = field(default_factory=dict)
    mended: dict[str, int] = field(default_factory=dict)  # changes to the rows kept (Conventions)
    by_source: dict[str, int] = field(default_factory=dict)
    by_category: dict[str, int] = field(default_factory=dict)
    dataset_hash: str = ""
    size: int = 0
    resumed: bool = False
    usage: Usage = field(default_factory=Usage)

    def report(self) -> list[str]:
        """What the round prints: examples added, by whom, and what was dropped and mended."""
        made = "written before the resume" if self.resumed else self.writer
        lines = [f"  data: +{self.added} examples ({made}), {self.size} in canonical"]
        for kind, counts in (("dropped", self.dropped), ("mended", self.mended)):
            if counts:
                told = ", ".join(f"{n} {reason}" for reason, n in sorted(counts.items()))
                lines.append(f"        {kind}: {told}")
        return lines

    def metrics(self) -> dict[str, float]:
        data = {"data/added": float(self.added), "data/canonical_size": float(self.size)}
        for kind, counts in (("dropped", self.dropped), ("mended", self.mended)):
            data |= {
                f"data/{kind}/{k.replace(' ', '_').replace(chr(39), '')}": float(v) for k, v in counts.items()
            }
        return data


def _summary(examples: list, result: AugmentResult) -> AugmentResult:
    result.by_source = dict(Counter(str(e.meta.get("source", "unknown")) for e in examples))
    result.by_category = dict(Counter(e.category or "uncategorized" for e in examples))
    result.dataset_hash = dataset_hash(examples)
    result.size = len(examples)
    return result


def augment_data(
    cfg: ForgeConfig,
    project: Project,
    plan: ExperimentPlan,
    round_number: int,
    *,
    failures: list[dict[str, Any]],
    claude: Any = None,
    run_id: str | None = None,
) -> AugmentResult:
    """Add up to `plan.augment_n` admitted examples to canonical; `claude` is a client or None (offline).

    Each example's meta names the round and, given `run_id` (the round's MLflow run), the run: a
    round resumed after a kill finds what it wrote by its run, not by its number, which examples
    of another project's or an earlier start's round of that number also carry.
    """
    canonical_path = project.resolve(cfg.task.canonical_path)
    existing = read_examples(canonical_path, required=False)
    result = AugmentResult(added=0, requested=plan.augment_n, writer="none")
    already = [
        e
        for e in existing
        if e.meta.get("source") == SOURCE
        and (e.meta.get("run") == run_id if run_id else e.meta.get("round") == round_number)
    ]
    if already or plan.augment_n <= 0:
        result.added, result.resumed = len(already), bool(already)
        return _summary(existing, result)

    gold_examples = read_gold(project, cfg.task)
    gold = {e.key for e in gold_examples}
    known = {e.key for e in existing}
    scorer = make_scorer(cfg.eval, project.root, probe=gold_examples)
    seed_examples = read_examples(project.resolve(cfg.task.seed_path), required=False)
    conventions = Conventions.of(
        [*gold_examples, *seed_examples], categories=[e.category for e in existing if e.category]
    )
    focus = list(dict.fromkeys(conventions.category(name) for name in plan.augment_focus))
    meta = {"source": SOURCE, "round": round_number, "focus": ",".join(focus)} | (
        {"run": run_id} if run_id else {}
    )
    total = Admission()
    if claude is not None:
        from forge_ml.augment.claude import write_examples

        result.writer = "claude"
        notes = project_notes(project.root, GoldGuard.of(gold_examples, seed_examples))
        shown = reference_rows(
            [e.category for e in existing], [e.meta.get("source") for e in existing], focus
        )
        for attempt in range(ATTEMPTS):  # again for what drops left short, until a call adds nothing
            wanted = plan.augment_n - len(total.kept)
            try:
                rows = write_examples(
                    claude,
                    cfg.planner,
                    n=wanted,
                    focus=focus,
                    notes=notes,
                    system_prompt=read_system_prompt(project, cfg.task),
                    samples=[existing[i] for i in shown],
                    failures=failures,
                    usage=result.usage,
                )
            except ClaudeUnavailable:
                if attempt == 0:
                    raise
                break
            admission = admit(
                rows, scorer=scorer, known=known, gold=gold, meta=meta, conventions=conventions, limit=wanted
            )
            total.extend(admission)
            if len(total.kept) >= plan.augment_n or not admission.kept:
                break
    else:
        generate = load_generator(project.root)
        if generate is None:
            log.warning(
                "%s: no %s and no Claude; round %d adds no data (write a %s, or set ANTHROPIC_API_KEY)",
                project.root,
                GENERATOR_FILE,
                round_number,
                GENERATOR_FILE,
            )
            return _summary(existing, result)
        result.writer = "generator"
        path = project.root / GENERATOR_FILE
        for attempt in range(ATTEMPTS):
            wanted = plan.augment_n - len(total.kept)
            seed = cfg.tune.seed * 100_003 + round_number * 101 + attempt
            rows = []
            for names, n in allocate(wanted, focus, failures):
                rows += generate_offline(generate, path, n, seed=seed, focus=names)
            admission = admit(
                rows, scorer=scorer, known=known, gold=gold, meta=meta, conventions=conventions, limit=wanted
            )
            refuse_garbage(path, rows, admission)
            total.extend(admission)
            if len(total.kept) >= plan.augment_n:
                break
    if total.kept:
        append_examples(canonical_path, total.kept)
    result.added, result.dropped, result.mended = len(total.kept), dict(total.dropped), dict(total.mended)
    return _summary(existing + total.kept, result)


def allocate(n: int, focus: list[str], failures: list[dict[str, Any]]) -> list[tuple[list[str], int]]:
    """Split `n` examples over the focus categories in proportion to their gold failures.

    Without failure counts for them the split is even (one generator call); without focus,
    one call covers every category.
    """
    if not focus or n <= 0:
        return [(focus, n)] if n > 0 else []
    counts = {name: 0 for name in focus}
    for row in failures:
        if row.get("category") in counts:
            counts[row["category"]] += 1
    total = sum(counts.values())
    if total == 0:
        return [(focus, n)]
    shares = {name: n * c / total for name, c in counts.items()}
    sizes = {name: int(share) for name, share in shares.items()}
    by_remainder = sorted(counts, key=lambda name: (shares[name] - sizes[name], counts[name]), reverse=True)
    for name in by_remainder[: n - sum(sizes.values())]:
        sizes[name] += 1
    return [([name], size) for name, size in sizes.items() if size > 0]


def append_examples(path: Path, examples: list) -> None:
    """Append `examples` to the JSONL file `path` in one atomic rewrite.

    A kill leaves the old file or the new one, never a partial line.
    """
    import json

    old = path.read_text(encoding="utf-8") if path.is_file() else ""
    if old and not old.endswith("\n"):
        old += "\n"
    new = "".join(json.dumps(e.to_record(), ensure_ascii=False) + "\n" for e in examples)
    atomic_write_text(path, old + new)
