"""The examples a writer is shown for the format: the user's own before written ones, the focus
categories first, categories mixed. Datasets (categories, sources, focus) are generated."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from forge_ml.augment.reference import WRITTEN_SOURCES, reference_rows

CATEGORIES = st.sampled_from(["hover", "land", "ascend", "rtl", None])
SOURCES = st.sampled_from(["seed", None, "hand", *sorted(WRITTEN_SOURCES)])


@settings(max_examples=300, deadline=None)
@given(
    rows=st.lists(st.tuples(CATEGORIES, SOURCES), max_size=60),
    focus=st.lists(st.sampled_from(["hover", "land", "loiter"]), max_size=2, unique=True),
    k=st.integers(1, 12),
)
def test_the_users_own_examples_come_first_then_the_focus_with_categories_mixed(rows, focus, k):
    categories = [c for c, _ in rows]
    sources = [s for _, s in rows]
    picked = reference_rows(categories, sources, focus, k)
    assert len(picked) == len(set(picked)) == min(k, len(rows))

    def tier(i: int) -> tuple[bool, bool]:
        return (sources[i] in WRITTEN_SOURCES, bool(focus) and categories[i] not in focus)

    left = set(range(len(rows))) - set(picked)
    if left:  # nothing of a lower tier is shown while one of a higher tier is left out
        assert max(tier(i) for i in picked) <= min(tier(i) for i in left)
    for level in {tier(i) for i in picked}:
        shown = Counter(categories[i] for i in picked if tier(i) == level)
        available = Counter(categories[i] for i in range(len(rows)) if tier(i) == level)
        for a in available:  # one of each category in turn: a is ahead of b by two only when b ran out
            for b in available:
                if shown.get(a, 0) > shown.get(b, 0) + 1:
                    assert shown.get(b, 0) == available[b]


def test_a_project_grown_by_a_writer_still_shows_its_seed():
    categories = ["hover", "land"] * 3 + ["hover"] * 50 + ["land"] * 50
    sources = ["seed"] * 6 + ["augment"] * 100
    assert reference_rows(categories, sources, focus=[], k=8) == [0, 1, 2, 3, 4, 5, 6, 56]
    # the focus first among the user's own; the user's own before what a writer wrote
    assert reference_rows(categories, sources, focus=["land"], k=4) == [1, 3, 5, 0]
