"""A round's data through augment_data: Claude's write_examples against the fake Messages API
(admission, the project's form, a resumed round, the examples shown for the format) and the
project's generator.py offline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import write_jsonl

from forge_ml.augment import allocate, augment_data
from forge_ml.compose import compose_config
from forge_ml.data.examples import read_examples
from forge_ml.planner.plan import ExperimentPlan


@pytest.fixture
def cfg(example_project):
    return compose_config(example_project, ["planner.timeout_s=3", "planner.max_retries=0"])


def _user_text(request) -> str:
    content = request.body["messages"][0]["content"]
    return content if isinstance(content, str) else json.dumps(content)


def test_written_examples_are_validated_deduplicated_and_never_gold(fake, cfg, example_project):
    root: Path = example_project.root
    gold = read_examples(root / "dataset" / "gold.jsonl")
    canonical = read_examples(root / "dataset" / "canonical.jsonl")
    good = [
        {
            "user": f"hover over the pad for {n} seconds please",
            "assistant": json.dumps({"cmd": "hover", "args": {"seconds": n}}),
            "category": "hover",
        }
        for n in range(3, 9)
    ]
    rows = [
        *good,
        {"user": gold[0].user, "assistant": gold[0].assistant, "category": "hover"},  # copies a gold input
        {
            "user": canonical[0].user.upper(),
            "assistant": canonical[0].assistant,
            "category": "x",
        },  # duplicate
        {"user": "fly in a circle", "assistant": "sure, circling now", "category": "loiter"},  # not JSON
        {"user": "", "assistant": "{}", "category": "hover"},
    ]
    fake.on_tool("write_examples", lambda body: {"examples": rows})
    plan = ExperimentPlan(
        hypothesis="h", search_space={}, num_samples=2, augment_focus=["hover"], augment_n=10
    )
    from forge_ml.llm import make_client

    result = augment_data(cfg, example_project, plan, 4, failures=[], claude=make_client(cfg.planner))
    assert result.writer == "claude" and result.added == 6
    # 4 short of 10: asked again, the same rows came back, nothing new, so no third call
    assert [_user_text(r).split(" for ")[0] for r in fake.requests] == [
        "Write 10 new examples",
        "Write 4 new examples",
    ]
    assert result.dropped == {
        "matches a gold input": 2,
        "duplicate": 1 + 7,
        "answer holds no JSON document": 2,
        "empty turn": 2,
    }
    after = read_examples(root / "dataset" / "canonical.jsonl")
    assert len(after) == len(canonical) + 6
    assert {e.key for e in gold}.isdisjoint(e.key for e in after)
    assert all(
        e.meta == {"category": "hover", "source": "augment", "round": 4, "focus": "hover"} for e in after[-6:]
    )
    assert fake.requests[0].body["tool_choice"]["name"] == "write_examples"
    assert gold[0].user not in json.dumps(fake.requests[0].body)  # gold never reaches the generator
    again = augment_data(cfg, example_project, plan, 4, failures=[], claude=make_client(cfg.planner))
    assert again.resumed and len(read_examples(root / "dataset" / "canonical.jsonl")) == len(after)


def test_a_round_finds_what_it_wrote_by_its_run_not_by_its_number(fake, cfg, example_project):
    """canonical copied from another project (or kept over a fresh start) holds `augment` examples
    of a round 1: this project's round 1 still writes its own, and only a resume of the same round
    run finds them already written."""
    root: Path = example_project.root
    path = root / "dataset" / "canonical.jsonl"
    earlier = {"source": "augment", "round": 1, "focus": "hover"}
    foreign = [
        {
            "messages": [
                {"role": "user", "content": f"hover by the old gate for {n} s"},
                {"role": "assistant", "content": json.dumps({"cmd": "hover", "args": {"seconds": n}})},
            ],
            "meta": {**earlier, "category": "hover"} | ({"run": "0" * 32} if n % 2 else {}),
        }
        for n in range(10, 16)
    ]
    seed = read_examples(root / "dataset" / "seed.jsonl")  # merged as a flywheel run merges it, last
    write_jsonl(path, foreign + [e.to_record() for e in read_examples(path) + seed])
    before = len(read_examples(path))
    fake.on_tool(
        "write_examples",
        lambda body: {
            "examples": [
                {
                    "user": f"float above pad {n} for a bit",
                    "assistant": json.dumps({"cmd": "hover"}),
                    "category": "hover",
                }
                for n in range(4)
            ]
        },
    )
    plan = ExperimentPlan(
        hypothesis="h", search_space={}, num_samples=2, augment_focus=["hover"], augment_n=4
    )
    from forge_ml.llm import make_client

    run_id = "ab" * 16
    first = augment_data(
        cfg, example_project, plan, 1, failures=[], claude=make_client(cfg.planner), run_id=run_id
    )
    assert not first.resumed and first.added == 4 and first.writer == "claude"
    after = read_examples(path)
    assert len(after) == before + 4 and all(
        e.meta["run"] == run_id and e.meta["round"] == 1 for e in after[-4:]
    )
    again = augment_data(
        cfg, example_project, plan, 1, failures=[], claude=make_client(cfg.planner), run_id=run_id
    )
    assert again.resumed and again.added == 4 and len(read_examples(path)) == len(after)
    assert again.report()[0] == f"  data: +4 examples (written before the resume), {len(after)} in canonical"
    assert fake.count("/v1/messages") == 1
    shown = json.loads(
        _user_text(fake.requests[0]).split('<data name="examples">', 1)[1].split("</data>", 1)[0]
    )
    assert len(shown) == 8 and {e["user"] for e in shown} <= {
        e.user for e in seed
    }  # the user's own, not written
    hover = [e.user for e in seed if e.category == "hover"]
    assert [e["user"] for e in shown[: len(hover)]] == hover  # the focus first
    others = [e["category"] for e in shown[len(hover) :]]
    assert len(set(others)) == len(others) and "hover" not in others  # then one of each other category


def test_written_examples_are_brought_into_the_projects_form(fake, cfg, example_project):
    """Claude's rows as a real one writes them now and then: JSON in a code fence or after a
    sentence, categories in another case or with spaces, more rows than asked for."""
    root: Path = example_project.root
    before = read_examples(root / "dataset" / "canonical.jsonl")

    def answer(n: int) -> str:
        return json.dumps({"cmd": "hover", "args": {"seconds": n}})

    wrappers = [
        lambda a: a,
        lambda a: f"```json\n{a}\n```",
        lambda a: f"Here is the command:\n{a}",
        lambda a: f"```\n{a}\n```\nThis hovers in place.",
    ]
    spellings = ["hover", "Hover", "HOVER", " hover "]
    rows = [
        {
            "user": f"hang in the air for {n} seconds",
            "assistant": wrappers[n % 4](answer(n)),
            "category": spellings[n // 4 % 4],
        }
        for n in range(12)
    ]
    rows[8]["assistant"] = json.loads(answer(8))  # an object where the tool asks for a string
    fake.on_tool("write_examples", lambda body: {"examples": rows})
    plan = ExperimentPlan(
        hypothesis="h", search_space={}, num_samples=2, augment_focus=["Hover", "HOVER"], augment_n=10
    )
    from forge_ml.llm import make_client

    result = augment_data(cfg, example_project, plan, 2, failures=[], claude=make_client(cfg.planner))
    assert result.added == 10 and result.dropped == {"beyond the number asked for": 2}
    # rows 0..9: wrapped unless n % 4 == 0 (7 of 10); respelt unless n // 4 % 4 == 0 (6 of 10)
    assert result.mended == {
        "answer unwrapped to its JSON": 7,
        "category respelt": 6,
        "answer given as a JSON value, written as text": 1,
    }
    added = read_examples(root / "dataset" / "canonical.jsonl")[len(before) :]
    assert [e.assistant for e in added] == [answer(n) for n in range(10)]
    assert {e.category for e in added} == {"hover"} and {e.meta["focus"] for e in added} == {"hover"}
    assert "Write 10 new examples for the categories hover " in _user_text(fake.requests[0])
    assert result.metrics()["data/mended/answer_unwrapped_to_its_JSON"] == 7


def test_offline_data_is_split_in_proportion_to_gold_failures():
    failures = [{"category": "hover"}] * 6 + [{"category": "land"}] * 3 + [{"category": "rtl"}]
    assert allocate(20, ["hover", "land", "rtl"], failures) == [(["hover"], 12), (["land"], 6), (["rtl"], 2)]
    assert allocate(7, ["hover", "land"], failures) == [(["hover"], 5), (["land"], 2)]
    assert allocate(10, ["hover", "loiter"], []) == [(["hover", "loiter"], 10)]  # no counts: one even call
    assert allocate(10, [], failures) == [([], 10)]


def test_a_generator_may_write_trl_prompt_completion_rows(cfg, example_project):
    """generator.py rows as TRL prompt-completion pairs (strings, or lists of turns) are admitted like messages."""
    (example_project.root / "generator.py").write_text(
        "import json\n"
        "def generate(n, *, seed=0, focus=None):\n"
        "    answer = json.dumps({'cmd': 'land', 'args': {}})\n"
        "    meta = {'category': 'land'}\n"
        "    return [\n"
        "        {'prompt': f'please land now {seed} {i}', 'completion': answer, 'meta': meta} if i % 2 else\n"
        "        {'prompt': [{'role': 'user', 'content': f'land right away {seed} {i}'}],\n"
        "         'completion': [{'role': 'assistant', 'content': answer}], 'meta': meta}\n"
        "        for i in range(n)\n"
        "    ] + [{'prompt': 'no answer'}, {'prompt': [{'role': 'system', 'content': 'x'}], 'completion': []}]\n"
    )
    plan = ExperimentPlan(hypothesis="h", search_space={}, num_samples=2, augment_focus=["land"], augment_n=6)
    result = augment_data(cfg, example_project, plan, 1, failures=[])
    assert result.added == 6
    added = read_examples(example_project.root / "dataset" / "canonical.jsonl")[-6:]
    assert (
        sorted(" ".join(e.user.split()[:3]) for e in added)
        == ["land right away"] * 3 + ["please land now"] * 3
    )
    assert {e.assistant for e in added} == {json.dumps({"cmd": "land", "args": {}})}
    assert {e.category for e in added} == {"land"} and all(e.meta["source"] == "augment" for e in added)
    canonical = (example_project.root / "dataset" / "canonical.jsonl").read_text().splitlines()
    assert all("messages" in json.loads(line) for line in canonical[-6:])


def test_offline_augment_uses_the_project_generator_and_refuses_garbage(cfg, example_project):
    plan = ExperimentPlan(hypothesis="h", search_space={}, num_samples=2, augment_focus=["rtl"], augment_n=25)
    result = augment_data(cfg, example_project, plan, 1, failures=[])
    added = read_examples(example_project.root / "dataset" / "canonical.jsonl")[-result.added :]
    assert result.writer == "generator" and result.added == 25
    assert {e.category for e in added} == {"rtl"} and all(e.meta["source"] == "augment" for e in added)
    (example_project.root / "generator.py").write_text(
        "def generate(n, *, seed=0, focus=None):\n    return [42] * n\n"
    )
    with pytest.raises(Exception, match="none of them an example") as info:
        augment_data(cfg, example_project, plan, 2, failures=[])
    assert info.value.exit_code == 1
    write_jsonl(example_project.root / "scratch.jsonl", [])
