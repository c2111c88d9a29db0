"""`forge-ml audit`: review every canonical example, report the problems, optionally fix them in place.

Rules run always: an answer the scorer cannot parse, an answer not in the form of the user's
own answers (gold, seed: `augment.conventions`; the fix is that form: the JSON alone, respaced, or
the label's spelling), a duplicate (same normalised user text and the same answer), the same input
with conflicting answers, a training input that matches a gold input. With Claude
(planner.backend auto + ANTHROPIC_API_KEY, or claude) every example is also reviewed through the
forced tool `review_examples`, in batches sent concurrently, the examples passed as quoted data.

`--fix` rewrites the flagged examples at or above `--min-severity`: duplicates are dropped (the
first stays), and Claude's suggested fixes replace the answer (or the user text and the answer).
A fix's answer is brought into the project's form first (a wrapped JSON answer is cut to its
JSON, respaced, or a label respelt), and it is applied only when the new answer passes the
scorer's parse, the new user text is not a gold input and duplicates no other example; the
rewritten file must read back and pass the gold-overlap check. The previous canonical.jsonl is logged to the audit's MLflow run (artifact +
dataset input, context "previous") before the file is replaced atomically.
"""

from __future__ import annotations

import json
import logging
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forge_ml.augment.conventions import Conventions, bare_json
from forge_ml.config import ForgeConfig
from forge_ml.data.examples import Example, dataset_hash, normalize_text, parse_record, read_examples
from forge_ml.data.project_data import check_gold_overlap, read_gold
from forge_ml.errors import ForgeError, InputError, RuntimeFault
from forge_ml.evaluation.scorers import Scorer, make_scorer, parse_json
from forge_ml.fileio import atomic_write_text
from forge_ml.jobs.audit_findings import CLAUDE, SEVERITIES, Finding, claude_findings
from forge_ml.llm import ClaudeUnavailable, Usage
from forge_ml.project import Project
from forge_ml.tracking import Tracker

log = logging.getLogger(__name__)
RULES = "rules"


@dataclass
class FixOutcome:
    fixed: list[int] = field(default_factory=list)  # indices rewritten
    dropped: list[int] = field(default_factory=list)  # indices removed
    refused: list[dict[str, Any]] = field(default_factory=list)  # {index, reason}
    examples: list[Example] = field(default_factory=list)  # the new file's examples

    @property
    def changed(self) -> bool:
        return bool(self.fixed or self.dropped)


@dataclass
class AuditSummary:
    run_id: str
    path: Path
    reviewer: str
    examples: int
    findings: list[Finding]  # every finding, sorted by index
    shown: list[Finding]  # those at or above min_severity
    previous_hash: str
    dataset_hash: str  # after the fixes (the same when nothing changed)
    fix: FixOutcome | None = None  # the fixes planned (with --fix)
    fix_blocked: str | None = None  # why the planned fixes were not written
    failed_batches: int = 0
    fallback_reason: str | None = None
    usage: Usage = field(default_factory=Usage)

    @property
    def applied(self) -> FixOutcome:
        """The fixes written to the file (none without --fix, or when the rewrite was refused)."""
        return self.fix if self.fix is not None and self.fix_blocked is None else FixOutcome()

    @property
    def counts(self) -> dict[str, int]:
        counted = Counter(f.severity for f in self.findings)
        return {severity: counted.get(severity, 0) for severity in SEVERITIES}


def at_least(severity: str, minimum: str) -> bool:
    return SEVERITIES.index(severity) <= SEVERITIES.index(minimum)


# ---- rules --------------------------------------------------------------------------------------------


def _same_answer(a: str, b: str) -> bool:
    if a.strip() == b.strip():
        return True
    try:
        return parse_json(a) == parse_json(b)
    except ValueError:
        return False


def parses(scorer: Scorer, answer: str) -> bool:
    """Whether the scorer accepts `answer` as its own expected output (scorer(answer, answer) == 1)."""
    try:
        return scorer(answer, answer) >= 1.0
    except ForgeError:
        return False


def _form_finding(i: int, answer: str, conventions: Conventions) -> Finding | None:
    """A finding when the answer is not in the form of the user's own answers (gold, seed): bare
    JSON, spaced like theirs, or their label's spelling."""
    fixed = conventions.answer(answer)
    if fixed == answer.strip():
        return None
    if not conventions.json_answers and fixed is None:
        labels = ", ".join(sorted(conventions.labels.values()))
        issue = f"the answer {answer.strip()!r} is none of gold's and the seed's labels ({labels})"
        return Finding(i, "error", issue, check="form")
    if not conventions.json_answers:
        issue = f"the answer is spelt unlike the label {fixed!r} of gold and the seed (--fix respells it)"
        return Finding(i, "warning", issue, suggested_fix=fixed, check="form")
    if fixed is None:
        return Finding(
            i,
            "error",
            "the answer holds no JSON document; gold's and the seed's answers are bare JSON",
            check="form",
        )
    if bare_json(answer):
        issue = "the answer's JSON is spaced unlike gold's and the seed's (--fix respaces it)"
        return Finding(i, "info", issue, suggested_fix=fixed, check="form")
    issue = "the answer wraps its JSON in text; gold's and the seed's answers are bare JSON (--fix keeps the JSON)"
    return Finding(i, "warning", issue, suggested_fix=fixed, check="form")


def rule_findings(
    examples: list[Example],
    gold: list[Example],
    scorer: Scorer,
    scorer_name: str,
    conventions: Conventions | None = None,
) -> list[Finding]:
    """Findings no model is needed for: format, form, duplicates, conflicting answers, gold overlap."""
    gold_keys = {ex.key for ex in gold}
    first: dict[str, int] = {}
    findings = []
    for i, ex in enumerate(examples):
        if not parses(scorer, ex.assistant):
            findings.append(
                Finding(
                    i,
                    "error",
                    f"the answer fails the scorer's parse (eval.scorer={scorer_name})",
                    check="format",
                )
            )
        elif conventions is not None and (form := _form_finding(i, ex.assistant, conventions)):
            findings.append(form)
        if ex.key in gold_keys:
            findings.append(
                Finding(
                    i,
                    "error",
                    "the user text matches a gold input; gold never enters training",
                    check="gold_overlap",
                )
            )
        j = first.setdefault(ex.key, i)
        if j == i:
            continue
        if _same_answer(examples[j].assistant, ex.assistant):
            issue = f"duplicate of example {j} (same input, same answer); --fix drops it"
            findings.append(Finding(i, "warning", issue, check="duplicate", drop=True))
        else:
            issue = f"the same input as example {j} with a different answer ({examples[j].assistant[:60]!r})"
            findings.append(Finding(i, "error", issue, check="conflict"))
    return findings


# ---- Claude -------------------------------------------------------------------------------------------


# ---- fixes --------------------------------------------------------------------------------------------


def _fixed_example(
    finding: Finding,
    ex: Example,
    scorer: Scorer,
    scorer_name: str,
    gold_keys: set[str],
    conventions: Conventions,
) -> tuple[Example | None, str]:
    """Return (the fixed example, "") or (None, why the fix is refused)."""
    fix = finding.suggested_fix
    if isinstance(fix, dict) and isinstance(fix.get("assistant"), (dict, list)):  # JSON as a value
        fix = {**fix, "assistant": json.dumps(fix["assistant"], ensure_ascii=False)}
    elif conventions.json_answers and isinstance(fix, (dict, list)) and "assistant" not in fix:
        fix = json.dumps(fix, ensure_ascii=False)  # the answer itself, as a value
    if isinstance(fix, str):
        user, answer = ex.user, fix
    elif (
        isinstance(fix, dict)
        and isinstance(fix.get("assistant"), str)
        and isinstance(fix.get("user", ""), str)
    ):
        user, answer = fix.get("user") or ex.user, fix["assistant"]
    else:
        return None, "suggested_fix is neither an answer string nor an object {user, assistant}"
    user, answer = user.strip(), answer.strip()
    if not user or not answer:
        return None, "the fix leaves an empty turn"
    in_form = conventions.answer(
        answer
    )  # a fix written in a code fence, spaced otherwise, or a label respelt
    if conventions.labels and in_form is None:
        return None, "the fixed answer is none of gold's and the seed's labels"
    answer = in_form or answer
    if not parses(scorer, answer):
        return None, f"the fixed answer fails the scorer's parse (eval.scorer={scorer_name})"
    if normalize_text(user) in gold_keys:
        return None, "the fixed user text matches a gold input"
    meta = {**ex.meta, "audit_fixed": True}
    return Example(user=user, assistant=answer, meta=meta, origin=ex.origin), ""


def plan_fixes(
    examples: list[Example],
    findings: list[Finding],
    scorer: Scorer,
    scorer_name: str,
    gold: list[Example],
    conventions: Conventions | None = None,
) -> FixOutcome:
    """Apply the findings' fixes to a copy of `examples` (most severe first, one fix per example)."""
    gold_keys = {ex.key for ex in gold}
    outcome = FixOutcome()
    new: dict[int, Example] = {}
    for finding in sorted(findings, key=lambda f: (f.index, SEVERITIES.index(f.severity))):
        i = finding.index
        if finding.drop:
            if i not in outcome.dropped:
                outcome.dropped.append(i)
            continue
        if finding.suggested_fix is None:
            continue
        if i in new:
            outcome.refused.append({"index": i, "reason": "another fix of this example was applied"})
            continue
        fixed, reason = _fixed_example(
            finding, examples[i], scorer, scorer_name, gold_keys, conventions or Conventions()
        )
        if fixed is not None and (fixed.user, fixed.assistant) == (examples[i].user, examples[i].assistant):
            continue  # the fix is what the file already holds
        if fixed is None:
            outcome.refused.append({"index": i, "reason": reason})
            continue
        new[i] = fixed
    for i in list(new):
        if i in outcome.dropped:
            del new[i]
            outcome.refused.append({"index": i, "reason": "the example is dropped as a duplicate"})
    keys = Counter(new.get(i, ex).key for i, ex in enumerate(examples) if i not in outcome.dropped)
    for i, fixed in list(new.items()):
        if fixed.key != examples[i].key and keys[fixed.key] > 1:
            del new[i]
            keys[fixed.key] -= 1
            outcome.refused.append({"index": i, "reason": "the fixed user text duplicates another example"})
    outcome.fixed = sorted(new)
    outcome.examples = [new.get(i, ex) for i, ex in enumerate(examples) if i not in outcome.dropped]
    return outcome


def _rewrite(path: Path, original: bytes, examples: list[Example]) -> None:
    """Replace `path` with `examples` atomically, after reading the new file back; refuse if `path` changed."""
    text = "".join(json.dumps(ex.to_record(), ensure_ascii=False) + "\n" for ex in examples)

    def verify(tmp: Path) -> None:
        back = read_examples(tmp)
        if [(e.user, e.assistant, e.meta) for e in back] != [(e.user, e.assistant, e.meta) for e in examples]:
            raise RuntimeFault(f"{path}: the rewritten file does not read back as written; left unchanged")
        if path.read_bytes() != original:
            raise RuntimeFault(f"{path}: changed while the audit ran; left unchanged, run the audit again")

    atomic_write_text(path, text, verify=verify)


# ---- the audit run ------------------------------------------------------------------------------------


def run_audit(
    cfg: ForgeConfig, *, claude: bool, fix: bool, min_severity: str, batch_size: int
) -> AuditSummary:
    """Audit canonical.jsonl, record one MLflow run (forge.kind=audit); with `fix`, rewrite it.

    `claude`: review with Claude too (a client is made from `cfg.planner`). When the fixed file
    would still hold gold inputs, nothing is written and `fix_blocked` says why.
    """
    project = Project(Path(cfg.project_dir))
    path, original, examples = _audited_file(project, cfg)
    gold = read_gold(project, cfg.task)
    scorer = make_scorer(cfg.eval, project.root, probe=gold)  # raising fails here, not as a finding on each
    seed = read_examples(project.resolve(cfg.task.seed_path), required=False)
    conventions = Conventions.of([*gold, *seed])
    digest = dataset_hash(examples)
    summary = AuditSummary("", path, CLAUDE if claude else RULES, len(examples), [], [], digest, digest)

    tags = {
        "forge.kind": "audit",
        "forge.audit.min_severity": min_severity,
        "forge.audit.fix": str(fix).lower(),
    }
    with Tracker(cfg, project).start_run("audit", tags) as run:
        summary.run_id = run.run_id
        findings = rule_findings(examples, gold, scorer, cfg.eval.scorer, conventions)
        if claude:
            try:
                found, summary.failed_batches = claude_findings(
                    cfg, project, examples, batch_size, summary.usage
                )
                findings += found
            except ClaudeUnavailable as exc:
                summary.reviewer = RULES
                summary.fallback_reason = f"Claude unavailable ({exc}); rules only"
        for finding in findings:
            finding.line = examples[finding.index].origin
        summary.findings = sorted(findings, key=lambda f: (f.index, SEVERITIES.index(f.severity)))
        summary.shown = [f for f in summary.findings if at_least(f.severity, min_severity)]
        if fix:
            summary.fix = plan_fixes(examples, summary.shown, scorer, cfg.eval.scorer, gold, conventions)
            if summary.fix.changed:
                summary.fix_blocked = _blocked(summary.fix.examples, gold)
            if summary.fix.changed and summary.fix_blocked is None:
                _apply(run, path, original, examples, summary)
        _record(run, cfg, summary)
    return summary


def _audited_file(project: Project, cfg: ForgeConfig) -> tuple[Path, bytes, list[Example]]:
    """canonical.jsonl, its bytes and its examples; before the first run has merged the seed into
    it (a new project), the seed's. The bytes are read first: a fix is written only over them."""
    canonical = project.resolve(cfg.task.canonical_path)
    seed = project.resolve(cfg.task.seed_path)
    for path in (canonical, seed):
        original = path.read_bytes() if path.is_file() else b""
        examples = read_examples(path, required=False)
        if examples:
            return path, original, examples
    raise InputError(
        f"{canonical}: no examples to audit (task.canonical_path), and none in the seed "
        f"{seed} (task.seed_path) either"
    )


def _blocked(new: list[Example], gold: list[Example]) -> str | None:
    """Why the fixed data must not be written (it fails the gold-overlap check), or None."""
    try:
        check_gold_overlap(new, gold)
    except InputError as exc:
        return str(exc)
    return None


def _apply(run: Any, path: Path, original: bytes, examples: list[Example], summary: AuditSummary) -> None:
    """Log the previous file as a dataset version (artifact + dataset input), then replace the file."""
    new = summary.fix.examples
    for number, ex in enumerate(new, start=1):
        parse_record(ex.to_record(), f"{path} (fixed, line {number})")
    with tempfile.TemporaryDirectory(prefix="forge-audit-") as tmp:
        previous = Path(tmp) / path.name
        previous.write_bytes(original)
        run.log_artifact(previous, "dataset/previous")
    run.log_dataset("previous", examples, summary.previous_hash, path, "previous")
    _rewrite(path, original, new)
    summary.dataset_hash = dataset_hash(new)
    run.set_tags(
        {"forge.audit.previous_hash": summary.previous_hash, "forge.audit.new_hash": summary.dataset_hash}
    )


def _record(run: Any, cfg: ForgeConfig, summary: AuditSummary) -> None:
    fix = summary.applied
    refused = summary.fix.refused if summary.fix is not None else []
    run.set_tags(
        {
            "forge.audit.reviewer": summary.reviewer,
            "forge.audit.fallback_reason": summary.fallback_reason,
            "forge.audit.fix_blocked": summary.fix_blocked and summary.fix_blocked[:4000],
            "forge.data.canonical_hash": summary.dataset_hash,
        }
    )
    metrics = {f"audit/findings/{severity}": float(n) for severity, n in summary.counts.items()}
    metrics |= {
        "audit/examples": float(summary.examples),
        "audit/shown": float(len(summary.shown)),
        "audit/fixed": float(len(fix.fixed)),
        "audit/dropped": float(len(fix.dropped)),
        "audit/fix_refused": float(len(refused)),
        "audit/failed_batches": float(summary.failed_batches),
    }
    if summary.usage.requests:
        metrics |= summary.usage.metrics(cfg.planner, prefix="audit")
    run.log_metrics(metrics)
    with tempfile.TemporaryDirectory(prefix="forge-audit-") as tmp:
        report = Path(tmp) / "findings.jsonl"
        rows = [f.to_dict() for f in summary.findings] + [{"refused_fix": r} for r in refused]
        report.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        run.log_artifact(report, "audit")
