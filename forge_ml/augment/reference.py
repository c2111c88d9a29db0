"""The examples a writer is shown for the format of the project's answers."""

from __future__ import annotations

from collections.abc import Sequence

SAMPLES_SHOWN = 8
WRITTEN_SOURCES = frozenset({"augment", "generate", "patch"})  # meta.source of examples a writer wrote


def reference_rows(
    categories: Sequence[str | None],
    sources: Sequence[str | None],
    focus: Sequence[str],
    k: int = SAMPLES_SHOWN,
) -> list[int]:
    """Indices of up to `k` examples to show a writer for the format (rows given by their category
    and `meta.source`): the user's own examples before written ones, so that what a writer wrote
    does not become the model of what it writes next; within each, the focus categories first;
    then one example of each category in turn, so categories stay mixed."""
    wanted = set(focus)
    tiers: dict[tuple[bool, bool], dict[str | None, list[int]]] = {}
    for i, (category, source) in enumerate(zip(categories, sources, strict=True)):
        tier = (source in WRITTEN_SOURCES, bool(wanted) and category not in wanted)
        tiers.setdefault(tier, {}).setdefault(category, []).append(i)
    picked: list[int] = []
    for tier in sorted(tiers):
        groups = list(tiers[tier].values())
        for turn in range(max(len(g) for g in groups)):
            picked += [g[turn] for g in groups if turn < len(g)][: k - len(picked)]
            if len(picked) == k:
                return picked
    return picked
