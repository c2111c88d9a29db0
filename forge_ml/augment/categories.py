"""Offline `patch`: which of the project's categories a plain-English description is about."""

from __future__ import annotations

import re
from collections.abc import Iterable

from forge_ml.data.examples import Example

_WORD = re.compile(r"[a-z0-9]+")
MIN_PART = 3  # shorter name parts ("to", "x") would match too much


def known_categories(*datasets: Iterable[Example]) -> list[str]:
    """The categories named in `meta.category` of the given examples, sorted."""
    return sorted({e.category for examples in datasets for e in examples if e.category})


def match_categories(description: str, categories: list[str]) -> list[str]:
    """Return the categories the description names: a word equals a part of the name, or starts with it.

    `goto_waypoint` matches "waypoint" and "goto"; `hover` matches "hover" and "hovering"; names
    are split on anything that is not a letter or a digit.
    """
    words = _WORD.findall(description.lower())
    found = []
    for name in categories:
        parts = [p for p in _WORD.findall(name.lower()) if len(p) >= MIN_PART]
        if any(word.startswith(part) for part in parts for word in words):
            found.append(name)
    return found
