"""GoldGuard: a note that quotes the gold set reaches a data writer with the quotes cut out, and
nothing else of it changes. Gold sets and notes are generated: words, case, punctuation, spacing."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from forge_ml.data.examples import Example
from forge_ml.data.gold_guard import RUN_WORDS, WHOLE_MIN_WORDS, WITHHELD, GoldGuard

# Gold words come from one alphabet and note words from another, so a note's own text never
# quotes gold by chance: what the guard cuts is exactly what the test put there.
GOLD_WORD = st.text(alphabet="abcdefgh", min_size=2, max_size=6)
NOTE_WORD = st.text(alphabet="stuvwxyz", min_size=1, max_size=6)
SEPARATOR = st.sampled_from([" ", "  ", ", ", " - ", "\n", " (", ") "])


def _sentence(words: list[str], cases: list[bool], seps: list[str]) -> str:
    out = []
    for i, word in enumerate(words):
        out.append(word.upper() if cases[i % len(cases)] else word)
        out.append(seps[i % len(seps)] if i < len(words) - 1 else "")
    return "".join(out)


def _words(text: str) -> list[str]:
    return [w.casefold() for w in re.findall(r"\w+", text)]


def _contains(haystack: list[str], needle: list[str]) -> bool:
    n = len(needle)
    return any(haystack[i : i + n] == needle for i in range(len(haystack) - n + 1))


def _example(user: str, assistant: str = "label") -> Example:
    return Example(user=user, assistant=assistant, meta={"category": "c"})


gold_sets = st.lists(st.lists(GOLD_WORD, min_size=1, max_size=14), min_size=1, max_size=6)


@settings(max_examples=150, deadline=None)
@given(
    gold_words=gold_sets,
    note_parts=st.lists(st.lists(NOTE_WORD, min_size=1, max_size=5), min_size=2, max_size=5),
    picks=st.lists(
        st.tuples(st.integers(0, 5), st.integers(0, 20), st.integers(1, 14)), min_size=1, max_size=4
    ),
    cases=st.lists(st.booleans(), min_size=1, max_size=3),
    seps=st.lists(SEPARATOR, min_size=1, max_size=3),
)
def test_every_quote_is_cut_and_the_rest_of_the_note_is_kept(gold_words, note_parts, picks, cases, seps):
    gold = [_example(_sentence(words, [False], [" "])) for words in gold_words]
    guard = GoldGuard.of(gold)
    quotes = []
    for which, start, length in picks:
        words = gold_words[which % len(gold_words)]
        if len(words) < RUN_WORDS:  # a short gold text counts when quoted whole
            quotes.append(words)
        else:  # a long one: any run of RUN_WORDS words or more
            start = start % (len(words) - RUN_WORDS + 1)
            quotes.append(words[start : start + max(RUN_WORDS, length)])
    pieces = []
    for i, part in enumerate(note_parts):
        pieces.append(_sentence(part, cases, seps))
        if i < len(quotes):
            pieces.append('"' + _sentence(quotes[i], cases, seps) + '"')
    note = " ".join(pieces)
    text, count = guard.withhold(note)

    left = _words(text)
    for words in gold_words:  # no gold text of WHOLE_MIN_WORDS or more words is left, nor any run of one
        if WHOLE_MIN_WORDS <= len(words) < RUN_WORDS:
            assert not _contains(left, words)
        for i in range(len(words) - RUN_WORDS + 1):
            assert not _contains(left, words[i : i + RUN_WORDS])
    for part in note_parts:  # the note's own words are all there, in order
        assert _contains(left, [w.casefold() for w in part])
    placed = quotes[: len(note_parts)]
    withheld = [q for q in placed if len(q) >= WHOLE_MIN_WORDS]
    assert (count > 0) == bool(withheld)
    assert text.count(WITHHELD) == count <= len(placed)
    if not withheld:
        assert text == note


@settings(max_examples=100, deadline=None)
@given(gold_words=gold_sets, note=st.lists(NOTE_WORD, max_size=30), seps=st.lists(SEPARATOR, min_size=1))
def test_a_note_without_gold_words_is_returned_unchanged(gold_words, note, seps):
    guard = GoldGuard.of(_example(" ".join(words)) for words in gold_words)
    text = _sentence(note, [False], seps) if note else ""
    assert guard.withhold(text) == (text, 0)


def test_answers_count_unless_a_seed_example_gives_the_same_one():
    gold = [
        _example("turn left at the next corner", '{"cmd": "turn", "dir": "left"}'),
        _example("what is the capital of peru", "Lima is the capital of Peru"),
    ]
    seed = [_example("make a left turn", '{"cmd": "turn", "dir": "left"}')]
    guard = GoldGuard.of(gold, seed)
    note = (
        'Answers look like {"cmd": "turn", "dir": "left"}. Gold expected "Lima is the capital of Peru" '
        "for What is the capital of Peru?"
    )
    text, count = guard.withhold(note)
    assert count == 2
    assert text == (
        f'Answers look like {{"cmd": "turn", "dir": "left"}}. Gold expected "{WITHHELD}" for {WITHHELD}?'
    )


def test_short_gold_texts_are_too_common_to_withhold():
    guard = GoldGuard.of([_example("hello"), _example("go up")])
    assert guard.withhold("Say hello, or go up.") == ("Say hello, or go up.", 0)
