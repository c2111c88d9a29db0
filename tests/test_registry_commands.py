"""`forge-ml eval model=...`, `promote` and `merge` on a real registry: one tiny adapter trained for the module.

The module trains once through the CLI and registers the adapter as version 1 (gated: champion) and
again from a second run as version 2 (challenger). Promote tests register their own model names, so
the project's model keeps v1 as champion for the eval and merge tests.
"""

from __future__ import annotations

import getpass
import json
import re
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from command_checks import judge_handler
from conftest import FAST, run_cli, shrink_jsonl
from fake_anthropic import FakeAnthropic

from forge_ml.config.registry import RegistryConfig
from forge_ml.errors import InputError
from forge_ml.gate import GoldOutcome, _fig
from forge_ml.jobs.evaluate import parse_registry_uri, split_model_argument
from forge_ml.registry import CHAMPION, Registry

COMMON = ["command", "success", "exit_code", "run_id", "config_hash"]
KEYS = {
    "eval": "target accuracy correct total per_category unfinished results_path version judge".split(),  # noqa: SIM905
    "promote": ["model", "version", "decision", "reasons", "p_value", "compared_to", "champion"],
    "merge": ["model", "version", "out", "base", "adapter_run_id"],
}
NAME = "router"
API_KEY = "sk-ant-test-registry-commands-0123456789"


@dataclass
class Trained:
    root: Path
    client: object
    train_run: str  # the run version 1 was registered from
    other_run: str  # the run version 2 was registered from
    adapter: Path
    base: str
    gold: list  # forge_ml Example objects
    failures: list[dict]  # the train run's gold failures
    accuracy: float
    outcome: GoldOutcome
    system_prompt: str


def envelope(result) -> dict:
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1, result.stdout + result.stderr[-3000:]
    return json.loads(lines[0])


def cli(t: Trained, *args: str, env: dict | None = None):
    """Run `forge-ml --json <args>` on the module's project; return (envelope, CompletedProcess)."""
    result = run_cli("-p", str(t.root), "--json", *args, env=env)
    return envelope(result), result


def register_pair(t: Trained, name: str, *, stages: bool = False, better: bool = False) -> Registry:
    """Register model `name`: v1 from the train run (gated: champion), v2 from the other (challenger).

    v2's recorded gold outcome ties v1's, or with `better` has one more gold example right.
    """
    registry = Registry(RegistryConfig(stages=stages), t.client, name)
    first, second = improved_pair(t.outcome) if better else (t.outcome, t.outcome)
    kwargs = {
        "adapter_dir": t.adapter,
        "base": _base_ref(t),
        "system_prompt": t.system_prompt,
        "system_role": True,
        "max_new_tokens": 24,
    }
    v1 = registry.register(t.train_run, outcome=first, **kwargs)
    assert registry.gate(v1, first, RegistryConfig().gate).promote
    registry.register(t.other_run, outcome=second, **kwargs)
    return registry


def improved_pair(outcome: GoldOutcome) -> tuple[GoldOutcome, GoldOutcome]:
    """Two outcomes on the same gold set, the second with one more example right."""

    def with_bits(bits: str) -> GoldOutcome:
        return replace(outcome, outcomes=bits, accuracy=bits.count("1") / len(bits))

    if "0" in outcome.outcomes:
        return outcome, with_bits(outcome.outcomes.replace("0", "1", 1))
    return with_bits(outcome.outcomes.replace("1", "0", 1)), outcome


def _base_ref(t: Trained):
    from forge_ml.models.loader import BaseModelRef

    return BaseModelRef(t.base, None, True)


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Trained:
    from mlflow import MlflowClient

    from forge_ml.data.examples import read_examples
    from forge_ml.project import init_project

    project = init_project(tmp_path_factory.mktemp("regcmd") / NAME, example="drone-router")
    shrink_jsonl(project.root / "dataset" / "canonical.jsonl", 240)
    shrink_jsonl(project.root / "dataset" / "gold.jsonl", 27)
    root = project.root
    result = run_cli("-p", str(root), "--json", "train", *FAST)
    assert result.returncode == 0, result.stderr[-4000:]
    (line,) = (
        result.stdout.strip().splitlines()
    )  # --json: the envelope alone on stdout (Hydra's job log goes to stderr)
    trained_run = json.loads(line)
    client = MlflowClient(tracking_uri=f"sqlite:///{root / 'mlflow.db'}")
    run = client.get_run(trained_run["run_id"])
    losses = {m.step: m.value for m in client.get_metric_history(run.info.run_id, "dev/loss")}
    for epoch in (1, 2):  # one line per epoch, with the figures the run recorded; no trainer log dicts
        assert (
            f"epoch {epoch}/2: train/loss " in result.stderr
            and f"dev/loss {losses[epoch]:.4f}" in result.stderr
        )
    assert "{'loss'" not in result.stderr + result.stdout and "grad_norm" not in result.stderr
    other = client.create_run(run.info.experiment_id)
    client.set_terminated(other.info.run_id)

    gold = read_examples(root / "dataset" / "gold.jsonl")
    failures = [
        json.loads(line) for line in (root / "output" / "eval_failures.jsonl").read_text().splitlines()
    ]
    failed = {f["input"] for f in failures}
    results = json.loads((root / "output" / "eval_results.json").read_text())
    outcome = GoldOutcome(
        accuracy=results["accuracy"],
        per_category={k: v["accuracy"] for k, v in results["per_category"].items()},
        outcomes="".join("0" if ex.user in failed else "1" for ex in gold),
        forbidden_count=0,
        gold_hash=run.data.tags["forge.data.gold_hash"],
        total=len(gold),
    )
    t = Trained(
        root,
        client,
        run.info.run_id,
        other.info.run_id,
        Path(trained_run["adapter"]),
        results["base_model"],
        gold,
        failures,
        results["accuracy"],
        outcome,
        (root / "system_prompt.md").read_text(encoding="utf-8"),
    )
    register_pair(t, NAME)
    return t


def runs_of(t: Trained, kind: str) -> list:
    exp = t.client.get_experiment_by_name(NAME)
    return t.client.search_runs([exp.experiment_id], f"tags.`forge.kind` = '{kind}'")


def artifacts(t: Trained, run_id: str, path: str = "") -> set[str]:
    found = set()
    for item in t.client.list_artifacts(run_id, path or None):
        found |= artifacts(t, run_id, item.path) if item.is_dir else {item.path}
    return found


def snapshot(t: Trained, run_id: str) -> tuple:
    """What a run holds: tags, params, metric histories, artifact paths."""
    run = t.client.get_run(run_id)
    histories = {k: [m.value for m in t.client.get_metric_history(run_id, k)] for k in run.data.metrics}
    return run.data.tags, run.data.params, histories, artifacts(t, run_id)


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
def test_eval_registry_versions_and_a_path_each_in_their_own_run(trained):
    t = trained
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
def test_eval_of_an_unknown_target_exits_1_naming_it(trained, target, fragment):
    t = trained
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
def test_eval_with_claude_as_judge_direct_and_batched(trained):
    t = trained
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
def test_judge_without_an_api_key_or_batch_without_judge_exit_1(trained):
    t = trained
    data, result = cli(t, "eval", "--judge", "claude", *FAST, env={"ANTHROPIC_API_KEY": ""})
    assert result.returncode == 1 and "ANTHROPIC_API_KEY" in data["error"]["message"]
    data, result = cli(t, "eval", "--batch", *FAST)
    assert result.returncode == 1 and "--judge claude" in data["error"]["message"]


# ---- promote ----------------------------------------------------------------------------------


def aliases(t: Trained, name: str) -> dict[str, str]:
    return {k: str(v) for k, v in t.client.get_registered_model(name).aliases.items()}


@pytest.mark.slow
def test_promote_runs_the_gate_on_the_challenger(trained):
    t, name = trained, "router-gated"
    first, second = improved_pair(t.outcome)
    register_pair(t, name, better=True)
    data, result = cli(t, "promote", f"registry.model_name={name}")
    assert result.returncode == 0, result.stderr[-3000:]
    assert list(data) == [*COMMON, *KEYS["promote"], "error"]
    assert data["version"] == "2" and data["decision"] == "promoted" and data["champion"] == "2"
    assert data["compared_to"] == "1" and data["reasons"] == [
        f"gold accuracy {_fig(second.accuracy)} > champion {_fig(first.accuracy)} "
        "(a challenger must be better; min_delta 0.00)"
    ]
    assert aliases(t, name) == {"champion": "2", "challenger": "2"}
    assert t.client.get_model_version(name, "2").tags["forge.gate.decision"] == "promoted"
    run = t.client.get_run(data["run_id"])
    assert run.data.tags["forge.kind"] == "promote" and run.data.tags["forge.promote.decision"] == "promoted"
    assert run.data.tags["forge.promote.model"] == name and run.data.tags["forge.promote.forced"] == "false"


@pytest.mark.slow
def test_promote_refused_then_forced_with_a_reason(trained):
    t, name = trained, "router-forced"
    register_pair(t, name, stages=True)
    data, result = cli(t, "promote", f"registry.model_name={name}", "registry.gate.min_delta=0.01")
    assert result.returncode == 3 == data["exit_code"] and data["success"] is False
    assert data["decision"] == "refused" and data["champion"] == "1" and data["error"] is None
    assert "+ min_delta 0.01" in data["reasons"][0]
    tags = t.client.get_model_version(name, "2").tags
    assert tags["forge.gate.decision"] == "refused" and "forge.force.reason" not in tags
    refused = t.client.get_model_version(name, "2").description  # no round: registered by hand
    assert refused.startswith("by hand — gold ") and refused.endswith(" — refused: " + data["reasons"][0])
    assert aliases(t, name)["champion"] == "1"
    refused_run = t.client.get_run(data["run_id"]).data.tags
    assert refused_run["forge.promote.decision"] == "refused" and refused_run["forge.promote.champion"] == "1"

    start = datetime.now(timezone.utc) - timedelta(seconds=2)
    args = ("promote", "--version", "2", "--force", "--reason", "hand-checked on 40 live prompts")
    data, result = cli(t, *args, f"registry.model_name={name}", "registry.stages=true")
    assert result.returncode == 0, result.stderr[-3000:]
    assert data["decision"] == "forced" and data["champion"] == "2" and data["compared_to"] == "1"
    user = getpass.getuser()
    assert data["reasons"] == [f"forced by {user}: hand-checked on 40 live prompts"]
    tags = t.client.get_model_version(name, "2").tags
    assert (
        tags["forge.force.reason"] == "hand-checked on 40 live prompts" and tags["forge.force.user"] == user
    )
    when = datetime.fromisoformat(tags["forge.force.time"])
    assert start <= when <= datetime.now(timezone.utc)
    assert tags["forge.force.run_id"] == data["run_id"]
    assert tags["forge.gate.decision"] == "refused"  # the gate's own record stays
    assert t.client.get_model_version(name, "2").description == (
        f"by hand — forced to champion by {user}, gate skipped: hand-checked on 40 live prompts"
    )
    assert aliases(t, name) == {"champion": "2", "challenger": "2"}
    assert t.client.get_model_version(name, "2").current_stage == "Production"
    assert t.client.get_model_version(name, "1").current_stage == "Archived"
    forced_run = t.client.get_run(data["run_id"]).data.tags
    assert forced_run["forge.kind"] == "promote" and forced_run["forge.promote.decision"] == "forced"
    assert forced_run["forge.force.user"] == user and forced_run["forge.promote.forced"] == "true"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--force"], "--force needs --reason"),
        (["--force", "--reason", "  "], "--force needs --reason"),
        (["--reason", "because"], "--reason goes with --force"),
        (["--version", "9"], "registered model 'router-untouched' has no version 9"),
    ],
)
def test_promote_bad_input_exits_1_and_changes_nothing(trained, args, fragment):
    t, name = trained, "router-untouched"
    if name not in [m.name for m in t.client.search_registered_models()]:
        register_pair(t, name)
    state = (aliases(t, name), [t.client.get_model_version(name, n).tags for n in ("1", "2")])
    promotes = len(runs_of(t, "promote"))
    data, result = cli(t, "promote", *args, f"registry.model_name={name}")
    assert result.returncode == 1 == data["exit_code"] and data["error"]["class"] == "InputError"
    assert fragment in data["error"]["message"]
    assert (aliases(t, name), [t.client.get_model_version(name, n).tags for n in ("1", "2")]) == state
    assert len(runs_of(t, "promote")) == promotes


# ---- merge ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_merge_exports_a_model_that_answers_like_the_adapter(trained, tmp_path):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from forge_ml.models.generation import generate_batched, render_prompt

    t = trained
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
def test_merge_of_an_unknown_version_exits_1(trained, args, fragment):
    t = trained
    merges = len(runs_of(t, "merge"))
    data, result = cli(t, "merge", *args)
    assert result.returncode == 1 and fragment in data["error"]["message"]
    assert len(runs_of(t, "merge")) == merges
