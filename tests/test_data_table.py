"""Canonical's Arrow cache: whatever the file holds and however it grows, the data equals a fresh read.

The reference is the plain reading of the whole file (every line parsed, the first of each
normalised user text kept, dev = the lowest seeded sha256 ranks), computed here from
`read_examples`, never from the cache.
"""

from __future__ import annotations

import hashlib
import json

import pytest
from conftest import chat_record, write_jsonl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forge_ml.config import TaskConfig
from forge_ml.data.examples import read_examples, version_hash
from forge_ml.data.project_data import load_project_data
from forge_ml.data.table import MANIFEST, cache_dir, load_table
from forge_ml.errors import InputError

PHRASES = [
    "Land now",
    "land now!",
    "hover here",
    "Hover  here.",
    "go to alpha",
    "take off",
    "RTL",
    "climb 5 m",
]


lines = st.one_of(
    st.builds(
        lambda user, n, answer, category: json.dumps(
            chat_record(f"{user} {n}" if n else user, answer, **({"category": category} if category else {})),
            ensure_ascii=bool(n % 2),
        ),
        st.sampled_from(PHRASES),
        st.integers(0, 12),
        st.text(min_size=1, max_size=12).filter(str.strip),
        st.sampled_from([None, "land", "hover", "unknown"]),
    ),
    st.just(""),  # blank lines are skipped but counted in line numbers
)


def reference(path, task: TaskConfig) -> tuple[list[tuple], list[tuple], int]:
    """(train, dev, dropped) from reading the whole file the plain way."""
    examples = read_examples(path, required=False)
    seen, kept = set(), []
    for ex in examples:
        if ex.key not in seen:
            seen.add(ex.key)
            kept.append(ex)
    size = min(max(round(len(kept) * task.dev_fraction), task.dev_min), task.dev_max, len(kept) - 1)

    def rank(ex):
        return hashlib.sha256(f"{task.split_seed}\x00{ex.key}".encode()).hexdigest()

    dev_keys = {ex.key for ex in sorted(kept, key=rank)[:size]}
    as_tuple = lambda ex: (ex.user, ex.assistant, ex.meta, ex.origin)  # noqa: E731
    train = [as_tuple(ex) for ex in kept if ex.key not in dev_keys]
    dev = [as_tuple(ex) for ex in kept if ex.key in dev_keys]
    return train, dev, len(examples) - len(kept)


def observed(data) -> tuple[list[tuple], list[tuple], int]:
    as_tuple = lambda ex: (ex.user, ex.assistant, ex.meta, ex.origin)  # noqa: E731
    return [as_tuple(ex) for ex in data.train], [as_tuple(ex) for ex in data.dev], data.duplicates_dropped


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    chunks=st.lists(st.lists(lines, min_size=1, max_size=25), min_size=1, max_size=5),
    dev_fraction=st.sampled_from([0.1, 0.3]),
    split_seed=st.integers(0, 3),
)
def test_growing_canonical_reads_as_a_fresh_read_would(bare_project, chunks, dev_fraction, split_seed):
    """Each appended chunk is read from the cache plus the new lines; train, dev, drops, origins and
    hashes equal the plain reading of the whole file and a cold rebuild of the cache."""
    task = TaskConfig(dev_fraction=dev_fraction, dev_min=1, dev_max=6, split_seed=split_seed)
    path = bare_project.root / "dataset" / "canonical.jsonl"
    path.write_text("")
    for folder in (cache_dir(bare_project.output, path),):
        for f in folder.glob("*") if folder.exists() else []:
            f.unlink()
    for chunk in chunks:
        with path.open("a", encoding="utf-8") as fh:
            fh.write("".join(line + "\n" for line in chunk))
        if len(reference(path, task)[0]) + len(reference(path, task)[1]) < 2:
            with pytest.raises(InputError, match=r"at least 2 are needed|no training examples"):
                load_project_data(bare_project, task)
            continue
        data = load_project_data(bare_project, task)
        assert observed(data) == reference(path, task)
    if len(reference(path, task)[0]) + len(reference(path, task)[1]) < 2:
        return
    manifest = json.loads((cache_dir(bare_project.output, path) / MANIFEST).read_text())
    assert manifest["size"] == path.stat().st_size
    incremental = load_project_data(bare_project, task)
    for f in cache_dir(bare_project.output, path).glob("*"):
        f.unlink()
    cold = load_project_data(bare_project, task)
    assert observed(cold) == observed(incremental)
    assert cold.hashes == incremental.hashes
    table = load_table(path, bare_project.output, split_seed=split_seed)
    assert table.digest() == version_hash(read_examples(path))  # the version hash, from the cache
    assert len(list(cache_dir(bare_project.output, path).glob("*.arrow"))) == 1  # older tables are removed


def test_only_appended_lines_are_parsed(bare_project, monkeypatch):
    """After the first read, a load parses nothing (unchanged) or the appended lines only."""
    import forge_ml.data.table as table

    path = bare_project.root / "dataset" / "canonical.jsonl"
    write_jsonl(path, [chat_record(f"instruction {i}") for i in range(50)])
    parsed: list[int] = []
    real = table.parse_record
    monkeypatch.setattr(table, "parse_record", lambda record, where: parsed.append(1) or real(record, where))
    load_project_data(bare_project, TaskConfig(dev_min=2))
    assert len(parsed) == 50
    load_project_data(bare_project, TaskConfig(dev_min=2))
    assert len(parsed) == 50
    with path.open("a") as fh:
        fh.write("".join(json.dumps(chat_record(f"new {i}")) + "\n" for i in range(3)))
    data = load_project_data(bare_project, TaskConfig(dev_min=2))
    assert len(parsed) == 53 and data.train_size + len(data.dev_rows) == 53
    assert {ex.origin.rsplit(":", 1)[1] for ex in data.train + data.dev} == {str(n) for n in range(1, 54)}


def test_an_edited_line_is_seen_even_with_the_size_unchanged(bare_project):
    path = bare_project.root / "dataset" / "canonical.jsonl"
    write_jsonl(path, [chat_record(f"instruction {i}", "aaa") for i in range(20)])
    load_project_data(bare_project, TaskConfig(dev_min=2))
    path.write_text(path.read_text().replace('"aaa"', '"bbb"', 1))
    data = load_project_data(bare_project, TaskConfig(dev_min=2))
    assert sorted(ex.assistant for ex in data.train + data.dev).count("bbb") == 1


def test_a_line_completed_after_a_read_is_read_whole(bare_project):
    """A last line without its newline is read; text appended to it afterwards is not mistaken for new lines."""
    path = bare_project.root / "dataset" / "canonical.jsonl"
    body = "".join(json.dumps(chat_record(f"instruction {i}")) + "\n" for i in range(5))
    path.write_text(body + json.dumps(chat_record("partial", "x")))
    assert "partial" in {ex.user for ex in load_project_data(bare_project, TaskConfig(dev_min=1)).train} | {
        ex.user for ex in load_project_data(bare_project, TaskConfig(dev_min=1)).dev
    }
    path.write_text(body + json.dumps(chat_record("partial", "xyz")) + "\n")
    data = load_project_data(bare_project, TaskConfig(dev_min=1))
    answers = {ex.user: ex.assistant for ex in data.train + data.dev}
    assert answers["partial"] == "xyz"


def test_a_bad_appended_line_names_its_line_and_leaves_the_cache_usable(bare_project):
    path = bare_project.root / "dataset" / "canonical.jsonl"
    write_jsonl(path, [chat_record(f"instruction {i}") for i in range(10)])
    load_project_data(bare_project, TaskConfig(dev_min=2))
    manifest = (cache_dir(bare_project.output, path) / MANIFEST).read_bytes()
    with path.open("a") as fh:
        fh.write(json.dumps(chat_record("fine")) + "\n" + "{not json\n")
    with pytest.raises(InputError, match=r"canonical.jsonl:12: not valid JSON"):
        load_project_data(bare_project, TaskConfig(dev_min=2))
    assert (cache_dir(bare_project.output, path) / MANIFEST).read_bytes() == manifest
    assert (
        len(list(cache_dir(bare_project.output, path).glob("*.arrow"))) == 1
    )  # the failed table is not left behind
    path.write_text(path.read_text().replace("{not json\n", json.dumps(chat_record("mended")) + "\n"))
    data = load_project_data(bare_project, TaskConfig(dev_min=2))
    assert data.train_size + len(data.dev_rows) == 12


def test_gold_overlap_in_appended_lines_is_refused(bare_project):
    path = bare_project.root / "dataset" / "canonical.jsonl"
    write_jsonl(path, [chat_record(f"instruction {i}") for i in range(10)])
    load_project_data(bare_project, TaskConfig(dev_min=2))
    with path.open("a") as fh:
        fh.write(json.dumps(chat_record("A gold question!")) + "\n")
    with pytest.raises(
        InputError, match=r"1 training example\(s\) match gold inputs[\s\S]*canonical.jsonl:11"
    ):
        load_project_data(bare_project, TaskConfig(dev_min=2))
