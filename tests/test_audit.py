"""audit through the CLI: the offline rules, --fix, and a fake Claude reviewing in batches."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from command_checks import answer, cli, client_of, record, runs_of
from conftest import FAST, write_jsonl
from fake_anthropic import FakeAnthropic

from forge_ml.data.examples import read_examples

SECRET = "sk-ant-api03-SENTINELaudit0000000000001"


@pytest.fixture
def audit_project(small_project):
    """canonical: 0-1 fine, 2 duplicates 0, 3 conflicts with 1, 4 is a gold input, 5 fails the json_cmd parse."""
    gold_user = read_examples(small_project.root / "dataset" / "gold.jsonl")[0].user
    rows = [
        record("climb five meters", answer("ascend", meters=5), "ascend"),
        record("land now", answer("land"), "land"),
        record("Climb five meters!", answer("ascend", meters=5), "ascend"),
        record("land now", answer("rtl"), "rtl"),
        record(gold_user, answer("hover", duration_s=0), "hover"),
        record("hold still for 10 s", "hover for ten seconds", "hover"),
        record("go home", answer("rtl"), "rtl"),
    ]
    write_jsonl(small_project.root / "dataset" / "canonical.jsonl", rows)
    return small_project


def test_offline_audit_finds_format_duplicates_conflicts_and_gold_overlap(audit_project):
    root = audit_project.root
    canonical = root / "dataset" / "canonical.jsonl"
    before = canonical.read_bytes()
    result, data = cli(root, "audit", "planner=offline")
    assert result.returncode == 0, result.stderr[-3000:]
    assert data["reviewer"] == "rules" and data["examples"] == 7 and data["cost_usd"] is None
    found = {(f["index"], f["check"], f["severity"]) for f in data["findings"]}
    assert found == {
        (2, "duplicate", "warning"),
        (3, "conflict", "error"),
        (4, "gold_overlap", "error"),
        (5, "format", "error"),
    }
    assert data["counts"] == {"error": 3, "warning": 1, "info": 0}
    assert data["fixed"] == [] and data["dropped"] == [] and canonical.read_bytes() == before
    assert "example 0" in next(f["issue"] for f in data["findings"] if f["index"] == 2)
    assert "eval.scorer=json_cmd" in next(f["issue"] for f in data["findings"] if f["index"] == 5)
    assert "hover for ten seconds" not in result.stdout  # --json: people-facing output on stderr
    assert "duplicate of example 0" in result.stderr

    (run,) = runs_of(root, "audit")
    assert run.info.status == "FINISHED" and run.info.run_id == data["run_id"]
    m = run.data.metrics
    assert (m["audit/findings/error"], m["audit/findings/warning"], m["audit/examples"]) == (3, 1, 7)
    assert run.data.tags["forge.audit.reviewer"] == "rules"

    result, data = cli(root, "audit", "--min-severity", "error", "planner=offline")
    assert {f["index"] for f in data["findings"]} == {3, 4, 5}  # the duplicate's warning is not shown
    assert data["counts"] == {"error": 3, "warning": 1, "info": 0}

    result, data = cli(root, "audit", "--fix", "planner=offline")  # gold input still in: nothing written
    assert result.returncode == 1 and data["error"]["class"] == "InputError"
    assert str(canonical) in data["error"]["message"] and "gold" in data["error"]["message"]
    assert canonical.read_bytes() == before and data["dropped"] == []
    assert [p.name for p in canonical.parent.iterdir() if p.name.startswith(".")] == []


def test_offline_fix_drops_exact_duplicates_and_logs_the_previous_file(audit_project):
    root = audit_project.root
    canonical = root / "dataset" / "canonical.jsonl"
    lines = canonical.read_text().splitlines()
    del lines[4]  # the gold input
    wrapped = [
        f"```json\n{answer('loiter', radius_m=20, duration_s=0)}\n```",
        f"Sure! Here is the command: {answer('hover', duration_s=5)} (hovering in place)",
        '{"cmd":"rtl","args":{}}',  # bare, but not spaced like gold's and the seed's answers
    ]
    users = ["circle here", "hang for 5 s", "head home now"]
    lines += [json.dumps(record(u, a, "x")) for u, a in zip(users, wrapped)]
    canonical.write_text("\n".join(lines) + "\n")
    before = canonical.read_bytes()

    result, data = cli(root, "audit", "--fix", "planner=offline")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "offline, --fix drops exact duplicates and unwraps wrapped JSON answers" in result.stderr
    assert {(f["index"], f["check"], f["severity"]) for f in data["findings"] if f["check"] == "form"} == {
        (6, "form", "warning"),
        (7, "form", "warning"),
        (8, "form", "info"),
    }
    assert data["dropped"] == [2] and data["fixed"] == [6, 7, 8] and data["refused"] == []
    after = read_examples(canonical)
    assert [e.user for e in after] == [
        "climb five meters",
        "land now",
        "land now",
        "hold still for 10 s",
        "go home",
        "circle here",
        "hang for 5 s",
        "head home now",
    ]
    assert [e.assistant for e in after[-3:]] == [
        answer("loiter", radius_m=20, duration_s=0),
        answer("hover", duration_s=5),
        answer("rtl"),
    ]
    assert data["previous_hash"] != data["dataset_hash"]

    client, _ = client_of(root)
    run = client.get_run(data["run_id"])
    assert run.data.tags["forge.kind"] == "audit" and run.data.metrics["audit/dropped"] == 1
    assert run.data.tags["forge.audit.previous_hash"] == data["previous_hash"]
    previous = Path(client.download_artifacts(run.info.run_id, "dataset/previous/canonical.jsonl"))
    assert previous.read_bytes() == before
    (dataset,) = run.inputs.dataset_inputs
    assert dataset.tags[0].value == "previous" and dataset.dataset.digest == data["previous_hash"][:36]


def _examples_in(body: dict) -> list[dict]:
    text = body["messages"][0]["content"]
    return json.loads(text.split('<data name="examples">\n', 1)[1].split("\n</data>", 1)[0])


def _review(body: dict) -> dict:
    """A fixed review per example index: 0 a new answer (in a code fence), 1 new turns, 3 a fix breaking
    the format, 4 a new answer as a JSON value, 5 info."""
    reviews = {
        0: {
            "severity": "error",
            "issue": "5 m is a descent here",
            "suggested_fix": f"```json\n{answer('descend', meters=5)}\n```",  # cut to its JSON
        },
        1: {
            "severity": "warning",
            "issue": "ambiguous",
            "suggested_fix": {"user": "land right now", "assistant": answer("land")},
        },
        3: {"severity": "error", "issue": "should be rtl", "suggested_fix": "return to launch please"},
        4: {
            "severity": "error",
            "issue": "not JSON",
            "suggested_fix": json.loads(answer("hover", duration_s=10)),
        },
        5: {"severity": "info", "issue": "short input", "suggested_fix": None},
    }
    rows = [{"index": e["index"], **reviews[e["index"]]} for e in _examples_in(body) if e["index"] in reviews]
    return {"reviews": rows}


def test_claude_audit_reviews_in_batches_and_fixes_what_passes_validation(audit_project):
    root = audit_project.root
    canonical = root / "dataset" / "canonical.jsonl"
    lines = canonical.read_text().splitlines()
    del lines[4]  # no gold input: the fixes can be written
    canonical.write_text("\n".join(lines) + "\n")
    before = canonical.read_bytes()
    with FakeAnthropic() as fake:
        fake.on_tool("review_examples", _review)
        env = {"ANTHROPIC_API_KEY": SECRET, "ANTHROPIC_BASE_URL": fake.base_url}
        result, shown = cli(root, "audit", "--batch-size", "2", *FAST, env=env)
        assert result.returncode == 0, result.stderr[-3000:]
        assert fake.count("/v1/messages") == 3  # 6 examples, 2 per request
        bodies = [r.body for r in fake.requests]
        assert all(b["tool_choice"] == {"type": "tool", "name": "review_examples"} for b in bodies)
        assert all('<data name="mission.md">' in b["system"][0]["text"] for b in bodies)
        assert sorted(e["index"] for b in bodies for e in _examples_in(b)) == list(range(6))
        assert canonical.read_bytes() == before

        result, data = cli(root, "audit", "--fix", "--min-severity", "warning", "--batch-size", "4", env=env)
        assert result.returncode == 0, result.stderr[-3000:]

    assert shown["reviewer"] == "claude" and shown["counts"] == {"error": 5, "warning": 2, "info": 1}
    assert any(f["check"] == "claude" and f["severity"] == "info" for f in shown["findings"])
    assert not any(f["severity"] == "info" for f in data["findings"])  # --min-severity warning
    assert data["fixed"] == [0, 1, 4] and data["dropped"] == [2]
    refused = {r["index"]: r["reason"] for r in data["refused"]}
    assert list(refused) == [3] and "scorer's parse" in refused[3]
    after = read_examples(canonical)
    assert [(e.user, e.assistant) for e in after[:2]] == [
        ("climb five meters", answer("descend", meters=5)),
        ("land right now", answer("land")),
    ]
    assert after[0].meta["audit_fixed"] is True and after[0].meta["source"] == "seed"
    assert (
        after[2].assistant == answer("rtl") and len(after) == 5
    )  # the refused fix left the answer as it was
    assert after[3].assistant == answer("hover", duration_s=10)  # a fix given as a JSON value, as text
    assert data["cost_usd"] > 0

    client, _ = client_of(root)
    run = client.get_run(data["run_id"])
    assert run.data.metrics["audit/requests"] == 2 and run.data.metrics["audit/fixed"] == 3
    assert run.data.metrics["audit/fix_refused"] == 1 and run.data.metrics["audit/cost_usd"] > 0
    previous = Path(client.download_artifacts(run.info.run_id, "dataset/previous/canonical.jsonl"))
    assert previous.read_bytes() == before
    everything = json.dumps([run.data.params, run.data.tags, shown, data]) + result.stderr
    assert SECRET not in everything


def test_a_new_projects_audit_reviews_its_seed_and_writes_nothing(bare_project):
    """Before a first run has merged the seed into canonical, audit reviews the seed file (read-only)."""
    root = bare_project.root
    seed = root / "dataset" / "seed.jsonl"
    write_jsonl(
        seed,
        [
            {"prompt": "the food was great", "completion": "positive"},
            {"prompt": "The food was great!", "completion": "positive"},
            {"prompt": "a gold question", "completion": "positive"},
        ],
    )
    before = seed.read_bytes()
    result, data = cli(root, "audit", "planner=offline")
    assert result.returncode == 0, result.stderr[-3000:]
    assert data["canonical"] == str(seed)
    assert data["examples"] == 3
    issues = {(f["index"], f["issue"].split(":")[0]) for f in data["findings"]}
    assert any(index == 1 and "duplicate" in issue for index, issue in issues), data["findings"]
    assert any(index == 2 and "gold" in issue for index, issue in issues), data["findings"]
    assert seed.read_bytes() == before
    assert not (root / "dataset" / "canonical.jsonl").exists() or not read_examples(
        root / "dataset" / "canonical.jsonl"
    )

    seed.unlink()
    result, data = cli(root, "audit", "planner=offline")
    assert result.returncode == 1
    assert "no examples to audit" in data["error"]["message"] and "seed" in data["error"]["message"]


def _rows(prefix: str, labels: list[str]) -> list[dict]:
    return [{"prompt": f"{prefix} {i}", "completion": label} for i, label in enumerate(labels)]


@pytest.fixture
def label_project(bare_project):
    """A classification project: gold's and the seed's answers are the labels positive and négative."""
    write_jsonl(
        bare_project.root / "dataset" / "gold.jsonl", _rows("gold review", ["positive", "négative"] * 2)
    )
    write_jsonl(
        bare_project.root / "dataset" / "seed.jsonl", _rows("seed review", ["négative", "positive"] * 2)
    )
    return bare_project


def test_labels_spelt_unlike_gold_and_the_seed_are_found_and_respelt(label_project):
    """A classification project (its answers a closed set of labels): canonical answers that fold to
    a label ("Positive.", "negative" for "négative") are respelt by --fix; an answer that folds to
    none ("mixed feelings") is an error gold never accepts, which --fix cannot mend and leaves."""
    root = label_project.root
    canonical = root / "dataset" / "canonical.jsonl"
    written = ["Positive.", "negative", "positive", "mixed feelings", "positive \n", "so-so\n"]
    write_jsonl(canonical, _rows("review", written))
    result, data = cli(root, "audit", "--fix", "planner=offline")
    assert result.returncode == 0, result.stderr[-3000:]
    assert {(f["index"], f["check"], f["severity"], f["suggested_fix"]) for f in data["findings"]} == {
        (0, "form", "warning", "positive"),
        (1, "form", "warning", "négative"),
        (3, "form", "error", None),
        (5, "form", "error", None),
    }
    off_label = [f["issue"] for f in data["findings"] if f["severity"] == "error"]
    assert off_label == [
        f"the answer {answer!r} is none of gold's and the seed's labels (négative, positive)"
        for answer in ("mixed feelings", "so-so")
    ]
    assert data["fixed"] == [0, 1]
    after = [e.assistant for e in read_examples(canonical)]
    assert after == ["positive", "négative", "positive", "mixed feelings", "positive \n", "so-so\n"]


def test_a_reviewers_fix_to_an_answer_outside_the_labels_is_refused(label_project):
    """Claude may suggest a label the task does not have ("mixed" where gold knows positive and
    négative): gold would never accept it, so --fix refuses it; a fix to a label is applied."""
    root = label_project.root
    canonical = root / "dataset" / "canonical.jsonl"
    write_jsonl(canonical, _rows("review", ["positive", "positive", "négative"]))
    fixes = {0: "Négative.", 1: "mixed"}

    def review(body: dict) -> dict:
        shown = [e["index"] for e in _examples_in(body)]
        return {
            "reviews": [
                {"index": i, "severity": "error", "issue": "wrong label", "suggested_fix": fixes[i]}
                for i in shown
                if i in fixes
            ]
        }

    with FakeAnthropic() as fake:
        fake.on_tool("review_examples", review)
        env = {"ANTHROPIC_API_KEY": SECRET, "ANTHROPIC_BASE_URL": fake.base_url}
        result, data = cli(root, "audit", "--fix", *FAST, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert data["fixed"] == [0]
    assert data["refused"] == [
        {"index": 1, "reason": "the fixed answer is none of gold's and the seed's labels"}
    ]
    assert [e.assistant for e in read_examples(canonical)] == ["négative", "positive", "négative"]
