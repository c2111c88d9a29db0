"""`forge-ml eval model=...` and `merge` on a real registry: the shared tiny adapter of
tests/registry_checks.py (v1 champion, v2 challenger)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from command_checks import judge_handler
from conftest import FAST, run_cli
from fake_anthropic import FakeAnthropic
from registry_checks import API_KEY, COMMON, KEYS, NAME, Trained, artifacts, cli, runs_of, snapshot

from forge_ml.config.registry import RegistryConfig
from forge_ml.errors import InputError
from forge_ml.jobs.evaluate import parse_registry_uri, split_model_argument
from forge_ml.registry import CHAMPION, Registry

# ---- parsing, without a model ---------------------------------------------------------------


def test_model_argument_is_a_registry_uri_or_a_path_never_a_model_group_option():
    assert split_model_argument(["model=tiny", "eval.batch_size=8"]) == (
        None,
        ["model=tiny", "eval.batch_size=8"],
    )
    assert split_model_argument(["model=models:/r@champion", "x=1"]) == ("models:/r@champion", ["x=1"])
    assert split_model_argument(["model=./out/adapter"]) == ("./out/adapter", [])
    assert split_model_argument(["model=~/adapter", "model=tiny"]) == ("~/adapter", ["model=tiny"])
    with pytest.raises(InputError, match="give one model"):
        split_model_argument(["model=models:/r/1", "model=/tmp/a"])
    assert parse_registry_uri("models:/r@champion").alias == "champion"
    ref = parse_registry_uri("models:/r/12")
    assert (ref.name, ref.version, ref.alias) == ("r", "12", None)
    for bad in ("models:/r", "models:/r/latest", "models:/@champion", "models:/r@"):
        with pytest.raises(InputError, match=re.escape(f"model={bad}: expected")):
            parse_registry_uri(bad)


# ---- eval -------------------------------------------------------------------------------------


@pytest.mark.slow
def test_eval_registry_versions_and_a_path_each_in_their_own_run(shared):
    t = shared
    before = {run_id: snapshot(t, run_id) for run_id in (t.train_run, t.other_run)}
    version_tags = {n: t.client.get_model_version(NAME, n).tags for n in ("1", "2")}

    targets = [
        (f"models:/{NAME}@champion", "1"),
        (f"models:/{NAME}/2", "2"),
        (str(t.adapter), None),
    ]
    run_ids = []
    for target, number in targets:
        data, result = cli(t, "eval", f"model={target}", *FAST)
        assert result.returncode == 0, result.stderr[-3000:]
        assert list(data) == [*COMMON, *KEYS["eval"], "error"]
        assert data["target"] == target and data["version"] == number and data["judge"] is None
        # the same adapter, prompt and greedy decoding as training's own gold eval: the same answers
        assert data["accuracy"] == pytest.approx(t.accuracy) and data["total"] == 27
        written = json.loads((t.root / "output" / "eval_results.json").read_text())
        assert written["run_id"] == data["run_id"] and written["target"] == target
        assert written["version"] == number
        failures = [
            json.loads(x) for x in (t.root / "output" / "eval_failures.jsonl").read_text().splitlines()
        ]
        assert failures == t.failures

        run = t.client.get_run(data["run_id"])
        tags, metrics = run.data.tags, run.data.metrics
        assert tags["forge.kind"] == "eval" and tags["forge.eval_target"] == target
        assert tags.get("forge.eval_version") == number
        assert tags["forge.data.gold_hash"] == t.outcome.gold_hash
        assert metrics["gold/accuracy"] == pytest.approx(t.accuracy)
        per_category = {k.removeprefix("gold/accuracy/"): v for k, v in metrics.items() if "accuracy/" in k}
        assert per_category == pytest.approx(data["per_category"]) and len(per_category) == 8
        assert artifacts(t, run.info.run_id) == {"eval/eval_results.json", "eval/eval_failures.jsonl"}
        assert run.info.status == "FINISHED"
        run_ids.append(data["run_id"])

    assert len(set(run_ids) | {t.train_run, t.other_run}) == 5  # each eval is its own run
    # nothing landed in the versions' runs or on the versions themselves
    assert {run_id: snapshot(t, run_id) for run_id in before} == before
    assert {n: t.client.get_model_version(NAME, n).tags for n in ("1", "2")} == version_tags


@pytest.mark.slow
@pytest.mark.parametrize(
    ("target", "fragment"),
    [
        (f"models:/{NAME}@nosuch", f"registered model '{NAME}' has no alias @nosuch"),
        (f"models:/{NAME}/9", f"registered model '{NAME}' has no version 9"),
        (f"models:/{NAME}", f"model=models:/{NAME}: expected models:/<name>@<alias>"),
        ("./no/such/adapter", "model=./no/such/adapter: "),
    ],
)
def test_eval_of_an_unknown_target_exits_1_naming_it(shared, target, fragment):
    t = shared
    results = (t.root / "output" / "eval_results.json").read_bytes()
    evals = len(runs_of(t, "eval"))
    data, result = cli(t, "eval", f"model={target}", *FAST)
    assert result.returncode == 1 == data["exit_code"]
    assert data["error"]["class"] == "InputError" and fragment in data["error"]["message"]
    assert (t.root / "output" / "eval_results.json").read_bytes() == results
    assert len(runs_of(t, "eval")) == evals


def expected_judge(t: Trained) -> tuple[float, dict[str, float]]:
    scores = [1.0 if i % 3 == 0 else 0.0 for i in range(len(t.gold))]
    by_cat: dict[str, list[float]] = {}
    for ex, s in zip(t.gold, scores):
        by_cat.setdefault(ex.category, []).append(s)
    return sum(scores) / len(scores), {k: sum(v) / len(v) for k, v in by_cat.items()}


@pytest.mark.slow
def test_eval_with_claude_as_judge_direct_and_batched(shared):
    t = shared
    accuracy, per_category = expected_judge(t)
    env = {"ANTHROPIC_API_KEY": API_KEY}
    with FakeAnthropic() as fake:
        seen: list[list[int]] = []
        fake.on_tool("judge_answers", judge_handler(seen, drop_once={13}))
        args = ("eval", f"model=models:/{NAME}/2", "--judge", "claude", "--judge-items", "10", *FAST)
        data, result = cli(t, *args, env={**env, "ANTHROPIC_BASE_URL": fake.base_url})
        assert result.returncode == 0, result.stderr[-3000:]
        # 27 answers in requests of 10: 3 requests, then index 13, which one left out, asked for alone
        assert sorted(map(tuple, seen)) == sorted(
            [tuple(range(0, 10)), tuple(range(10, 20)), (13,), tuple(range(20, 27))]
        )
        assert fake.count("/v1/messages") == 4 and fake.count("/v1/messages/batches") == 0
        bodies = [r.body for r in fake.requests]
        assert all(b["tool_choice"] == {"type": "tool", "name": "judge_answers"} for b in bodies)
        assert all(b["system"][0]["cache_control"] == {"type": "ephemeral"} for b in bodies)
        sent = "".join(b["messages"][0]["content"] for b in bodies)
        assert all(json.dumps(ex.user, ensure_ascii=False) in sent for ex in t.gold)  # quoted as data

    judge = data["judge"]
    assert judge["accuracy"] == pytest.approx(accuracy) == pytest.approx(9 / 27)
    assert judge["per_category"] == pytest.approx(per_category)
    assert judge["requests"] == 4 and judge["retried"] == 1 and judge["judged"] == 27
    assert judge["batch_id"] is None and judge["cost_usd"] == pytest.approx(
        4 * (1200 * 3 + 180 * 15 + 1024 * 0.3) / 1e6
    )
    assert data["accuracy"] == pytest.approx(t.accuracy)  # the scorer's figure is untouched
    run = t.client.get_run(data["run_id"])
    metrics, tags = run.data.metrics, run.data.tags
    assert metrics["judge/accuracy"] == pytest.approx(accuracy) and metrics["judge/requests"] == 4
    assert metrics["judge/input_tokens"] == 4 * 1200 and metrics["gold/accuracy"] == pytest.approx(t.accuracy)
    assert metrics["judge/unfinished"] == metrics["gold/unfinished"] == data["unfinished"]  # the same outputs
    assert {k: v for k, v in metrics.items() if k.startswith("judge/accuracy/")} == pytest.approx(
        {f"judge/accuracy/{k}": v for k, v in per_category.items()}
    )
    assert tags["forge.judge"] == "claude" and tags["forge.eval_version"] == "2"
    assert "eval/judge_scores.jsonl" in artifacts(t, data["run_id"])
    scores_file = Path(t.client.download_artifacts(data["run_id"], "eval/judge_scores.jsonl"))
    scores = [json.loads(x) for x in scores_file.read_text().splitlines()]
    assert [s["index"] for s in scores] == list(range(27)) and scores[3]["reason"] == "reason 3"
    assert json.loads((t.root / "output" / "eval_results.json").read_text())["judge"]["requests"] == 4
    assert API_KEY not in json.dumps([tags, run.data.params]) and API_KEY not in result.stderr
    status = run_cli("-p", str(t.root), "status")
    assert status.returncode == 0, status.stderr
    title = f"latest eval (gold) of v2: accuracy {t.accuracy:.3f} ({data['correct']}/27), judge 0.333"
    assert title in status.stdout
    rows = {
        line.split("│")[1].strip(): line.split("│")[5].strip()
        for line in status.stdout.splitlines()
        if line.count("│") == 6
    }  # category │ accuracy │ correct │ total │ judge
    assert rows == {k: f"{v:.3f}" for k, v in per_category.items()}

    with FakeAnthropic(batch_polls_before_end=1) as fake:
        seen = []
        fake.on_tool("judge_answers", judge_handler(seen, drop_once=set()))
        args = ("eval", f"model={t.adapter}", "--judge", "claude", "--batch", "--judge-items", "10", *FAST)
        data, result = cli(t, *args, env={**env, "ANTHROPIC_BASE_URL": fake.base_url})
        assert result.returncode == 0, result.stderr[-3000:]
        assert fake.count("/v1/messages") == 0 and fake.count("/v1/messages/batches", "POST") == 1
        batch = fake.requests[0].body["requests"]
        assert [r["custom_id"] for r in batch] == ["judge-00000", "judge-00001", "judge-00002"]
        assert {r["params"]["tool_choice"]["name"] for r in batch} == {"judge_answers"}
        batch_id = data["judge"]["batch_id"]
        # polled twice (in progress, then ended), and read once more by the SDK for the results URL
        assert fake.count(f"/v1/messages/batches/{batch_id}", "GET") == 3
        assert fake.count(f"/v1/messages/batches/{batch_id}/results", "GET") == 1
    judge = data["judge"]
    assert judge["accuracy"] == pytest.approx(accuracy) and judge["requests"] == 3 and judge["retried"] == 0
    assert judge["cost_usd"] == pytest.approx(0.5 * 3 * (1200 * 3 + 180 * 15 + 1024 * 0.3) / 1e6)
    tags = t.client.get_run(data["run_id"]).data.tags
    assert tags["forge.judge.batch_id"] == batch_id and "forge.eval_version" not in tags


@pytest.mark.slow
def test_judge_without_an_api_key_or_batch_without_judge_exit_1(shared):
    t = shared
    data, result = cli(t, "eval", "--judge", "claude", *FAST, env={"ANTHROPIC_API_KEY": ""})
    assert result.returncode == 1 and "ANTHROPIC_API_KEY" in data["error"]["message"]
    data, result = cli(t, "eval", "--batch", *FAST)
    assert result.returncode == 1 and "--judge claude" in data["error"]["message"]


# ---- merge ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_merge_exports_a_model_that_answers_like_the_adapter(shared, tmp_path):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from forge_ml.models.generation import generate_batched, render_prompt

    t = shared
    data, result = cli(t, "merge")
    assert result.returncode == 0, result.stderr[-3000:]
    assert list(data) == [*COMMON, *KEYS["merge"], "error"]
    out = t.root / "output" / "merged" / f"{NAME}-v1"
    assert data["out"] == str(out) and data["version"] == "1" and data["base"] == t.base
    assert data["adapter_run_id"] == t.train_run
    assert [p.name for p in out.parent.iterdir()] == [f"{NAME}-v1"]  # no staging dir left behind
    record = json.loads((out / "forge_merge.json").read_text())
    assert record["source"] == {
        "model": NAME,
        "version": "1",
        "uri": f"models:/{NAME}/1",
        "aliases": [CHAMPION],
    }
    assert record["adapter_run_id"] == t.train_run and record["base"]["source"] == t.base
    assert record["method"] == "peft.merge_and_unload" and record["merge_run_id"] == data["run_id"]
    assert record["serving"]["system_prompt"] == t.system_prompt
    run = t.client.get_run(data["run_id"])
    tags = run.data.tags
    assert tags["forge.kind"] == "merge" and tags["forge.merge.version"] == "1"
    assert tags["forge.merge.base"] == t.base and tags["forge.merge.adapter_run_id"] == t.train_run
    assert tags["forge.merge.out"] == str(out) and artifacts(t, data["run_id"]) == {"merge/forge_merge.json"}

    merged = AutoModelForCausalLM.from_pretrained(str(out))
    tokenizer = AutoTokenizer.from_pretrained(str(out))
    assert not any("lora" in name for name, _ in merged.named_parameters())
    prompts = [render_prompt(tokenizer, t.system_prompt, ex.user) for ex in t.gold[:6]]
    answers = generate_batched(merged, tokenizer, prompts, batch_size=8, max_new_tokens=24)
    adapter_model = Registry(RegistryConfig(), t.client, NAME).load("1")
    assert answers == adapter_model.predict([ex.user for ex in t.gold[:6]])
    # the merged weights compute what base + adapter compute
    peft_model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(t.base), str(t.adapter))
    ids = tokenizer(prompts[0], return_tensors="pt", add_special_tokens=False)
    with torch.inference_mode():
        assert torch.allclose(merged(**ids).logits, peft_model(**ids).logits, atol=1e-4)

    # a second merge to the same place is refused; an empty --out is filled
    again, result = cli(t, "merge")
    assert result.returncode == 1 and again["error"]["message"].startswith(f"--out: {out} is not empty")
    empty = tmp_path / "export"
    empty.mkdir()
    data, result = cli(t, "merge", "--version", "2", "--out", str(empty))
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((empty / "forge_merge.json").read_text())["source"]["version"] == "2"
    assert (empty / "model.safetensors").is_file() and (empty / "tokenizer.json").is_file()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--version", "9"], f"registered model '{NAME}' has no version 9"),
        (["--alias", "nosuch"], f"registered model '{NAME}' has no alias @nosuch"),
    ],
)
def test_merge_of_an_unknown_version_exits_1(shared, args, fragment):
    t = shared
    merges = len(runs_of(t, "merge"))
    data, result = cli(t, "merge", *args)
    assert result.returncode == 1 and fragment in data["error"]["message"]
    assert len(runs_of(t, "merge")) == merges
