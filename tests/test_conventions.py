"""Generated rows brought into the project's form (augment/validate.py `Conventions`), over drawn
JSON answers, the ways a writer wraps them, and the ways it spells a category."""

from __future__ import annotations

import json
import string
import unicodedata
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from forge_ml.augment.categories import match_categories
from forge_ml.augment.conventions import (
    OFF_LABEL,
    RELABELLED,
    RESPACED,
    RESPELT,
    UNWRAPPED,
    Conventions,
    bare_json,
    fold,
    fold_label,
    spaced,
    unwrap_json,
)
from forge_ml.augment.validate import admit
from forge_ml.data.examples import Example
from forge_ml.evaluation.scorers import json_field, json_match

SCALARS = st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.text(max_size=12)
JSON_VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
DOCUMENTS = st.dictionaries(st.text(max_size=8), JSON_VALUES, max_size=5) | st.lists(JSON_VALUES, max_size=5)
# Prose a writer puts around its JSON: no brace or bracket before the document, no backticks.
PROSE = st.text(alphabet=string.ascii_letters + string.digits + " .,:;!?'\n", max_size=40)


@st.composite
def written(draw) -> tuple[str, str]:
    """A document as some writer serialises it, and an answer that wraps it (or not)."""
    value = draw(DOCUMENTS)
    text = json.dumps(
        value,
        indent=draw(st.sampled_from([None, 1, 2])),
        separators=draw(st.sampled_from([None, (",", ":")])),
        ensure_ascii=draw(st.booleans()),
    )
    how = draw(st.sampled_from(["bare", "fence", "prose", "prose+fence", "encoded twice"]))
    lang = draw(st.sampled_from(["", "json", "JSON"]))
    before, after = draw(PROSE), draw(PROSE)
    if how == "bare":
        answer = f"  {text}\n"
    elif how == "fence":
        answer = f"```{lang}\n{text}\n```"
    elif how == "encoded twice":
        answer = json.dumps(text)
    elif how == "prose":
        answer = f"{before.rstrip()}\n{text}\n{after}"
    else:
        answer = f"{before}\n```{lang}\n{text}\n```\n{after}"
    return text, answer


@settings(max_examples=300, deadline=None)
@given(written())
def test_a_wrapped_json_answer_unwraps_to_the_document_as_written(case):
    text, answer = case
    inner = unwrap_json(answer)
    assert inner == text and bare_json(inner)
    multiline = Conventions.of(
        [Example("take off", '{\n "cmd": "takeoff"\n}'), Example("land", '{"cmd": "land"}')]
    )
    assert multiline.json_answers and multiline.json_spacing is None  # no one spacing: kept as written
    example = Example("go", answer.strip())  # as `admit` reads a row
    mended: Counter = Counter()
    multiline.mend(example, mended)
    assert example.assistant == (answer.strip() if bare_json(answer) else text)
    assert mended == (Counter() if bare_json(answer) else Counter({UNWRAPPED: 1}))


@settings(max_examples=300, deadline=None)
@given(written(), st.sampled_from(["spaced", "compact"]), st.lists(DOCUMENTS, min_size=1, max_size=4))
def test_a_json_answer_takes_the_spacing_every_answer_of_the_project_has(case, spacing, documents):
    text, answer = case
    reference = [Example(f"u{i}", spaced(json.dumps(d), spacing)) for i, d in enumerate(documents)]
    conventions = Conventions.of(reference)
    assert conventions.json_answers and conventions.json_spacing in (spacing, "spaced")  # "{}" fits both
    example = Example("go", answer.strip())  # as `admit` reads a row
    mended: Counter = Counter()
    assert conventions.mend(example, mended) is None
    assert example.assistant == spaced(text, conventions.json_spacing)
    assert json.loads(example.assistant) == json.loads(text) and "\n" not in example.assistant
    assert mended[RESPACED] == (text.strip() != example.assistant)
    assert mended[UNWRAPPED] == (not bare_json(answer))


@settings(max_examples=200, deadline=None)
@given(written(), st.text(min_size=1, max_size=30).filter(lambda t: not bare_json(t)))
def test_a_project_whose_answers_are_not_all_json_keeps_answers_as_written(case, free_text):
    _, answer = case
    conventions = Conventions.of([Example("a", '{"cmd": "land"}'), Example("b", free_text)])
    assert not conventions.json_answers
    example = Example("go", answer)
    conventions.mend(example, Counter())
    assert example.assistant == answer


@settings(max_examples=200, deadline=None)
@given(PROSE.filter(lambda t: "{" not in t and "[" not in t))
def test_an_answer_with_no_document_is_left_for_the_scorer_to_drop(prose):
    assert unwrap_json(prose) is None
    rows = [{"user": "fly home", "assistant": prose, "category": "rtl"}]
    result = admit(
        rows,
        scorer=json_match,
        known=set(),
        gold=set(),
        meta={},
        conventions=Conventions.of([Example("x", "{}")]),
    )
    assert not result.kept and sum(result.dropped.values()) == 1


NAMES = st.from_regex(r"[a-z][a-z0-9]{1,7}(_[a-z0-9]{1,7}){0,2}", fullmatch=True)


@st.composite
def respelt(draw, name: str) -> str:
    """`name` as a writer might spell it: any case, `_` as a space or `-`, spaces around."""
    chars = [c.upper() if draw(st.booleans()) else c for c in name]
    sep = draw(st.sampled_from(["_", " ", "-", "__"]))
    return (
        draw(st.sampled_from(["", " "])) + "".join(chars).replace("_", sep) + draw(st.sampled_from(["", " "]))
    )


@settings(max_examples=200, deadline=None)
@given(st.lists(NAMES, min_size=1, max_size=6, unique_by=fold), st.data())
def test_a_category_spelt_another_way_takes_the_projects_spelling(names, data):
    conventions = Conventions.of([Example(f"u{i}", "{}", {"category": n}) for i, n in enumerate(names)])
    name = data.draw(st.sampled_from(names))
    spelling = data.draw(respelt(name))
    assert conventions.category(spelling) == name
    new = data.draw(NAMES.filter(lambda n: fold(n) not in {fold(m) for m in names}))
    assert conventions.category(new) == new  # a category the project lacks stays as written

    rows = [{"user": "hold here", "assistant": '{"cmd": "hover"}', "category": spelling}]
    result = admit(rows, scorer=json_field("cmd"), known=set(), gold=set(), meta={}, conventions=conventions)
    assert [e.category for e in result.kept] == [name]
    assert result.mended == ({RESPELT: 1} if spelling != name else {})


def test_gold_spelling_wins_and_names_from_the_table_count():
    conventions = Conventions.of(
        [
            Example("a", "{}", {"category": "Goto_Waypoint"}),
            Example("b", "{}", {"category": "goto_waypoint"}),
        ],
        categories=["return-home"],
    )
    assert conventions.category("goto waypoint") == "Goto_Waypoint"
    assert conventions.category("RETURN HOME") == "return-home"
    assert Conventions().category("Hover") == "Hover" and not Conventions().json_answers


LABELS = st.lists(
    st.from_regex(r"[a-zéèêàçôü]{3,10}( [a-zéèêàçôü]{3,8})?", fullmatch=True),
    min_size=2,
    max_size=8,
    unique_by=fold,
)


@st.composite
def relabelled(draw, label: str) -> str:
    """`label` as a writer might give it: another case, accents dropped, punctuation or quotes around."""
    text = "".join(c.upper() if draw(st.booleans()) else c for c in label)
    if draw(st.booleans()):
        text = "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))
    before, after = draw(st.sampled_from([("", ""), ('"', '"'), ("« ", " »"), ("", "."), (" ", "!\n")]))
    return before + text + after


@settings(max_examples=200, deadline=None)
@given(LABELS, st.data())
def test_an_answer_spelt_another_way_takes_the_spelling_of_the_projects_label(labels, data):
    reference = [Example(f"u{i}-{k}", label) for i, label in enumerate(labels) for k in range(2)]
    conventions = Conventions.of(reference)
    assert not conventions.json_answers and sorted(conventions.labels.values()) == sorted(labels)
    label = data.draw(st.sampled_from(labels))
    written = data.draw(relabelled(label))
    example = Example("go", written.strip())
    mended: Counter = Counter()
    assert conventions.mend(example, mended) is None
    assert example.assistant == label and mended == Counter(
        {RELABELLED: 1} if written.strip() != label else {}
    )
    other = Example("go", "something else entirely, with an explanation")
    assert conventions.mend(other, mended) == OFF_LABEL  # gold never accepts it: refused
    assert other.assistant == "something else entirely, with an explanation"
    anything = data.draw(st.text(min_size=1, max_size=20).filter(str.strip))
    example = Example("go", anything)
    label = conventions.labels.get(fold_label(anything))
    assert conventions.mend(example, Counter()) == (None if label else OFF_LABEL)
    assert example.assistant == (label or anything)
    assert conventions.answer(anything) == label


def test_answers_that_are_no_closed_set_have_no_labels():
    free = [Example(f"u{i}", f"a sentence of its own number {i}") for i in range(10)]
    assert Conventions.of(free).labels == {}
    long = [Example(f"u{i}", "x" * 80) for i in range(4)]
    assert Conventions.of(long).labels == {}
    counts = [Example(f"u{i}", str(i % 4)) for i in range(12)]  # a count: any number may be right
    assert Conventions.of(counts).labels == {} and Conventions.of(counts).answer("17") == "17"
    french = Conventions.of([Example(f"u{i}", ["réservation", "météo"][i % 2]) for i in range(6)])
    assert french.answer("Meteo.") == "météo" and french.category("Météo") == "Météo"


def test_an_offline_patch_description_names_categories_in_any_script():
    categories = ["réservation", "météo", "bagages", "goto_waypoint", "予約", "天気"]
    assert match_categories("des exemples de météo à Lyon", categories) == ["météo"]
    assert match_categories("Meteo et RESERVATIONS", categories) == ["réservation", "météo"]
    assert match_categories("予約の変更", categories) == ["予約"]
    assert match_categories("waypoints, please", categories) == ["goto_waypoint"]
    assert match_categories("nothing of the kind", categories) == []
    # another inflection of a long part: its last two letters may differ, no more
    assert match_categories("примеры бронирования", ["бронирование", "погода"]) == ["бронирование"]
    assert match_categories("une bagage perdue", categories) == ["bagages"]
    assert match_categories("réserver un vol", categories) == []  # "réserv" is no inflection of it
    assert match_categories("a hovel", ["hover", "land"]) == []  # too short to inflect
