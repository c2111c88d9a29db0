"""The form of the examples a user wrote (gold, seed), which generated and fixed examples are brought into.

A writer (Claude most of all) now and then:
- spells a category another way ("Goto Waypoint", "meteo" for "goto_waypoint", "météo"): it takes
  the project's spelling, so one category stays one in the data and in MLflow;
- wraps a JSON answer in a code fence or a sentence, or encodes it twice: where every answer the
  user wrote is a bare JSON document, the answer is cut down to its document (one with none is
  refused), and where all are written on one line with the same spacing it is written that way
  too (an exact scorer compares text);
- spells a label another way ("Réservation.", "reservation" for "réservation"): where the user's
  answers are a small closed set of labels, an answer that folds to one takes its spelling, and
  one that folds to none ("Feature" where the labels are feat, fix, ...) is refused: gold never
  accepts it, and a model trained on it learns a label the task does not have.
Trained on as written, the model would learn the writer's habits instead of the project's form.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from forge_ml.data.examples import Example

NO_DOCUMENT = "answer holds no JSON document"  # a drop reason, where every answer of the project is one
UNWRAPPED = "answer unwrapped to its JSON"  # mends, as reported in `mended`
RESPACED = "answer spaced like the project's JSON"
RESPELT = "category respelt"
RELABELLED = "answer respelt as the project's label"
OFF_LABEL = "answer is none of the project's labels"  # a drop reason, where the answers are a closed set

MAX_LABELS = 50  # distinct answers a closed label set has at most
MAX_LABEL_CHARS = 64

JsonSpacing = Literal["spaced", "compact"]  # json.dumps' default separators (", ", ": "), or (",", ":")
_SEPARATORS_OF: dict[str, tuple[str, str]] = {"spaced": (", ", ": "), "compact": (",", ":")}

_FENCE = re.compile(r"```[A-Za-z0-9_-]*[ \t]*\n(.*?)\n?```", re.DOTALL)
_SEPARATORS = re.compile(r"[\s_-]+")
_NUMBER = re.compile(r"[-+]?\d[\d,]*(\.\d+)?")
_EDGE_PUNCTUATION = " \t\n.,;:!?\"'`*\u00ab\u00bb\u201c\u201d\u2018\u2019"  # and typographic quotes


def fold(name: str) -> str:
    """The form two spellings of one name share: case, accents, spaces, `-` and `_` aside."""
    bare = "".join(c for c in unicodedata.normalize("NFKD", name) if not unicodedata.combining(c))
    return _SEPARATORS.sub("_", bare.strip()).casefold()


def fold_label(text: str) -> str:
    """`fold`, with the punctuation and quotes a writer puts around a label aside."""
    return fold(text.strip(_EDGE_PUNCTUATION))


def bare_json(text: str) -> bool:
    """Whether `text` is one JSON object or array and nothing else (whitespace aside)."""
    try:
        return isinstance(json.loads(text), (dict, list))
    except ValueError:
        return False


def unwrap_json(text: str) -> str | None:
    """The JSON object or array `text` wraps (in a code fence, after a sentence, or encoded once
    more as a JSON string), exactly as written there; None when there is none."""
    body = text.strip()
    try:
        inner = json.loads(body)
    except ValueError:
        inner = None
    if isinstance(inner, str) and bare_json(inner):  # "{\"cmd\": ...}": the document, encoded twice
        return inner.strip()
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
    for spacing in ("spaced", "compact"):
        if answers and all(a.strip() == spaced(a, spacing) for a in answers):
            return spacing
    return None


def labels_of(answers: list[str]) -> dict[str, str]:
    """The answers as a closed set of labels (folded -> spelling), or {} when they are not one:
    short one-line answers, at most MAX_LABELS distinct, each used twice on average, not all
    numbers (a count or a sum answers with numbers the examples need not all show)."""
    distinct = list(dict.fromkeys(a.strip() for a in answers))
    if (
        not distinct
        or len(distinct) > MAX_LABELS
        or 2 * len(distinct) > len(answers)
        or any(len(a) > MAX_LABEL_CHARS or "\n" in a for a in distinct)
        or all(_NUMBER.fullmatch(a) for a in distinct)
    ):
        return {}
    labels: dict[str, str] = {}
    for label in distinct:
        labels.setdefault(fold_label(label), label)
    return labels


@dataclass(frozen=True)
class Conventions:
    """The form of the project's own examples, which generated rows are brought into."""

    categories: dict[str, str] = field(default_factory=dict)  # folded name -> the project's spelling
    json_answers: bool = False  # every answer the user wrote is a bare JSON document
    json_spacing: JsonSpacing | None = None  # and all are written on one line with this spacing
    labels: dict[str, str] = field(default_factory=dict)  # folded label -> spelling (a closed set)

    @classmethod
    def of(cls, reference: Iterable[Example], categories: Iterable[str] = ()) -> Conventions:
        """The conventions of the examples the user wrote (`reference`: gold, then seed; gold's
        spelling wins), with further category names (canonical's) that keep their own spelling.

        Only the reference decides the answers' form: canonical may already hold wrapped answers."""
        spellings: dict[str, str] = {}
        answers: list[str] = []
        for example in reference:
            if example.category:
                spellings.setdefault(fold(example.category), example.category)
            answers.append(example.assistant)
        for name in categories:
            spellings.setdefault(fold(name), name)
        if not answers or not all(bare_json(a) for a in answers):
            return cls(spellings, labels=labels_of(answers))
        return cls(spellings, json_answers=True, json_spacing=spacing_of(answers))

    def category(self, name: str) -> str:
        """The project's spelling of `name`, or `name` when the project has no such category."""
        return self.categories.get(fold(name), name)

    def answer(self, text: str) -> str | None:
        """`text` in the form of the project's answers; None when the project's answers are JSON
        and `text` holds none, or a closed set of labels and `text` is none of them."""
        example = Example("", text)
        return None if self.mend(example, Counter()) else example.assistant.strip()

    def mend(self, example: Example, mended: Counter) -> str | None:
        """Bring `example` into the project's form in place, counting each change in `mended`;
        return why it cannot be (a drop reason), or None."""
        category = example.category
        if category and self.category(category) != category:
            example.meta = {**example.meta, "category": self.category(category)}
            mended[RESPELT] += 1
        text = example.assistant.strip()
        if self.json_answers:
            inner = text if bare_json(text) else unwrap_json(text)
            if inner is None:
                return NO_DOCUMENT
            if inner != text:
                mended[UNWRAPPED] += 1
            if self.json_spacing is not None and inner != spaced(inner, self.json_spacing):
                inner = spaced(inner, self.json_spacing)
                mended[RESPACED] += 1
            example.assistant = inner
        elif self.labels:
            label = self.labels.get(fold_label(text))
            if label is None:
                return OFF_LABEL
            if label != text:
                example.assistant = label
                mended[RELABELLED] += 1
        return None
