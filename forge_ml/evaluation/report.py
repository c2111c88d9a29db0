"""Score generations and write the eval report files."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from forge_ml.config import EvalConfig
from forge_ml.data.examples import Example, metric_name
from forge_ml.evaluation.scorers import Scorer, category_of
from forge_ml.fileio import atomic_write_json, atomic_write_jsonl


@dataclass
class ScoredExample:
    input: str
    expected: str
    actual: str
    category: str
    score: float
    forbidden: str | None = None  # the forbidden-output pattern it matched
    ended: bool = True  # False: generation stopped at eval.max_new_tokens before the answer ended


@dataclass
class EvalReport:
    """accuracy = mean score; correct = examples scoring 1; failures = the rest."""

    accuracy: float
    correct: int
    total: int
    failure_count: int
    per_category: dict[str, dict[str, float]]
    forbidden_count: int = 0
    unfinished: int = 0  # outputs that ran out of eval.max_new_tokens before they ended
    items: list[ScoredExample] = field(default_factory=list, repr=False)

    @property
    def failures(self) -> list[ScoredExample]:
        return [item for item in self.items if item.score < 1.0]

    @property
    def tally(self) -> str:
        """`13/24`; with partial credit (a scorer's scores between 0 and 1, when the accuracy is not
        correct/total) `mean score; 13/24 scored 1`, so the figure beside it does not read as a slip."""
        whole = f"{self.correct}/{self.total}"
        if self.total and abs(self.accuracy * self.total - self.correct) > 1e-9:
            return f"mean score; {whole} scored 1"
        return whole

    def metrics(self, prefix: str) -> dict[str, float]:
        """Return the report as MLflow metrics: `<prefix>/accuracy`, `/failures`, `/unfinished`,
        `/accuracy/<category>`."""
        metrics = {
            f"{prefix}/accuracy": self.accuracy,
            f"{prefix}/failures": float(self.failure_count),
            f"{prefix}/unfinished": float(self.unfinished),
        }
        names = self.metric_names
        metrics |= {
            f"{prefix}/accuracy/{names.get(name, name)}": stats["accuracy"]
            for name, stats in self.per_category.items()
        }
        return metrics

    @property
    def metric_names(self) -> dict[str, str]:
        """Categories (from the expected answers' `eval.json_field`) renamed to be MLflow metric names.

        Only the renamed ones; written into eval_results.json as `metric_names`. Two categories
        that would share a name get `_2`, `_3`… suffixes.
        """
        renamed, taken = {}, {n for n in self.per_category if metric_name(n) == n}
        for name in sorted(self.per_category):
            safe = metric_name(name)
            if safe == name:
                continue
            base, n = safe, 2
            while safe in taken:
                safe, n = f"{base[:60]}_{n}", n + 1
            renamed[name] = safe
            taken.add(safe)
        return renamed

    def summary(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("items")
        if self.metric_names:
            data["metric_names"] = self.metric_names
        return data


def score_outputs(
    examples: list[Example],
    outputs: list[str],
    scorer: Scorer,
    cfg: EvalConfig,
    *,
    ended: Sequence[bool] | None = None,
) -> EvalReport:
    """Return the report of `outputs` against the examples' expected answers.

    `ended`: whether each output ended, rather than ran out of `max_new_tokens` (counted as `unfinished`).
    """
    forbidden = [re.compile(p) for p in cfg.forbidden_outputs]
    items = []
    ends = [True] * len(outputs) if ended is None else list(ended)
    for ex, actual, done in zip(examples, outputs, ends, strict=True):
        hit = next((p.pattern for p in forbidden if p.search(actual)), None)
        score = 0.0 if hit else scorer(ex.assistant, actual)
        category = category_of(ex.meta, ex.assistant, cfg)
        items.append(ScoredExample(ex.user, ex.assistant, actual, category, score, hit, done))
    buckets: dict[str, list[float]] = defaultdict(list)
    for item in items:
        buckets[item.category].append(item.score)
    per_category = {
        name: {"accuracy": sum(s) / len(s), "correct": sum(1 for x in s if x >= 1.0), "total": len(s)}
        for name, s in sorted(buckets.items())
    }
    correct = sum(1 for item in items if item.score >= 1.0)
    total = len(items)
    return EvalReport(
        accuracy=sum(item.score for item in items) / total if total else 0.0,
        correct=correct,
        total=total,
        failure_count=total - correct,
        per_category=per_category,
        forbidden_count=sum(1 for item in items if item.forbidden),
        unfinished=sum(1 for item in items if not item.ended),
        items=items,
    )


def write_report(
    report: EvalReport, output_dir: Path, extra: dict[str, Any] | None = None
) -> tuple[Path, Path]:
    """Write eval_results.json and eval_failures.jsonl into `output_dir`; return both paths."""
    results = output_dir / "eval_results.json"
    failures = output_dir / "eval_failures.jsonl"
    atomic_write_json(results, {**report.summary(), **(extra or {})})
    atomic_write_jsonl(
        failures,
        (
            {
                "input": f.input,
                "expected": f.expected,
                "actual": f.actual,
                "category": f.category,
                "score": f.score,
            }
            | ({"forbidden": f.forbidden} if f.forbidden else {})
            | ({} if f.ended else {"unfinished": True})
            for f in report.failures
        ),
    )
    return results, failures
