"""Admission of generated examples: well-formed, answer the scorer accepts, new, and never a gold input.

Before the checks, a row is brought into the project's own form. An answer given as a JSON value
(an object where the tool asks for a string) is written as JSON text. Then `Conventions`: a
category spelt another way ("Goto Waypoint") takes the project's spelling ("goto_waypoint"), and
where every answer the user wrote (gold, seed) is a bare JSON document, an answer that wraps one
in a code fence or a sentence is cut down to the document, and one without any is dropped; where
they are all written on one line with the same spacing, the answer is written that way too (an
exact scorer compares text). A writer (Claude most of all) does each now and then; trained on as
written, the model would learn to wrap its answers too.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from forge_ml.data.examples import Example, normalize_text, parse_record, safe_category
from forge_ml.errors import ForgeError, InputError
from forge_ml.evaluation.scorers import Scorer

MALFORMED = "malformed"  # drop reasons, as reported in `dropped`
UNPARSED = "answer fails the scorer's parse"
BEYOND = "beyond the number asked for"
NO_DOCUMENT = "answer holds no JSON document"  # where every answer of the project is one
UNWRAPPED = "answer unwrapped to its JSON"  # mends, as reported in `mended`
RESPELT = "category respelt"
SERIALISED = "answer given as a JSON value, written as text"
RESPACED = "answer spaced like the project's JSON"

JsonSpacing = Literal["spaced", "compact"]  # json.dumps' default separators (", ", ": "), or (",", ":")
_SEPARATORS_OF: dict[str, tuple[str, str]] = {"spaced": (", ", ": "), "compact": (",", ":")}

_FENCE = re.compile(r"```[A-Za-z0-9_-]*[ \t]*\n(.*?)\n?```", re.DOTALL)
_SEPARATORS = re.compile(r"[\s_-]+")


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


def fold_category(name: str) -> str:
    """The form two spellings of one category share: case, spaces, `-` and `_` aside."""
    return _SEPARATORS.sub("_", name.strip()).casefold()


def bare_json(text: str) -> bool:
    """Whether `text` is one JSON object or array and nothing else (whitespace aside)."""
    try:
        return isinstance(json.loads(text), (dict, list))
    except ValueError:
        return False


def unwrap_json(text: str) -> str | None:
    """The JSON object or array `text` wraps (in a code fence, or after a sentence), exactly as
    written there; None when there is none."""
    body = text.strip()
    fenced = _FENCE.search(body)
    if fenced and bare_json(fenced.group(1)):
        return fenced.group(1).strip()
    starts = [i for i in (body.find("{"), body.find("[")) if i >= 0]
    if not starts:
        return None
    start = min(starts)
    try:
        value, end = json.JSONDecoder().raw_decode(body[start:])
    except ValueError:
        return None
    return body[start : start + end] if isinstance(value, (dict, list)) else None


def spaced(text: str, spacing: JsonSpacing) -> str:
    """The JSON document `text` written on one line with `spacing`, its keys in their order."""
    return json.dumps(json.loads(text), ensure_ascii=False, separators=_SEPARATORS_OF[spacing])


def spacing_of(answers: list[str]) -> JsonSpacing | None:
    """The one spacing every answer (a bare JSON document each) is written in, or None."""
    for spacing in _SEPARATORS_OF:
        if answers and all(a.strip() == spaced(a, spacing) for a in answers):
            return spacing  # type: ignore[return-value]
    return None


@dataclass(frozen=True)
class Conventions:
    """The form of the project's own examples, which generated rows are brought into."""

    categories: dict[str, str] = field(default_factory=dict)  # folded name -> the project's spelling
    json_answers: bool = False  # every answer the project has is a bare JSON document
    json_spacing: JsonSpacing | None = None  # and all are written on one line with this spacing

    @classmethod
    def of(cls, reference: Iterable[Example], categories: Iterable[str] = ()) -> Conventions:
        """The conventions of the examples the user wrote (`reference`: gold, then seed; gold's
        spelling wins), with further category names (canonical's) that keep their own spelling.

        Only the reference decides the answers' form: canonical may already hold wrapped answers."""
        spellings: dict[str, str] = {}
        answers: list[str] = []
        for example in reference:
            if example.category:
                spellings.setdefault(fold_category(example.category), example.category)
            answers.append(example.assistant)
        for name in categories:
            spellings.setdefault(fold_category(name), name)
        if not answers or not all(bare_json(a) for a in answers):
            return cls(spellings)
        return cls(spellings, json_answers=True, json_spacing=spacing_of(answers))

    def category(self, name: str) -> str:
        """The project's spelling of `name`, or `name` when the project has no such category."""
        return self.categories.get(fold_category(name), name)

    def answer(self, text: str) -> str | None:
        """`text` in the form of the project's answers (unwrapped, spaced like them); None when the
        project's answers are JSON and `text` holds none."""
        if not self.json_answers:
            return text
        inner = text.strip() if bare_json(text) else unwrap_json(text)
        if inner is None or self.json_spacing is None:
            return inner
        return spaced(inner, self.json_spacing)

    def mend(self, example: Example, mended: Counter) -> str | None:
        """Bring `example` into the project's form in place, counting each change in `mended`;
        return why it cannot be (a drop reason), or None."""
        category = example.category
        if category and self.category(category) != category:
            example.meta = {**example.meta, "category": self.category(category)}
            mended[RESPELT] += 1
        if self.json_answers and not bare_json(example.assistant):
            inner = unwrap_json(example.assistant)
            if inner is None:
                return NO_DOCUMENT
            example.assistant = inner
            mended[UNWRAPPED] += 1
        if self.json_spacing is not None and example.assistant != spaced(
            example.assistant, self.json_spacing
        ):
            example.assistant = spaced(
                example.assistant, self.json_spacing
            )  # an exact scorer sees the same text
            mended[RESPACED] += 1
        return None


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
