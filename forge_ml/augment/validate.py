"""Admission of generated examples: well-formed, answer the scorer accepts, new, and never a gold input.

Before the checks, a row is brought into the project's own form: an answer given as a JSON value
(an object where the tool asks for a string) is written as JSON text, then `conventions.Conventions`
mends the rest (category spelling, wrapped or respaced JSON, label spelling) or says why it cannot.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from forge_ml.augment.conventions import NO_DOCUMENT, Conventions
from forge_ml.data.examples import Example, normalize_text, parse_record, safe_category
from forge_ml.errors import ForgeError, InputError
from forge_ml.evaluation.scorers import Scorer

MALFORMED = "malformed"  # drop reasons, as reported in `dropped`
UNPARSED = "answer fails the scorer's parse"
BEYOND = "beyond the number asked for"
SERIALISED = "answer given as a JSON value, written as text"  # a mend, as reported in `mended`


@dataclass
class Admission:
    kept: list[Example] = field(default_factory=list)
    dropped: Counter = field(default_factory=Counter)  # reason -> count
    mended: Counter = field(default_factory=Counter)  # reason -> count, of the rows kept

    def extend(self, other: Admission) -> None:
        """Add what a further call admitted."""
        self.kept += other.kept
        self.dropped += other.dropped
        self.mended += other.mended


def as_example(row: Any) -> Example | None:
    """Return the example in a generated row: `{user, assistant, category}` or a JSONL record
    (messages, or TRL's prompt and completion)."""
    if not isinstance(row, dict):
        return None
    if "prompt" in row or "completion" in row:
        try:
            parsed = parse_record(row, "a generated row")
        except InputError:
            return None
        return Example(user=parsed.user.strip(), assistant=parsed.assistant.strip(), meta=parsed.meta)
    if "messages" in row:
        turns = {m.get("role"): m.get("content") for m in row.get("messages") or [] if isinstance(m, dict)}
        user, assistant = turns.get("user"), turns.get("assistant")
        meta = dict(row.get("meta") or {}) if isinstance(row.get("meta") or {}, dict) else {}
    else:
        user, assistant = row.get("user"), row.get("assistant")
        meta = {"category": row["category"]} if row.get("category") not in (None, "") else {}
    if not isinstance(user, str) or not isinstance(assistant, str):
        return None
    return Example(user=user.strip(), assistant=assistant.strip(), meta=meta)


class KeySet(Protocol):
    """Normalised user texts already present: a set, or `table.KnownKeys` over a cached table's digests."""

    def __contains__(self, key: object) -> bool: ...

    def add(self, key: str) -> None: ...


def admit(
    rows: list[Any],
    *,
    scorer: Scorer,
    known: KeySet,
    gold: set[str],
    meta: dict[str, Any],
    conventions: Conventions | None = None,
    limit: int | None = None,
) -> Admission:
    """Return the rows worth adding (`limit` at most), mended to `conventions` where given; `known`
    (normalised user texts already present) grows as rows are kept."""
    result = Admission()
    for index, row in enumerate(rows):
        if limit is not None and len(result.kept) >= limit:
            result.dropped[BEYOND] += len(rows) - index
            break
        mended: Counter = Counter()
        if isinstance(row, dict) and isinstance(row.get("assistant"), (dict, list)):  # JSON as a value
            row = {**row, "assistant": json.dumps(row["assistant"], ensure_ascii=False)}
            mended[SERIALISED] += 1
        example = as_example(row)
        if example is None:
            result.dropped[MALFORMED] += 1
            continue
        if not example.user or not example.assistant:
            result.dropped["empty turn"] += 1
            continue
        unfit = conventions.mend(example, mended) if conventions is not None else None
        if unfit is not None:
            result.dropped[unfit] += 1
            continue
        if example.category and not safe_category(example.category):  # it becomes MLflow keys
            result.dropped["unsafe category name"] += 1
            continue
        key = normalize_text(example.user)
        if key in gold:
            result.dropped["matches a gold input"] += 1
            continue
        if key in known:
            result.dropped["duplicate"] += 1
            continue
        try:
            accepted = scorer(example.assistant, example.assistant) >= 1.0
        except ForgeError:
            accepted = False
        if not accepted:
            result.dropped[UNPARSED] += 1
            continue
        example.meta = {**example.meta, **meta}
        known.add(key)
        result.kept.append(example)
        result.mended += mended
    return result


def refuse_garbage(path: Path, rows: list[Any], admission: Admission) -> None:
    """Raise InputError naming the generator when it returned rows and not one is usable: none an
    example, or none with an answer the scorer accepts (duplicates and gold matches are not garbage)."""
    if not rows or admission.kept:
        return
    malformed = admission.dropped.get(MALFORMED, 0)
    if malformed == len(rows):
        raise InputError(f"{path}: generate() returned {len(rows)} row(s), none of them an example")
    unparsed = admission.dropped.get(UNPARSED, 0) + admission.dropped.get(NO_DOCUMENT, 0)
    if malformed + unparsed == len(rows):
        raise InputError(
            f"{path}: generate() returned {len(rows)} row(s), none with an answer the scorer accepts "
            f"({unparsed} fail the scorer's parse)"
        )


def failure_counts(failures: list[dict[str, Any]]) -> dict[str, int]:
    """Gold failures per category, most first: all a generator learns of gold (never its text)."""
    counts: Counter = Counter(str(row.get("category") or "uncategorized") for row in failures)
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
