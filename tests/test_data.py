"""The data layer: line-precise errors, dedup, the gold guard, the dev split, hashing."""

from __future__ import annotations

import json

import pytest
from conftest import write_jsonl
from hypothesis import given, settings
from hypothesis import strategies as st

from forge_ml.config import TaskConfig
from forge_ml.data.examples import Example, dataset_hash, normalize_text, read_examples
from forge_ml.data.project_data import load_project_data
from forge_ml.errors import InputError


def rec(user: str, assistant: str = "ok", **meta) -> dict:
    return {
        "messages": [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}],
        "meta": meta,
    }


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        ("{not json", "not valid JSON"),
        (json.dumps({"messages": [{"role": "assistant", "content": "x"}]}), "no user turn"),
        (json.dumps({"messages": [{"role": "user", "content": "x"}]}), "no assistant turn"),
        (json.dumps(rec("   ")), "user turn is empty"),
        (
            json.dumps({"messages": [{"role": "system", "content": "s"}, *rec("a")["messages"]]}),
            "system turn",
        ),
        (json.dumps([1, 2]), "expected a JSON object"),
        (json.dumps({"messages": [{"role": "tool", "content": "x"}]}), "role 'tool'"),
    ],
)
def test_bad_line_names_file_and_line(tmp_path, line, fragment):
    path = tmp_path / "data.jsonl"
    write_jsonl(path, [rec("fine"), line])
    with pytest.raises(InputError) as info:
        read_examples(path)
    assert f"{path}:2" in str(info.value)
    assert fragment in str(info.value)


def test_non_utf8_bytes_name_the_line(tmp_path):
    path = tmp_path / "data.jsonl"
    path.write_bytes(json.dumps(rec("a")).encode() + b"\n\xff\xfe bad\n")
    with pytest.raises(InputError, match=r"data.jsonl:2: not valid UTF-8"):
        read_examples(path)


def test_blank_lines_are_skipped_and_meta_kept(tmp_path):
    path = tmp_path / "data.jsonl"
    write_jsonl(path, [rec("a", category="hover"), "", rec("b")])
    examples = read_examples(path)
    assert [e.user for e in examples] == ["a", "b"]
    assert examples[0].category == "hover" and examples[1].category is None


def test_normalize_text_ignores_case_spacing_and_edge_punctuation():
    assert normalize_text("  Take OFF   now!! ") == normalize_text("take off now") == "take off now"
    assert normalize_text("go to alpha, then land") != normalize_text("go to alpha then land")


def test_dataset_hash_tracks_content():
    a = [Example("a", "1"), Example("b", "2")]
    assert dataset_hash(a) == dataset_hash([Example("a", "1"), Example("b", "2")])
    assert dataset_hash(a) != dataset_hash([Example("a", "1"), Example("b", "3")])
    assert len(dataset_hash(a)) == 64


@pytest.fixture
def project(tmp_path):
    from forge_ml.project import init_project

    project = init_project(tmp_path / "p")
    write_jsonl(project.root / "dataset" / "gold.jsonl", [rec("gold one"), rec("gold two")])
    return project


def test_dedup_keeps_first_of_each_normalized_text(project):
    write_jsonl(
        project.root / "dataset" / "canonical.jsonl",
        [rec("Land now", "a"), rec("land now!", "b"), rec("hover", "c")],
    )
    data = load_project_data(project, TaskConfig(dev_min=1))
    assert sorted((e.user, e.assistant) for e in data.train + data.dev) == [("Land now", "a"), ("hover", "c")]
    assert data.duplicates_dropped == 1


def _split(project, n: int, **task) -> tuple[set[str], set[str]]:
    write_jsonl(project.root / "dataset" / "canonical.jsonl", [rec(f"instruction {i}") for i in range(n)])
    data = load_project_data(project, TaskConfig(**task))
    return {e.key for e in data.train}, {e.key for e in data.dev}


def test_dev_split_is_deterministic_bounded_and_stable_as_data_grows(project):
    train, dev = _split(project, 200, dev_fraction=0.1, dev_min=5, dev_max=15)
    assert len(dev) == 15 and len(train) == 185 and dev.isdisjoint(train)
    assert _split(project, 200, dev_fraction=0.1, dev_min=5, dev_max=15)[1] == dev
    # growing canonical keeps earlier dev examples in dev (uncapped)
    _, dev_small = _split(project, 100, dev_fraction=0.2, dev_min=1, dev_max=1000)
    _, dev_big = _split(project, 200, dev_fraction=0.2, dev_min=1, dev_max=1000)
    assert len(dev_small & dev_big) >= 0.8 * len(dev_small)
    assert _split(project, 200, dev_fraction=0.1, dev_min=5, dev_max=15, split_seed=1)[1] != dev


def test_seed_is_merged_into_canonical_once(project):
    write_jsonl(project.root / "dataset" / "seed.jsonl", [rec(f"seed {i}") for i in range(4)])
    write_jsonl(
        project.root / "dataset" / "canonical.jsonl", [rec(f"gen {i}", source="generate") for i in range(20)]
    )
    data = load_project_data(project, TaskConfig(dev_min=2))
    assert data.seed_merged == 4
    canonical = read_examples(project.root / "dataset" / "canonical.jsonl")
    assert len(canonical) == 24 and canonical[-1].meta["source"] == "seed"
    again = load_project_data(project, TaskConfig(dev_min=2))
    assert again.seed_merged == 0
    assert len(read_examples(project.root / "dataset" / "canonical.jsonl")) == 24
    assert len(again.train) + len(again.dev) == 24


def test_gold_overlap_is_refused_with_count_and_offenders(project):
    rows = [rec(f"gen {i}") for i in range(10)] + [rec("GOLD one!"), rec("gold two")]
    write_jsonl(project.root / "dataset" / "canonical.jsonl", rows)
    before = (project.root / "dataset" / "canonical.jsonl").read_bytes()
    with pytest.raises(InputError) as info:
        load_project_data(project, TaskConfig())
    message = str(info.value)
    assert "2 training example(s) match gold inputs" in message
    assert "canonical.jsonl:11" in message and "canonical.jsonl:12" in message
    assert (project.root / "dataset" / "canonical.jsonl").read_bytes() == before


def test_gold_never_reaches_training_text(project):
    write_jsonl(project.root / "dataset" / "canonical.jsonl", [rec(f"gen {i}") for i in range(10)])
    data = load_project_data(project, TaskConfig(dev_min=2))
    assert not any("gold" in text for text in data.training_text())


def test_empty_gold_and_missing_system_prompt_are_input_errors(project):
    write_jsonl(project.root / "dataset" / "canonical.jsonl", [rec(f"gen {i}") for i in range(10)])
    (project.root / "dataset" / "gold.jsonl").write_text("")
    with pytest.raises(InputError, match="gold set is empty"):
        load_project_data(project, TaskConfig())
    (project.root / "system_prompt.md").unlink()
    with pytest.raises(InputError, match=r"system_prompt\.md"):
        load_project_data(project, TaskConfig())


def test_inits_placeholder_system_prompt_is_used_with_one_warning_naming_the_file(project, caplog):
    write_jsonl(project.root / "dataset" / "canonical.jsonl", [rec(f"gen {i}") for i in range(10)])
    prompt = project.root / "system_prompt.md"
    with caplog.at_level("WARNING", logger="forge_ml.data.project_data"):
        first = load_project_data(project, TaskConfig(dev_min=2))
        load_project_data(project, TaskConfig(dev_min=2))  # one warning per file and process
    placeholder = [r.getMessage() for r in caplog.records if "placeholder" in r.getMessage()]
    assert placeholder == [
        f"{prompt} is still `forge-ml init`'s placeholder: the model is trained and"
        " served without being told the task: write in a sentence or two what it"
        " must do and what it answers with"
    ]
    assert first.system_prompt == prompt.read_text().strip()  # used as it is: a warning, not an error
    caplog.clear()
    prompt.write_text("Route the ticket. Answer with the queue's name only.\n")
    with caplog.at_level("WARNING", logger="forge_ml.data.project_data"):
        assert load_project_data(project, TaskConfig(dev_min=2)).system_prompt.startswith("Route")
    assert not caplog.records


@settings(max_examples=300, deadline=None)
@given(
    shapes=st.lists(st.tuples(st.integers(0, 80), st.integers(1, 40)), min_size=1, max_size=12),
    max_length=st.integers(1, 120),
)
def test_check_lengths_refuses_only_when_no_answer_survives_and_warns_when_any_is_cut(shapes, max_length):
    """Drawn (prompt, answer) token lengths against a drawn training.max_seq_length."""
    import logging

    from forge_ml.data.chat import IGNORE_INDEX, check_lengths

    class Records(logging.Handler):
        def __init__(self) -> None:
            super().__init__(logging.WARNING)
            self.messages: list[str] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.messages.append(record.getMessage())

    columns = {
        "input_ids": [[7] * (p + a) for p, a in shapes],
        "labels": [[IGNORE_INDEX] * p + [7] * a for p, a in shapes],
    }
    none_survives = all(p >= max_length for p, _ in shapes)
    any_cut = any(p + a > max_length for p, a in shapes)
    if none_survives:
        pattern = rf"training\.max_seq_length={max_length}: .* {len(shapes)} training"
        with pytest.raises(InputError, match=pattern):
            check_lengths(columns, max_length, "training")
        return
    logger, records = logging.getLogger("forge_ml.data.chat"), Records()
    logger.addHandler(records)
    try:
        check_lengths(columns, max_length, "training")
    finally:
        logger.removeHandler(records)
    warned = records.messages
    assert bool(warned) == any_cut
    if any_cut:
        cut = sum(p + a > max_length for p, a in shapes)
        assert f"cuts {cut} of {len(shapes)} training examples" in warned[0]


# ---- dataset lines: the three Hugging Face/TRL formats, and what is not one of them --------------

_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=40).filter(
    str.strip
)
_META = st.one_of(
    st.just({}),
    st.builds(
        lambda c: {"category": c}, st.sampled_from(["hover", "land", "rtl", "météo", "予約", "goto waypoint"])
    ),
)


def _turn(role: str, content) -> dict:
    return {"role": role, "content": content}


@st.composite
def valid_lines(draw) -> tuple[dict, str, str]:
    """A record in one of the accepted formats, with the user text and answer it must read as."""
    user, answer, meta = draw(_TEXT), draw(_TEXT), draw(_META)
    shape = draw(
        st.sampled_from(["messages", "messages-answer-first", "prompt-completion", "conversational"])
    )
    if shape == "messages":
        record = {"messages": [_turn("user", user), _turn("assistant", answer)]}
    elif shape == "messages-answer-first":
        record = {"messages": [_turn("assistant", answer), _turn("user", user)]}
    elif shape == "prompt-completion":
        record = {"prompt": user, "completion": answer}
    else:
        record = {"prompt": [_turn("user", user)], "completion": [_turn("assistant", answer)]}
    if meta:
        record["meta"] = meta
    return record, user, answer


@st.composite
def invalid_lines(draw) -> tuple[object, str]:
    """A line that is not an example in any accepted format, with a fragment its error must name."""
    user, answer = draw(_TEXT), draw(_TEXT)
    blank = draw(st.sampled_from(["", " ", "\t"]))
    cases = [
        ({"input": user, "output": answer}, "this line has the keys 'input', 'output'"),
        ({"instruction": user, "response": answer}, "expected one of the Hugging Face/TRL formats"),
        ({"prompt": user}, "must both be strings"),
        ({"completion": answer}, "must both be strings"),
        ({"prompt": user, "completion": [_turn("assistant", answer)]}, "must both be strings"),
        ({"prompt": [_turn("user", user)], "completion": answer}, "must both be strings"),
        (
            {
                "prompt": [_turn("user", user), _turn("assistant", answer)],
                "completion": [_turn("assistant", answer)],
            },
            "'prompt' holds an assistant turn",
        ),
        (
            {"prompt": [_turn("user", user)], "completion": [_turn("user", answer)]},
            "'completion' holds a user turn",
        ),
        ({"prompt": [_turn("system", user)], "completion": [_turn("assistant", answer)]}, "system turn"),
        ({"prompt": [], "completion": [_turn("assistant", answer)]}, "'prompt' must be a non-empty list"),
        ({"prompt": blank, "completion": answer}, "the user turn is empty"),
        ({"prompt": user, "completion": blank}, "the assistant turn is empty"),
        (
            {"messages": [_turn("user", user), _turn("assistant", answer)], "prompt": user},
            "use one format per line",
        ),
        ({"messages": [_turn("user", user)]}, "no assistant turn"),
        ({"messages": [_turn("user", user), _turn("user", answer)]}, "more than one user turn"),
        ({"messages": [_turn("user", 3), _turn("assistant", answer)]}, "string 'content'"),
        ({"messages": user}, "'messages' must be a non-empty list"),
        ({"prompt": user, "completion": answer, "meta": [answer]}, "'meta' must be an object"),
        ([user, answer], "expected a JSON object"),
    ]
    return draw(st.sampled_from(cases))


@settings(max_examples=150, deadline=None)
@given(lines=st.lists(valid_lines(), min_size=1, max_size=6))
def test_every_accepted_format_reads_as_its_user_turn_and_answer(tmp_path_factory, lines):
    path = tmp_path_factory.mktemp("lines") / "data.jsonl"
    write_jsonl(path, [record for record, _, _ in lines])
    examples = read_examples(path)
    assert [(e.user, e.assistant) for e in examples] == [(u, a) for _, u, a in lines]
    for (record, _, _), example in zip(lines, examples):
        assert example.meta == record.get("meta", {})
        # what forge-ml writes back (canonical.jsonl) is the messages format, and reads as the same example
        again = tmp_path_factory.mktemp("again") / "data.jsonl"
        write_jsonl(again, [example.to_record()])
        assert [(e.user, e.assistant, e.meta) for e in read_examples(again)] == [
            (example.user, example.assistant, example.meta)
        ]


@settings(max_examples=150, deadline=None)
@given(good=valid_lines(), bad=invalid_lines())
def test_a_line_in_no_accepted_format_is_an_error_naming_file_line_and_what_is_wrong(
    tmp_path_factory, good, bad
):
    record, fragment = bad
    path = tmp_path_factory.mktemp("bad") / "data.jsonl"
    write_jsonl(path, [good[0], record])
    with pytest.raises(InputError) as info:
        read_examples(path)
    assert str(info.value).startswith(f"{path}:2: ")
    assert fragment in str(info.value)


@settings(max_examples=100, deadline=None)
@given(
    lines=st.lists(valid_lines(), min_size=1, max_size=6),
    bom=st.booleans(),
    newline=st.sampled_from(["\n", "\r\n"]),
)
def test_a_file_saved_by_windows_tools_reads_as_the_same_examples(tmp_path_factory, lines, bom, newline):
    """A UTF-8 byte-order mark (PowerShell's `Set-Content -Encoding UTF8`, Excel) and CRLF line ends."""
    folder = tmp_path_factory.mktemp("windows")
    text = newline.join(json.dumps(record, ensure_ascii=False) for record, _, _ in lines) + newline
    (folder / "data.jsonl").write_bytes(("\ufeff" if bom else "").encode() + text.encode())
    assert [(e.user, e.assistant) for e in read_examples(folder / "data.jsonl")] == [
        (u, a) for _, u, a in lines
    ]


def test_a_project_saved_by_windows_tools_loads_as_the_same_data_and_utf16_is_named(project):
    write_jsonl(
        project.root / "dataset" / "canonical.jsonl", [rec(f"gen {i}", category="c") for i in range(12)]
    )
    (project.root / "system_prompt.md").write_text("Answer with one word.\n", encoding="utf-8")
    plain = load_project_data(project, TaskConfig(dev_min=2))
    for name in ("dataset/canonical.jsonl", "dataset/gold.jsonl", "system_prompt.md", "forge.yaml"):
        path = project.root / name
        path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes().replace(b"\n", b"\r\n"))
    windows = load_project_data(project, TaskConfig(dev_min=2))
    assert windows.system_prompt == plain.system_prompt == "Answer with one word."
    assert dataset_hash(windows.gold) == dataset_hash(plain.gold)
    assert windows.rows.column("user").to_pylist() == plain.rows.column("user").to_pylist()
    assert list(windows.dev_rows) == list(plain.dev_rows)
    from forge_ml.compose import compose_config

    assert compose_config(project, []).name == project.root.name

    for name in ("dataset/canonical.jsonl", "dataset/gold.jsonl", "system_prompt.md"):
        path = project.root / name
        good = path.read_bytes()
        path.write_bytes(good.decode("utf-8-sig").encode("utf-16"))  # PowerShell 5's `>` and Out-File
        with pytest.raises(InputError) as info:
            load_project_data(project, TaskConfig(dev_min=2))
        assert str(info.value).startswith(f"{path}")
        assert "the file is UTF-16 (it starts with a UTF-16 byte-order mark); save it as UTF-8" in str(
            info.value
        )
        path.write_bytes(good)


def test_a_project_in_the_prompt_completion_format_trains_from_the_same_data(project):
    """seed and gold as TRL prompt-completion pairs: merged into canonical as messages, gold read alike."""
    gold = read_examples(project.root / "dataset" / "gold.jsonl")
    write_jsonl(
        project.root / "dataset" / "gold.jsonl", [{"prompt": e.user, "completion": e.assistant} for e in gold]
    )
    (project.root / "dataset" / "canonical.jsonl").write_text("")
    write_jsonl(
        project.root / "dataset" / "seed.jsonl",
        [{"prompt": f"climb {n} meters", "completion": f"ascend {n}"} for n in range(1, 13)],
    )
    data = load_project_data(project, TaskConfig())
    assert [(e.user, e.assistant) for e in data.gold] == [(e.user, e.assistant) for e in gold]
    canonical = read_examples(project.root / "dataset" / "canonical.jsonl")
    assert [(e.user, e.assistant) for e in canonical] == [
        (f"climb {n} meters", f"ascend {n}") for n in range(1, 13)
    ]
    assert all(
        "messages" in json.loads(line) for line in (project.root / "dataset" / "canonical.jsonl").open()
    )
