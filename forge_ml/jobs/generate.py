"""`forge-ml generate | patch | augment`: new training examples, admitted, written atomically, recorded in MLflow.

Claude writes them with the forced `write_examples` tool (requests in flight at once, bounded by
`planner.augment_concurrency`, or one Message Batch at half the price) when the planner may use
it; otherwise the project's generator.py does. Every row passes `admit` (well-formed, accepted by
the scorer, new, never a gold input) and carries `meta.source` = the command; what the drops left
short of `--n` is asked for again (not in a Message Batch). The examples are
appended to canonical.jsonl in one atomic rewrite under the project lock (refused while a flywheel
runs), or written to `--output` (never canonical).
One MLflow run per invocation (`forge.kind` = the command) records the dataset version after
the change, the counts, and Claude's token usage and cost.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forge_ml.augment import ATTEMPTS, allocate, append_examples
from forge_ml.augment.categories import known_categories, match_categories
from forge_ml.augment.conventions import Conventions
from forge_ml.augment.offline import GENERATOR_FILE, generate_offline, load_generator
from forge_ml.augment.provenance import count_metrics, log_data_version
from forge_ml.augment.reference import reference_rows
from forge_ml.augment.requests import (
    Brief,
    Written,
    build_requests,
    estimate_tokens,
    send_batch,
    send_concurrent,
    system_blocks,
)
from forge_ml.augment.validate import Admission, admit, refuse_garbage
from forge_ml.config import ForgeConfig
from forge_ml.console import console
from forge_ml.data.examples import Example, read_examples
from forge_ml.data.gold_guard import GoldGuard
from forge_ml.data.project_data import read_gold, read_system_prompt
from forge_ml.data.table import ExampleTable, KnownKeys, load_table
from forge_ml.errors import ConfigError, InputError, RuntimeFault
from forge_ml.evaluation.scorers import make_scorer
from forge_ml.fileio import atomic_write_text
from forge_ml.jobs.data_job import DataJob, DataSummary, check_job
from forge_ml.llm import (
    ClaudeRequestFailed,
    ClaudeUnavailable,
    batch_cost_usd,
    claude_enabled,
    make_client,
    project_notes,
)
from forge_ml.planner.history import FAILURES_FILE, read_failures
from forge_ml.project import Project, ProjectLock
from forge_ml.tracking import Tracker

log = logging.getLogger(__name__)


@dataclass
class _Inputs:
    """What a job reads before it writes anything."""

    canonical_path: Path
    target: Path  # where the admitted examples go
    canonical: ExampleTable  # canonical's cached table
    known: KnownKeys  # normalised user texts already in canonical or seed
    gold: set[str]
    samples: list[Example]
    focus: list[str]
    failures: list[dict[str, Any]]
    generate: Any  # the project's generate(), or None when Claude writes
    generator_path: Path
    gold_examples: list[Example] = field(default_factory=list)  # to try the scorer on before a run starts
    conventions: Conventions = field(default_factory=Conventions)  # the form added examples are brought into
    system: list[dict[str, Any]] = field(default_factory=list)  # write_examples' prompt, when Claude writes


def reference_examples(canonical: ExampleTable, seed: list[Example], focus: list[str]) -> list[Example]:
    """The examples shown to a writer for the format (`reference_rows` over canonical then the seed;
    only the rows picked are read from the table)."""
    categories = canonical.column("category").to_pylist() + [e.category for e in seed]
    sources = canonical.column("source").to_pylist() + ["seed"] * len(seed)
    picks = reference_rows(categories, sources, focus)
    rows = [i for i in picks if i < len(canonical)]
    return canonical.examples(rows) + [seed[i - len(canonical)] for i in picks if i >= len(canonical)]


def _target(cfg: ForgeConfig, project: Project, job: DataJob, canonical: Path) -> Path:
    if job.output is None:
        return canonical
    path = project.resolve(job.output)
    if path.is_dir():
        raise InputError(f"--output {path}: is a directory; name a .jsonl file")
    if not path.parent.is_dir():
        raise InputError(f"--output {path}: the directory {path.parent} does not exist")
    protected = {"canonical": canonical, "gold": project.resolve(cfg.task.gold_path)}
    protected["seed"] = project.resolve(cfg.task.seed_path)
    for name, other in protected.items():
        if path.resolve() == other.resolve():
            raise InputError(f"--output {path}: is the project's {name} set; name another file")
    if path.exists() and not job.force:
        raise InputError(f"--output {path}: the file exists; name a new file, or pass --force to replace it")
    return path


def _failures(project: Project) -> list[dict[str, Any]]:
    path = project.output / FAILURES_FILE
    if not path.is_file():
        raise InputError(f"{path}: not found; `forge-ml eval` (or train) writes the gold failures to aim at")
    failures = read_failures(path)
    if not failures:
        raise InputError(f"{path}: holds no failures to aim at; use `forge-ml generate` for more data")
    return failures


def _focus(job: DataJob, inputs: _Inputs, categories: list[str], claude: bool) -> list[str]:
    if job.kind == "augment":
        counts = Counter(str(f["category"]) for f in inputs.failures if f.get("category"))
        return [name for name, _ in counts.most_common()]
    if job.kind == "patch" and not claude:
        found = match_categories(job.description or "", categories)
        if not found:
            raise InputError(
                f"patch: {job.description!r} names none of the project's categories "
                f"({', '.join(categories) or 'none found in gold, seed or canonical'}); "
                "offline, the description must name one"
            )
        return found
    return []


def prepare(cfg: ForgeConfig, project: Project, job: DataJob) -> _Inputs:
    """Read and check everything the job needs; raise InputError/ConfigError before any write."""
    check_job(job)
    claude = claude_enabled(cfg.planner)  # Claude writes when the planner may use it
    if job.batch and not claude:
        raise InputError("--batch needs Claude: set ANTHROPIC_API_KEY (and a planner other than offline)")
    generate = None
    if not claude:
        generate = load_generator(project.root)
        if generate is None:
            raise InputError(
                f"{project.root / GENERATOR_FILE}: not found, and Claude is off (no ANTHROPIC_API_KEY, "
                "or planner=offline); add a generator.py or set the key"
            )
    canonical_path = project.resolve(cfg.task.canonical_path)
    target = _target(cfg, project, job, canonical_path)
    canonical = load_table(canonical_path, project.output, split_seed=cfg.task.split_seed)
    seed = read_examples(project.resolve(cfg.task.seed_path), required=False)
    gold = read_gold(project, cfg.task)
    failures = _failures(project) if job.kind == "augment" else []
    known = KnownKeys(canonical.column("key").to_pylist())
    for example in seed:
        known.add(example.key)
    inputs = _Inputs(
        canonical_path=canonical_path,
        target=target,
        canonical=canonical,
        known=known,
        gold={e.key for e in gold},
        samples=[],
        focus=[],
        failures=failures,
        generate=generate,
        generator_path=project.root / GENERATOR_FILE,
        gold_examples=gold,
    )
    in_canonical = [c for c in canonical.column("category").unique().to_pylist() if c]
    inputs.conventions = Conventions.of([*gold, *seed], categories=in_canonical)
    inputs.focus = _focus(job, inputs, sorted(set(known_categories(gold, seed)) | set(in_canonical)), claude)
    inputs.samples = reference_examples(canonical, seed, inputs.focus)
    if claude:  # gold quoted in the notes is cut out once here (with its warning), not per request
        notes = project_notes(project.root, GoldGuard.of(gold, seed))
        inputs.system = system_blocks(notes, read_system_prompt(project, cfg.task))
    return inputs


def _brief(cfg: ForgeConfig, job: DataJob, inputs: _Inputs, n: int | None = None) -> Brief:
    return Brief(
        n=job.n if n is None else n,
        per_request=job.per_request,
        focus=inputs.focus,
        description=job.description if job.kind == "patch" else None,
        samples=inputs.samples,
        failures=inputs.failures,
        split=n is None,  # what drops left short is asked for in one share
    )


def estimate(cfg: ForgeConfig, project: Project, job: DataJob, inputs: _Inputs) -> DataSummary:
    """The dry run: how many requests, and their cost estimated from prompt length and `n`."""
    summary = DataSummary(
        job.kind, "generator", job.n, inputs.target, inputs.focus, batch=job.batch, dry_run=True
    )
    if inputs.generate is not None:
        return summary
    requests = build_requests(_brief(cfg, job, inputs), job.kind)
    summary.writer, summary.requests = "claude", len(requests)
    summary.usage.input_tokens, summary.usage.output_tokens = estimate_tokens(
        requests, inputs.system, inputs.samples
    )
    summary.cost_usd = (
        batch_cost_usd(summary.usage, cfg.planner) if job.batch else summary.usage.cost_usd(cfg.planner)
    )
    return summary


def _claude_examples(job: DataJob, write: Callable[[int, int], list[Any]], admit_rows: Callable) -> Admission:
    """Admitted examples from Claude (`write(n, attempt)` returns the rows written for `n`). Without
    --batch, what drops left short of `--n` is asked for again (ATTEMPTS rounds of requests at
    most), until a round adds nothing new."""
    total = Admission()
    for attempt in range(1 if job.batch else ATTEMPTS):
        wanted = job.n - len(total.kept)
        try:
            rows = write(wanted, attempt)
        except (ConfigError, RuntimeFault) as exc:
            if attempt == 0:
                raise
            log.warning("write_examples: asking again failed (%s); keeping what was admitted", exc)
            break
        admission = admit_rows(rows, wanted)
        total.extend(admission)
        if len(total.kept) >= job.n or not admission.kept:
            break
    return total


def _claude_rows(
    cfg: ForgeConfig,
    project: Project,
    job: DataJob,
    inputs: _Inputs,
    summary: DataSummary,
    run: Any,
    *,
    n: int,
    attempt: int = 0,
) -> list[Any]:
    """The rows Claude writes for `n` examples; raise ConfigError when Claude can't be used,
    RuntimeFault when every request failed."""
    brief = _brief(cfg, job, inputs, n if attempt else None)
    requests = build_requests(brief, job.kind if attempt == 0 else f"{job.kind}-again{attempt}")
    system = inputs.system
    summary.requests += len(requests)
    client = make_client(cfg.planner)

    def submitted(batch_id: str) -> None:
        summary.batch_id = batch_id
        run.set_tags({"forge.batch_id": batch_id})
        console.print(
            f"Message Batch {batch_id}: {len(requests)} request(s); waiting (at most {job.batch_wait_s:g}s)"
        )

    try:
        if job.batch:
            written = send_batch(
                client,
                cfg.planner,
                system,
                requests,
                summary.usage,
                max_wait_s=job.batch_wait_s,
                on_submit=submitted,
            )
        else:
            short = f" for the {n} still short after drops" if attempt else ""
            console.print(f"write_examples: {len(requests)} request(s){short} to {cfg.planner.writer_model}")
            written = send_concurrent(client, cfg.planner, system, requests, summary.usage)
    except ClaudeUnavailable as exc:
        raise ConfigError(
            f"Claude cannot be used ({exc}); check ANTHROPIC_API_KEY or pass planner=offline"
        ) from exc
    except ClaudeRequestFailed as exc:
        raise RuntimeFault(f"write_examples: {exc}") from exc
    summary.failed_requests += len(written.failed)
    _fail_if_nothing(written, len(requests))
    return written.rows


def _fail_if_nothing(written: Written, total: int) -> None:
    if written.failed and len(written.failed) == total:
        first = next(iter(written.failed.values()))
        raise RuntimeFault(f"write_examples: all {total} request(s) failed; the first: {first}")


def _seed(inputs: _Inputs, kind: str, attempt: int) -> int:
    """A generator seed that changes with canonical, so a second run does not repeat the first."""
    text = f"{inputs.canonical.manifest.sha256}:{kind}:{attempt}"
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)


def _offline_examples(job: DataJob, inputs: _Inputs, admit_rows: Callable) -> Admission:
    """Admitted examples from generator.py, asking again (up to ATTEMPTS calls) to make up for drops."""
    path = inputs.generator_path
    total = Admission()
    for attempt in range(ATTEMPTS):
        wanted = job.n - len(total.kept)
        rows: list[Any] = []
        for focus, n in allocate(wanted, inputs.focus, inputs.failures):
            rows += generate_offline(
                inputs.generate, path, n, seed=_seed(inputs, job.kind, attempt), focus=focus
            )
        admission = admit_rows(rows, wanted)
        refuse_garbage(path, rows, admission)
        total.extend(admission)
        if len(total.kept) >= job.n:
            break
    return total


def _write(
    cfg: ForgeConfig, project: Project, job: DataJob, inputs: _Inputs, kept: list[Example]
) -> ExampleTable:
    """Write the admitted examples atomically; return the dataset version now at the target (its
    cached table: for canonical, the lines just appended are the only ones read)."""
    if job.output is not None:
        text = "".join(json.dumps(e.to_record(), ensure_ascii=False) + "\n" for e in kept)
        atomic_write_text(inputs.target, text)
    elif kept:
        append_examples(inputs.canonical_path, kept)
    return load_table(inputs.target, project.output, split_seed=cfg.task.split_seed)


def _start_tags(job: DataJob, writer: str, inputs: _Inputs) -> dict[str, Any]:
    tags = {"forge.kind": job.kind, "forge.data.writer": writer, "forge.data.target": str(inputs.target)}
    if job.kind == "patch":
        tags["forge.patch.description"] = (job.description or "")[:4000]
    if job.kind == "augment":
        tags["forge.data.focus"] = ",".join(inputs.focus)
    return tags


def run_data_job(
    cfg: ForgeConfig, job: DataJob, *, on_run: Callable[[str], None] | None = None
) -> DataSummary:
    """Run one generate/patch/augment job (see the module docstring); `on_run` gets the MLflow run id."""
    project = Project(Path(cfg.project_dir))
    inputs = prepare(cfg, project, job)
    if job.dry_run:
        return estimate(cfg, project, job, inputs)
    writer = "generator" if inputs.generate is not None else "claude"
    summary = DataSummary(job.kind, writer, job.n, inputs.target, inputs.focus, batch=job.batch)
    scorer = make_scorer(cfg.eval, project.root, probe=inputs.gold_examples)  # fails before the MLflow run
    meta: dict[str, Any] = {"source": job.kind}
    if inputs.focus:
        meta["focus"] = ",".join(inputs.focus)

    def admit_rows(rows: list[Any], limit: int) -> Admission:
        return admit(
            rows,
            scorer=scorer,
            known=inputs.known,
            gold=inputs.gold,
            meta=meta,
            conventions=inputs.conventions,
            limit=limit,
        )

    lock = ProjectLock(project) if job.output is None else nullcontext()  # canonical: one writer at a time
    with lock, Tracker(cfg, project).start_run(job.kind, _start_tags(job, writer, inputs)) as run:
        summary.run_id = run.run_id
        if on_run is not None:
            on_run(run.run_id)
        run.log_params(
            {
                "data.requested": job.n,
                "data.per_request": job.per_request,
                "data.batch": job.batch,
                "data.writer": writer,
                "data.focus": ",".join(inputs.focus),
                "data.output": job.output,
            }
        )
        try:
            if inputs.generate is None:
                admission = _claude_examples(
                    job,
                    lambda n, attempt: _claude_rows(
                        cfg, project, job, inputs, summary, run, n=n, attempt=attempt
                    ),
                    admit_rows,
                )
            else:
                admission = _offline_examples(job, inputs, admit_rows)
        finally:
            if writer == "claude":
                _log_usage(run, cfg, job, summary)
        kept, dropped = admission.kept, admission.dropped
        dataset = _write(cfg, project, job, inputs, kept)
        summary.added, summary.dropped, summary.mended = len(kept), dict(dropped), dict(admission.mended)
        summary.by_category = dict(Counter(e.category or "uncategorized" for e in kept))
        summary.dataset_size = len(dataset)
        run.log_metrics(
            {"data/requested": float(job.n), "data/added": float(len(kept))}
            | {"data/dropped": float(sum(dropped.values()))}
            | count_metrics("data/dropped", dropped)
            | count_metrics("data/mended", admission.mended)
            | count_metrics("data/added", summary.by_category)
        )
        name = "canonical" if job.output is None else inputs.target.stem
        summary.dataset_hash = log_data_version(run, cfg, name=name, table=dataset, path=inputs.target)
    return summary


def _log_usage(run: Any, cfg: ForgeConfig, job: DataJob, summary: DataSummary) -> None:
    """Claude's token usage and cost (halved for a Message Batch) as `generate/...` metrics."""
    summary.cost_usd = (
        batch_cost_usd(summary.usage, cfg.planner) if job.batch else summary.usage.cost_usd(cfg.planner)
    )
    metrics = summary.usage.metrics(cfg.planner, prefix="generate")
    metrics["generate/cost_usd"] = summary.cost_usd
    metrics["generate/requests_failed"] = float(summary.failed_requests)
    run.log_metrics(metrics)
