"""The round's trials table: short unambiguous column names, nothing cut off in a narrow terminal."""

from __future__ import annotations

import io
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from forge_ml.console import MirroredConsole, column_labels, round_table, titled_table
from forge_ml.tuning.engine import RoundResult, TrialRecord

SEGMENT = st.sampled_from(["lora", "training", "r", "alpha", "learning_rate", "epochs", "a", "b"])


@given(st.sets(st.lists(SEGMENT, min_size=1, max_size=3).map(".".join), min_size=1, max_size=8))
def test_labels_are_distinct_tails_as_short_as_the_other_keys_allow(keys):
    keys = sorted(keys)
    labels = column_labels(keys)
    assert len(set(labels.values())) == len(keys)
    for key, label in labels.items():
        assert key == label or key.endswith("." + label)
        shorter = label.split(".", 1)[1] if "." in label else None  # one segment less
        if shorter is not None:  # it would be ambiguous: another key is or ends with it
            assert any(o != key and (o == shorter or o.endswith("." + shorter)) for o in keys)


def test_the_usual_keys_get_their_last_names_and_a_clash_keeps_its_group():
    labels = column_labels(["lora.r", "lora.alpha", "training.learning_rate", "model.alpha"])
    assert labels == {
        "lora.r": "r",
        "lora.alpha": "lora.alpha",
        "training.learning_rate": "learning_rate",
        "model.alpha": "model.alpha",
    }


def render(table, width: int) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(table)
    return console.file.getvalue()


SPACE = {
    "lora.alpha": 125,
    "lora.dropout": 0.2789,
    "lora.r": 16,
    "training.batch_size": 8,
    "training.epochs": 3,
    "training.learning_rate": 0.006351,
    "training.warmup_ratio": 0.1154,
    "training.weight_decay": 0.09838,
}
LABELS = ("alpha", "dropout", "batch_size", "epochs", "learning_rate", "warmup_ratio", "weight_decay")
VALUES = ("0.006351", "0.2789", "0.09838", "4.4640", "8.5413", "0.250", "cb2304e2", "FINISHED", "STOPPED")


def a_round(trials: int) -> RoundResult:
    best = TrialRecord("cb2304e2", "run1", SPACE, "FINISHED", {"dev/loss": 4.464, "dev/accuracy": 0.25})
    stopped = [
        TrialRecord(f"{i:08x}", f"run{i}", {**SPACE, "lora.r": 4}, "STOPPED", {"dev/loss": 8.5413})
        for i in range(1, trials)
    ]
    return RoundResult("round", "round-006", trials=[best, *stopped], best=best, wall_s=353)


def test_a_round_reads_whole_one_row_a_trial_where_it_fits_else_one_column_a_trial():
    result = a_round(4)
    wide = render(round_table(result, "dev/loss", 160), 160)
    header = wide.splitlines()[2]  # title, top border, the header row
    assert all(label in header for label in LABELS) and "00000003" in wide.splitlines()[-2]
    for width in (120, 80):  # 8 searched keys: one trial a column fits in both
        text = render(round_table(result, "dev/loss", width), width)
        lines = text.splitlines()
        assert all(len(line) <= width for line in lines)
        assert "cb2304e2" in lines[2] and "00000003" in lines[2]  # the trials head the columns
        assert all(any(line.lstrip("│ ").startswith(label) for line in lines) for label in LABELS)
        assert all(value in text for value in VALUES), width


def columns_of(text: str) -> list[str]:
    """Each column's cells read top to bottom and joined: a folded cell comes out whole."""
    lines = text.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("┏"))
    parts = [
        [cell.strip() for cell in line[1:-1].split(line[0])]
        for line in lines[head + 1 : -1]
        if line[0] in "┃│"
    ]
    return ["".join(row[i] for row in parts) for i in range(len(parts[0]))]


def test_a_round_too_wide_either_way_folds_its_cells_and_cuts_nothing():
    text = render(round_table(a_round(8), "dev/loss", 80), 80)
    assert "…" not in text and all(len(line) <= 80 for line in text.splitlines())
    names, best, *_ = columns_of(text)
    assert all(label in names for label in LABELS)
    assert best.startswith("cb2304e2FINISHED") and "0.0063510.11540.098384.46400.250" in best


@given(
    title=st.text(st.characters(categories=["L", "N"]), min_size=1, max_size=12).map(
        lambda word: f"round-001: best trial {word} (dev/loss 0.5914) in 53s"
    ),
    width=st.integers(80, 160),
)
def test_a_title_longer_than_its_table_stays_on_one_line(title, width):
    from forge_ml.console import titled_table

    table = titled_table(title)
    table.add_column("trial")
    table.add_column("r")
    table.add_row("5ae6ebbf", "8")
    out = io.StringIO()
    Console(file=out, width=width, color_system=None).print(table)
    first = out.getvalue().splitlines()[0]
    assert first.strip() == title  # one line, whole


@given(
    rounds=st.lists(
        st.tuples(
            st.sampled_from(["offline", "claude", "offline (fallback)"]),
            st.integers(1, 10_000_000),
            st.integers(0, 100_000),
            st.one_of(st.none(), st.floats(0, 1)),
            st.one_of(st.none(), st.integers(1, 999)),
            st.booleans(),
        ),
        min_size=1,
        max_size=12,
    )
)
def test_the_rounds_table_keeps_every_figure_whole_in_80_columns(rounds):
    from types import SimpleNamespace

    from forge_ml.commands import flywheel

    records = [
        SimpleNamespace(
            round=i + 1,
            planner=planner,
            dataset_size=size,
            examples_added=added,
            dev_accuracy=score,
            gold_accuracy=score,
            version=version,
            promoted=promoted,
            champion_accuracy=score,
        )
        for i, (planner, size, added, score, version, promoted) in enumerate(rounds)
    ]
    out = io.StringIO()
    saved, flywheel.results = flywheel.results, Console(file=out, width=80, color_system=None)
    try:
        flywheel.print_rounds(records)
    finally:
        flywheel.results = saved
    text = out.getvalue()
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= 80
    for r in records:
        score = "-" if r.dev_accuracy is None else f"{r.dev_accuracy:.3f}"
        verdict = f"v{r.version} {'promoted' if r.promoted else 'refused'}" if r.version else "-"
        row = next(line for line in text.splitlines() if line.startswith(f"│ {r.round} "))
        assert f"│ {score} " in row and f"│ {verdict} " in row  # the figures on the round's first line, whole


WORDS = st.text(st.sampled_from("abcdefghij—é"), min_size=1, max_size=12)


@given(st.lists(WORDS, min_size=1, max_size=40), st.integers(min_value=20, max_value=120))
def test_away_from_a_terminal_a_line_is_printed_whole_and_a_table_keeps_the_width(words, width):
    """A log file or a Ray job's log gets each message on one line (a `grep` finds all of it),
    however long; a table is still drawn within the console's width."""
    out = io.StringIO()
    console = MirroredConsole(file=out, width=width, color_system=None)
    line = " ".join(words)
    console.print(line, highlight=False)
    console.print(f"[yellow]{line}[/]", highlight=False)
    assert out.getvalue() == f"{line}\n{line}\n"

    out.truncate(0), out.seek(0)
    table = titled_table("t")
    table.add_column("words", overflow="fold")
    table.add_row(line)
    console.print(table)
    assert all(len(row) <= width for row in out.getvalue().splitlines())
    drawn = "".join(ch for ch in out.getvalue() if not ch.isspace() and not "\u2500" <= ch <= "\u257f")
    assert drawn == "t" + "words" + "".join(line.split())  # folded, nothing cut


def test_the_error_a_mirrored_run_ends_with_is_in_its_log_with_a_traceback_when_unexpected(tmp_path):
    """A flywheel that died of an unexpected error said so on stderr only: its flywheel.log, the
    record of an unattended run, stopped at the last progress line."""
    from forge_ml.console import console, mirrored_to
    from forge_ml.errors import InputError

    path = tmp_path / "run.log"
    with pytest.raises(RuntimeError), mirrored_to(path):
        console.print("trials: 2 running")
        raise RuntimeError(
            "Caught unexpected exception: a worker was killed (token sk-ant-api03-abcdefghijklmnop)"
        )
    with pytest.raises(InputError), mirrored_to(path):
        raise InputError("dataset/gold.jsonl:3: not JSON")
    lines = path.read_text().splitlines()
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d trials: 2 running", lines[0])
    assert re.fullmatch(
        r"\S+ \S+ error: RuntimeError: Caught unexpected exception: a worker was killed \(token \S+\)",
        lines[1],
    )
    assert lines[2] == "Traceback (most recent call last):" and "sk-ant-api03" not in path.read_text()
    assert re.fullmatch(
        r"\S+ \S+ error: dataset/gold.jsonl:3: not JSON", lines[-1]
    )  # bad input: its message alone
    assert not [line for line in lines if "InputError" in line]
