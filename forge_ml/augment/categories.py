"""Offline `patch`: which of the project's categories a description (in any language) is about."""

from __future__ import annotations

import re
from collections.abc import Iterable
from unicodedata import east_asian_width

from forge_ml.augment.conventions import fold
from forge_ml.data.examples import Example

_WORD = re.compile(r"[^\W_]+")  # letters and digits of any script
MIN_PART = 3  # shorter name parts ("to", "x") would match too much (in scripts written with letters)


def known_categories(*datasets: Iterable[Example]) -> list[str]:
    """The categories named in `meta.category` of the given examples, sorted."""
    return sorted({e.category for examples in datasets for e in examples if e.category})


def match_categories(description: str, categories: list[str]) -> list[str]:
    """Return the categories the description names: a word equals a part of the name, or starts with it.

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
        unspaced = [
            p for p in parts if any(east_asian_width(c) in "WF" for c in p)
        ]  # no spaces between words
        if any(word.startswith(part) for part in long for word in words) or any(p in text for p in unspaced):
            found.append(name)
    return found
