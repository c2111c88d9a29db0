"""generate, patch and augment with Claude through the CLI: the real SDK against the fake Messages
API (Message Batches included), bounded requests, top-ups, admission, cost and MLflow provenance."""

from __future__ import annotations

import json
import re
import threading

import pytest
from conftest import run_cli
from data_checks import (
    KEY,
    OFFLINE,
    REQUEST_COST,
    START,
    Writer,
    assert_dataset_input,
    canonical,
    claude_env,
    cli,
    start_project,
    the_run,
    version_hash,
    write_failures,
)
from fake_anthropic import DEFAULT_USAGE, FakeAnthropic, Reply

from forge_ml.data.examples import read_examples
from forge_ml.data.gold_guard import WITHHELD


@pytest.fixture
def project(example_project):
    """drone-router with 40 canonical examples."""
    return start_project(example_project)


def test_generate_with_claude_sends_bounded_requests_and_records_usage(project):
    before = read_examples(canonical(project))
    writer = Writer(delay_s=0.5)
    with FakeAnthropic() as fake:
        fake.on_tool("write_examples", writer)
        args = ["generate", "--n", "40", "--batch-size", "10", "planner.augment_concurrency=2"]
        # data written by a cheaper model than the one that plans
        result, env = cli(project, *args, "planner.data_model=claude-haiku-4-5", env=claude_env(fake))
        bodies = [r.body for r in fake.requests]
    assert result.returncode == 0, result.stderr
    assert {r["model"] for r in bodies} == {"claude-haiku-4-5"}
    assert writer.most_in_flight == 2  # four requests, two at a time
    assert KEY not in result.stdout + result.stderr
    assert [r["tool_choice"] for r in bodies] == [{"type": "tool", "name": "write_examples"}] * 4
    assert all(r["system"][0]["cache_control"] == {"type": "ephemeral"} for r in bodies)
    mission = (project.root / "mission.md").read_text().splitlines()[2]  # the task description, quoted data
    assert all(
        '<data name="mission.md">' in r["system"][0]["text"] and mission in r["system"][0]["text"]
        for r in bodies
    )
    sent = json.dumps(bodies)
    gold = read_examples(project.root / "dataset" / "gold.jsonl")
    assert not [g.user for g in gold if len(g.user) > 20 and json.dumps(g.user)[1:-1] in sent]

    after = read_examples(canonical(project))
    assert after[:START] == before and len(after) == START + 40
    assert {e.meta["source"] for e in after[START:]} == {"generate"}
    assert env["writer"] == "claude" and env["added"] == 40 and env["requests"] == 4
    assert env["by_category"] == {"ascend": 40} and env["dropped"] == {}
    assert env["input_tokens"] == 4 * DEFAULT_USAGE["input_tokens"]
    assert env["cost_usd"] == pytest.approx(4 * REQUEST_COST)
    assert env["dataset_size"] == START + 40 and env["dataset_hash"] == version_hash(after)

    run = the_run(project, "generate")
    assert run.info.run_id == env["run_id"] and run.info.status == "FINISHED"
    metrics = run.data.metrics
    assert metrics["generate/input_tokens"] == 4 * DEFAULT_USAGE["input_tokens"]
    assert metrics["generate/cost_usd"] == pytest.approx(4 * REQUEST_COST)
    assert metrics["data/added"] == 40 and metrics["data/added/ascend"] == 40
    assert metrics["data/size"] == START + 40 and metrics["data/source/generate"] == START + 40
    assert assert_dataset_input(run, "canonical", canonical(project)) == env["dataset_hash"]
    recorded = json.dumps([run.data.params, run.data.tags])
    assert KEY not in recorded and run.data.params["data.writer"] == "claude"


def test_generate_batch_submits_one_batch_polls_and_costs_half(project):
    with FakeAnthropic(batch_polls_before_end=2) as fake:
        fake.on_tool("write_examples", Writer())
        result, env = cli(
            project, "generate", "--n", "25", "--batch-size", "10", "--batch", env=claude_env(fake)
        )
        (created,) = [r.body for r in fake.requests if r.method == "POST"]
        polls = fake.count(f"/v1/messages/batches/{env['batch_id']}", "GET")
        assert fake.count("/v1/messages") == 0
        assert fake.count(f"/v1/messages/batches/{env['batch_id']}/results", "GET") == 1
    assert result.returncode == 0, result.stderr
    assert [r["custom_id"] for r in created["requests"]] == [
        "generate-0000",
        "generate-0001",
        "generate-0002",
    ]
    assert [r["params"]["tool_choice"]["name"] for r in created["requests"]] == ["write_examples"] * 3
    assert polls >= 3  # in progress twice, then ended (and once more to find the results)
    assert (
        env["added"] == 25 and env["requests"] == 3 and len(read_examples(canonical(project))) == START + 25
    )
    assert env["cost_usd"] == pytest.approx(3 * REQUEST_COST / 2)
    run = the_run(project, "generate")
    assert run.data.tags["forge.batch_id"] == env["batch_id"]
    assert run.data.metrics["generate/cost_usd"] == pytest.approx(3 * REQUEST_COST / 2)
    assert run.data.params["data.batch"] == "True"

    with FakeAnthropic() as fake:  # the same 25 written again, and 5 more: no second batch for the rest
        fake.on_tool("write_examples", Writer())
        result, env = cli(
            project, "generate", "--n", "30", "--batch-size", "30", "--batch", env=claude_env(fake)
        )
        assert fake.count("/v1/messages/batches", "POST") == 1 and fake.count("/v1/messages") == 0
    assert env["added"] == 5 and env["dropped"] == {"duplicate": 25}
    assert "a Message Batch is not asked again: run it again for the 25 short" in result.stderr


def test_a_batch_that_does_not_end_is_waited_for_only_as_long_as_allowed(project):
    before = canonical(project).read_bytes()
    with FakeAnthropic(batch_polls_before_end=10**6) as fake:
        fake.on_tool("write_examples", Writer())
        args = ["generate", "--n", "10", "--batch", "--batch-wait", "1.5"]
        result, env = cli(project, *args, env=claude_env(fake))
    assert result.returncode == 2 and env["error"]["class"] == "RuntimeFault"
    assert "--batch-wait" in env["error"]["message"] and "msgbatch_" in env["error"]["message"]
    assert canonical(project).read_bytes() == before
    run = the_run(project, "generate")
    assert run.info.status == "FAILED" and run.data.tags["forge.batch_id"] in env["error"]["message"]


def test_dry_run_counts_requests_and_estimates_cost_without_calling(project):
    before = canonical(project).read_bytes()
    with FakeAnthropic() as fake:
        fake.on_tool("write_examples", Writer())
        _, plain = cli(
            project, "generate", "--n", "100", "--batch-size", "25", "--dry-run", env=claude_env(fake)
        )
        _, batch = cli(
            project,
            "generate",
            "--n",
            "100",
            "--batch-size",
            "25",
            "--dry-run",
            "--batch",
            env=claude_env(fake),
        )
        assert fake.requests == []
    assert plain["dry_run"] is True and plain["requests"] == 4 and plain["added"] is None
    assert plain["input_tokens"] > 4 * 500  # four prompts of instructions, background and examples
    assert 100 * 10 < plain["output_tokens"] < 100 * 100
    expected = (plain["input_tokens"] * 3.0 + plain["output_tokens"] * 15.0) / 1e6
    assert plain["cost_usd"] == pytest.approx(expected, abs=1e-6)
    assert batch["cost_usd"] == pytest.approx(expected / 2, abs=1e-6)
    _, offline = cli(project, "generate", "--n", "100", "--dry-run", env=OFFLINE)
    assert (offline["writer"], offline["requests"], offline["cost_usd"]) == ("generator", 0, 0)
    assert plain["run_id"] is None and not (project.root / "mlflow.db").exists()
    assert canonical(project).read_bytes() == before


def test_what_drops_leave_short_is_asked_for_again_until_a_request_adds_nothing(project):
    (project.root / "output").mkdir(exist_ok=True)
    write_failures(project, ["hover", "hover", "loiter", "land"])
    known = [
        {"user": e.user, "assistant": e.assistant, "category": e.category}
        for e in read_examples(canonical(project))[:3]
    ]
    sizes: list[tuple[int, int]] = []  # (categories asked for, examples asked for), per request
    lock = threading.Lock()

    def writer(body: dict) -> dict:
        text = body["messages"][0]["content"]
        size = int(re.search(r"Write (\d+) new examples", text)[1])
        shown = json.loads(text.split('<data name="categories">\n', 1)[1].split("\n</data>", 1)[0])
        with lock:
            sizes.append((len(shown), size))
            start, again = 100 * len(sizes), sum(1 for k, _ in sizes if k > 1)
        fresh = [
            {"user": f"climb {n} metres", "assistant": json.dumps({"cmd": "ascend", "args": {"meters": n}})}
            for n in range(start, start + size)
        ]
        if len(shown) == 1:  # the first requests, one per failing category: one duplicate each
            return {"examples": fresh[: size - 1] + known[:1]}
        return {"examples": fresh[:1] + known[:2] if again == 1 else known}

    with FakeAnthropic() as fake:
        fake.on_tool("write_examples", writer)
        result, env = cli(project, "augment", "--n", "8", env=claude_env(fake))
    assert result.returncode == 0, result.stderr
    # 8 split 2:1:1 over the failing categories, 3 duplicates; the 3 short asked for in one request
    # over all three, which adds 1; the 2 short asked again, nothing new: no further request
    assert sorted(sizes[:3]) == [(1, 2), (1, 2), (1, 4)] and sizes[3:] == [(3, 3), (3, 2)]
    assert env["added"] == 6 and env["requests"] == 5 and env["dropped"] == {"duplicate": 3 + 2 + 3}
    assert "1 request(s) for the 3 still short after drops" in result.stderr
    assert len(read_examples(canonical(project))) == START + 6
    assert the_run(project, "augment").data.metrics["generate/requests"] == 5


def test_an_answer_copying_a_gold_input_is_dropped(project):
    gold = read_examples(project.root / "dataset" / "gold.jsonl")[0]
    known = read_examples(canonical(project))[0]
    copies = [
        {"user": gold.user.upper() + "!", "assistant": gold.assistant, "category": gold.category},
        {"user": known.user, "assistant": known.assistant, "category": known.category},
        {"user": "no answer", "assistant": "", "category": "land"},
        {"user": "go somewhere nice", "assistant": "not json", "category": "goto_waypoint"},
        {"user": "go somewhere else", "assistant": '{"command": "goto"}', "category": "goto_waypoint"},
    ]
    with FakeAnthropic() as fake:
        fake.on_tool("write_examples", Writer(extra=copies))
        result, env = cli(project, "generate", "--n", "5", env=claude_env(fake))
    assert result.returncode == 0, result.stderr
    assert env["added"] == 5
    assert env["dropped"] == {
        "matches a gold input": 1,
        "duplicate": 1,
        "empty turn": 1,
        "answer holds no JSON document": 1,  # every answer of the project is one
        "answer fails the scorer's parse": 1,  # JSON, but without the scorer's field
    }
    assert gold.key not in {e.key for e in read_examples(canonical(project))}
    metrics = the_run(project, "generate").data.metrics
    assert metrics["data/dropped/matches_a_gold_input"] == 1
    assert metrics["data/dropped/answer_fails_the_scorers_parse"] == 1
    assert metrics["data/dropped"] == 5


@pytest.mark.parametrize(
    ("status", "code", "fragment"),
    [(400, 2, "all 2 request(s) failed"), (401, 1, "Claude cannot be used (AuthenticationError")],
)
def test_claude_failing_every_request_changes_nothing(project, status, code, fragment):
    before = canonical(project).read_bytes()
    with FakeAnthropic() as fake:
        fake.on_tool("write_examples", lambda body: Reply(status=status))
        result, env = cli(project, "generate", "--n", "20", "--batch-size", "10", env=claude_env(fake))
    assert result.returncode == code and fragment in env["error"]["message"]
    assert env["run_id"] == the_run(project, "generate").info.run_id
    assert canonical(project).read_bytes() == before
    assert the_run(project, "generate").info.status == "FAILED"


def test_patch_with_claude_sends_the_description_quoted(project):
    with FakeAnthropic() as fake:
        fake.on_tool("write_examples", Writer())
        result, env = cli(project, "patch", "climbs given in feet", "--n", "12", env=claude_env(fake))
        assert env["added"] == 12 and env["focus"] == []
        (body,) = [r.body for r in fake.requests]
    assert result.returncode == 0, result.stderr
    assert '<data name="request">\n"climbs given in feet"\n</data>' in body["messages"][0]["content"]
    added = read_examples(canonical(project))[START:]
    assert len(added) == 12 and {e.meta["source"] for e in added} == {"patch"}
    run = the_run(project, "patch")
    assert run.data.tags["forge.patch.description"] == "climbs given in feet"
    assert run.data.metrics["generate/requests"] == 1


def test_augment_with_claude_aims_each_request_at_failing_categories(project):
    (project.root / "output").mkdir(exist_ok=True)
    write_failures(project, ["hover", "hover", "hover", "loiter"])
    with FakeAnthropic() as fake:
        fake.on_tool("write_examples", Writer())
        result, env = cli(project, "augment", "--n", "8", env=claude_env(fake))
        texts = [r.body["messages"][0]["content"] for r in fake.requests]
    assert result.returncode == 0, result.stderr
    assert env["requests"] == 2 and env["added"] == 8 and env["focus"] == ["hover", "loiter"]
    by_size = {int(re.search(r"Write (\d+) new", t)[1]): t for t in texts}
    assert sorted(by_size) == [2, 6]  # 8 split 3:1 like the failures
    categories = '<data name="categories">\n[\n "{}"\n]\n</data>'
    assert categories.format("hover") in by_size[6] and categories.format("loiter") in by_size[2]
    assert '<data name="failure_counts">\n{\n "hover": 3\n}' in by_size[6]  # each request: its own counts
    assert '<data name="failure_counts">\n{\n "loiter": 1\n}' in by_size[2]
    assert not any(re.search(r"x\d", t) for t in texts)  # gold inputs never reach the generator
    assert {e.meta["source"] for e in read_examples(canonical(project))[START:]} == {"augment"}


@pytest.mark.parametrize("command", ["generate", "patch", "audit"])
def test_background_quoting_gold_reaches_a_writer_or_reviewer_without_the_quotes(project, command):
    """BACKGROUND.md may quote gold (a planner's note, a user's paste); whoever writes or rewrites
    examples never sees gold: the quotes are cut out of its prompt, the file stays as it is."""
    gold = [
        g.user for g in read_examples(project.root / "dataset" / "gold.jsonl") if len(g.user.split()) >= 3
    ]
    background = project.root / "BACKGROUND.md"
    background.write_text(
        background.read_text() + f'\n## Learned in round 2\n\nGold missed "{gold[0]}"; feet are never used.\n'
    )
    before = background.read_bytes()
    args = {"generate": ["--n", "5"], "patch": ["hover in gusts", "--n", "5"], "audit": []}[command]
    with FakeAnthropic() as fake:
        fake.on_tool("write_examples", Writer())
        fake.on_tool("review_examples", lambda body: {"reviews": []})
        result = run_cli("-p", str(project.root), command, *args, env=claude_env(fake))
        bodies = [r.body for r in fake.requests]
    assert result.returncode == 0, result.stderr[-3000:]
    assert bodies and background.read_bytes() == before
    for body in bodies:
        system = body["system"][0]["text"]
        assert gold[0] not in system and f'Gold missed \\"{WITHHELD}\\"; feet are never used.' in system
    assert "BACKGROUND.md quotes the gold set (1 place(s)): withheld from the data writer" in result.stderr
