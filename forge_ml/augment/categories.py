"""Offline `patch`: which of the project's categories a description (in any language) is about."""

from __future__ import annotations

import re
from collections.abc import Iterable
from unicodedata import east_asian_width

from forge_ml.augment.conventions import fold
from forge_ml.data.examples import Example

_WORD = re.compile(r"[^\W_]+")  # letters and digits of any script
MIN_PART = 3  # shorter name parts ("to", "x") would match too much (in scripts written with letters)
INFLECTED = 6  # a part this long may be named in another inflection ...
INFLECTION_TAIL = 2  # ... that differs in its last two letters at most


def known_categories(*datasets: Iterable[Example]) -> list[str]:
    """The categories named in `meta.category` of the given examples, sorted."""
    return sorted({e.category for examples in datasets for e in examples if e.category})


def _names(word: str, part: str) -> bool:
    """Whether `word` names `part`: it starts with it (`hovering`, `waypoints`), or, for a part of
    INFLECTED letters or more, differs from it only in its last INFLECTION_TAIL (`бронирования` for
    `бронирование`, `bagage` for `bagages`)."""
    if word.startswith(part):
        return True
    shared = next((i for i, (a, b) in enumerate(zip(word, part, strict=False)) if a != b), len(word))
    return len(part) >= INFLECTED and shared >= len(part) - INFLECTION_TAIL


def _unspaced(part: str) -> bool:
    """Whether `part` is in a script written without spaces between words (CJK)."""
    return any(east_asian_width(c) in "WF" for c in part)


def match_categories(description: str, categories: list[str]) -> list[str]:
    """Return the categories the description names (`_names`) in a part of their name.

    `goto_waypoint` matches "waypoint" and "goto"; `hover` matches "hover" and "hovering"; `météo`
    matches "meteo" (case and accents aside). Names are split on anything that is not a letter or a
    digit. In a script without spaces (`予約`), a name matches where the description contains it.
    """
    text = fold(description)
    words = _WORD.findall(text)
    found = []
    for name in categories:
        parts = _WORD.findall(fold(name))
        long = [p for p in parts if len(p) >= MIN_PART]
        if any(_names(word, part) for part in long for word in words) or any(
            p in text for p in parts if _unspaced(p)
        ):
            found.append(name)
    return found
