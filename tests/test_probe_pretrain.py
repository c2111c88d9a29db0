"""probe and pretrain through the CLI: a tiny pretrain probed before and after, offline and with a fake Claude judge; every command's pinned --json keys."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from command_checks import KEYS, cli, client_of, runs_of
from conftest import FAST, run_cli, shrink_jsonl, write_jsonl
from fake_anthropic import FakeAnthropic

from forge_ml.jobs.probe import token_f1
from forge_ml.project import init_project

SECRET = "sk-ant-api03-SENTINELaudit0000000000001"
OFFLINE = [*FAST, "planner=offline"]
PROBE = [
    {"question": "What does RTL mean?", "ideal": "Return to launch."},
    {"question": "What does loiter mean?", "ideal": "Circling a point."},
    {"question": "What unit is altitude in?", "ideal": "Meters."},
]
# Short blocks and a high learning rate: the random tiny model learns the corpus in 4 short epochs.
PRETRAIN = [*FAST, "training.batch_size=8", "training.max_seq_length=64", "training.learning_rate=1e-2"]


def test_every_command_declares_its_pinned_keys():
    from forge_ml.commands import all_commands

    declared = {c.name: list(c.keys) for c in all_commands()}
    assert {name: declared[name] for name in KEYS} == KEYS


def test_token_f1_figures():
    assert token_f1("Return to launch.", "return to LAUNCH") == 1.0
    assert token_f1("the drone flies home", "the drone") == pytest.approx(2 * 1.0 * 0.5 / 1.5)
    assert token_f1("Meters.", "feet") == 0.0
    assert token_f1("Meters.", "") == 0.0


# ---- pretrain and probe -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    """A small project with a probe, a corpus that teaches its answers, and one pretrain (4 epochs)."""
    root = tmp_path_factory.mktemp("pretrain") / "small"
    project = init_project(root, example="drone-router")
    shrink_jsonl(root / "dataset" / "canonical.jsonl", 240)
    shrink_jsonl(root / "dataset" / "gold.jsonl", 27)
    (root / "system_prompt.md").write_text("Answer the question.\n")
    write_jsonl(root / "dataset" / "probe.jsonl", PROBE)
    corpus = root / "dataset" / "corpus"
    (corpus / "notes").mkdir(parents=True)
    chats = [
        "<|im_start|>system\nAnswer the question.<|im_end|>\n"
        f"<|im_start|>user\n{p['question']}<|im_end|>\n<|im_start|>assistant\n{p['ideal']}<|im_end|>\n"
        for p in PROBE
    ]
    write_jsonl(corpus / "chats.jsonl", [{"text": c} for c in chats * 30])
    (corpus / "notes" / "rtl.md").write_text("# RTL\nReturn to launch flies the drone home.\n")
    (corpus / "table.csv").write_text("a,b\n1,2\n")
    result, data = cli(root, "pretrain", "--epochs", "4", *PRETRAIN)
    assert result.returncode == 0, result.stderr[-3000:]
    return project, result, data


def test_pretrain_merges_a_loadable_model_and_records_the_run(pretrained):
    from hydra.core.global_hydra import GlobalHydra
    from transformers import AutoModelForCausalLM

    from forge_ml.compose import compose_config
    from forge_ml.models.loader import load_base_model, load_tokenizer, resolve_base

    project, result, data = pretrained
    root = project.root
    merged = root / "output" / "pretrain_merged"
    assert data["merged_dir"] == str(merged) and data["method"] == "lora" and data["epochs"] == 4
    assert (data["files"], data["documents"]) == (2, 91)
    assert data["ignored"] == [str(root / "dataset" / "corpus" / "table.csv")]
    assert "table.csv: ignored" in result.stderr.replace("\n", "")
    assert "forge-ml train model.name_or_path=output/pretrain_merged" in result.stderr.replace("\n", "")
    losses = data["train_loss"]
    assert len(losses) == 4 and losses[-1] < losses[0] / 2
    assert data["optimizer_steps"] % 4 == 0 and data["optimizer_steps"] >= 20  # 4 epochs of whole batches
    assert f"{data['optimizer_steps']} optimizer step(s) at learning rate 0.01" in result.stderr.replace(
        "\n", ""
    )
    assert "optimizer step(s) in all" not in result.stderr  # enough steps: no warning
    leftovers = [p.name for p in (root / "output").iterdir() if p.name.startswith(".pretrain_merged")]
    assert leftovers == [] and not list((root / "output").glob("tmp/pretrain-*"))

    model = AutoModelForCausalLM.from_pretrained(merged)
    assert not any("lora" in name for name in model.state_dict())  # merged: plain weights, no adapter
    assert (merged / "tokenizer.json").is_file()

    (run,) = runs_of(root, "pretrain")
    assert run.info.run_id == data["run_id"] and run.info.status == "FINISHED"
    assert run.data.params["pretrain.optimizer_steps"] == str(data["optimizer_steps"])
    assert run.data.tags["forge.corpus_hash"] == data["corpus_hash"]
    assert run.data.tags["forge.pretrain.merged_dir"] == str(merged)
    client, _ = client_of(root)
    history = client.get_metric_history(run.info.run_id, "train/loss")
    assert [(h.step, round(h.value, 5)) for h in history] == [
        (i + 1, round(v, 5)) for i, v in enumerate(losses)
    ]
    (dataset,) = run.inputs.dataset_inputs
    assert dataset.dataset.digest == data["corpus_hash"][:36] and dataset.tags[0].value == "pretraining"

    GlobalHydra.instance().clear()  # the project's own config takes the merged model as its base
    cfg = compose_config(project, [*FAST, "model.name_or_path=output/pretrain_merged"])
    GlobalHydra.instance().clear()
    ref = resolve_base(cfg, project, [])
    assert ref.source == str(merged) and not ref.built_locally
    record = json.loads((merged / "forge_pretrain.json").read_text())
    assert record["run_id"] == data["run_id"] and record["corpus_hash"] == data["corpus_hash"]
    assert record["base"]["provenance"]["kind"] == "tiny" and record["epochs"] == 4
    assert (
        ref.provenance.kind == "local"
        and f"pretrained by forge-ml (run {data['run_id']}" in ref.provenance.note
    )
    assert "<|im_start|>" in load_tokenizer(ref, cfg.model, project).chat_template
    loaded = load_base_model(ref, cfg)
    name = "model.embed_tokens.weight"
    assert loaded.state_dict()[name].equal(model.state_dict()[name])


def test_probe_pre_post_and_compare_offline(pretrained):
    project, _, pretrain = pretrained
    root = project.root
    result, pre = cli(root, "probe", "--tag", "pre", *OFFLINE)
    assert result.returncode == 0, result.stderr[-3000:]
    assert pre["judge"] == "token_f1" and pre["target"].startswith("base model ")
    result, post = cli(root, "probe", "--tag", "post", "--model", "output/pretrain_merged", *OFFLINE)
    assert result.returncode == 0, result.stderr[-3000:]
    assert post["target"] == pretrain["merged_dir"]
    for data in (pre, post):
        assert [i["question"] for i in data["items"]] == [p["question"] for p in PROBE]
        for item, probe in zip(data["items"], PROBE):
            assert item["score"] == token_f1(probe["ideal"], item["answer"])
        assert data["score"] == pytest.approx(sum(i["score"] for i in data["items"]) / 3)
    # The post answers come from the pretrained weights: they differ from the random base's.
    # (How much 4 epochs on a random tiny model learn varies with the machine; the score is not asserted.)
    assert [i["answer"] for i in post["items"]] != [i["answer"] for i in pre["items"]]

    result, compared = cli(root, "probe", "--compare", *OFFLINE)
    assert result.returncode == 0, result.stderr[-3000:]
    assert compared["pre"]["run_id"] == pre["run_id"] and compared["post"]["run_id"] == post["run_id"]
    assert compared["delta"] == pytest.approx(post["score"] - pre["score"])
    rows = compared["per_question"]
    assert [r["question"] for r in rows] == [p["question"] for p in PROBE]
    for row, a, b in zip(rows, pre["items"], post["items"]):
        assert (row["pre"], row["post"]) == (a["score"], b["score"])
        assert row["delta"] == pytest.approx(b["score"] - a["score"])
    assert "overall" in result.stderr and compared["run_id"] is None

    status = json.loads(run_cli("-p", str(root), "--json", "status").stdout)  # the probe and corpus too
    assert (status["datasets"]["probe"], status["datasets"]["corpus"]) == (3, 3)
    table = run_cli("-p", str(root), "status").stdout
    assert re.search(r"probe\s+│ 3\s+│ dataset/probe\.jsonl", table) and re.search(
        r"corpus\s+│ 3 file\(s\)", table
    )

    client, _ = client_of(root)
    run = client.get_run(post["run_id"])
    assert run.data.tags["forge.probe_tag"] == "post" and run.data.tags["forge.kind"] == "probe"
    assert run.data.metrics["probe/score"] == pytest.approx(post["score"])
    assert run.data.metrics["probe/score/2"] == pytest.approx(post["items"][2]["score"])
    items = json.loads(Path(client.download_artifacts(run.info.run_id, "probe/items.json")).read_text())
    assert [i["answer"] for i in items] == [i["answer"] for i in post["items"]]


def _judge(body: dict) -> dict:
    text = body["messages"][0]["content"]
    items = json.loads(text.split('<data name="answers">\n', 1)[1].split("\n</data>", 1)[0])
    return {"scores": [{"index": i["index"], "score": 0.25 * (i["index"] + 1), "reason": "r"} for i in items]}


def test_probe_with_the_claude_judge(pretrained):
    project, _, _ = pretrained
    with FakeAnthropic() as fake:
        fake.on_tool("judge_answers", _judge)
        env = {"ANTHROPIC_API_KEY": SECRET, "ANTHROPIC_BASE_URL": fake.base_url}
        args = (
            "probe",
            "--tag",
            "post",
            "--model",
            "output/pretrain_merged",
            *FAST,
            "planner.augment_batch=2",
        )
        result, data = cli(project.root, *args, env=env)
        assert result.returncode == 0, result.stderr[-3000:]
        assert fake.count("/v1/messages") == 2  # 3 items, 2 per request
        bodies = [r.body for r in fake.requests]
        assert {b["tool_choice"]["name"] for b in bodies} == {"judge_answers"}
        assert any('"reference": "Return to launch."' in b["messages"][0]["content"] for b in bodies)
    assert data["judge"] == "claude" and [i["score"] for i in data["items"]] == [0.25, 0.5, 0.75]
    assert [i["reason"] for i in data["items"]] == ["r", "r", "r"]
    assert data["score"] == pytest.approx(0.5) and data["cost_usd"] > 0
    client, _ = client_of(project.root)
    run = client.get_run(data["run_id"])
    assert run.data.tags["forge.probe.judge"] == "claude" and run.data.metrics["judge/requests"] == 2
    assert run.data.metrics["judge/cost_usd"] == pytest.approx(data["cost_usd"])
    assert SECRET not in json.dumps([run.data.params, run.data.tags, data])

    # a pre probe scored offline, token F1, is no baseline for Claude's scores: --compare says so
    result, pre = cli(project.root, "probe", "--tag", "pre", *OFFLINE)
    assert result.returncode == 0, result.stderr[-3000:]
    result, compared = cli(project.root, "probe", "--compare", *OFFLINE)
    said = compared["error"]["message"]
    assert result.returncode == 1 and compared["delta"] is None
    assert f"pre probe (run {pre['run_id'][:8]}) was scored by token_f1" in said
    assert f"post probe (run {data['run_id'][:8]}) by claude" in said and "probe the pre side again" in said


def register_zero_adapter(project, cfg, base, name: str):
    """A zero-initialised LoRA adapter on `base`, registered as a version of the project's model
    from a fresh finished run; return the version."""
    from peft import LoraConfig, get_peft_model

    from forge_ml.gate import GoldOutcome
    from forge_ml.models.loader import load_base_model, load_tokenizer
    from forge_ml.registry import Registry

    adapter = project.root / "output" / name
    model = get_peft_model(load_base_model(base, cfg), LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    model.save_pretrained(adapter)
    load_tokenizer(base, cfg.model, project).save_pretrained(adapter)
    client, exp = client_of(project.root)
    run_id = client.create_run(exp).info.run_id
    client.set_terminated(run_id)
    return Registry.for_project(cfg, project).register(
        run_id,
        adapter_dir=adapter,
        base=base,
        system_prompt="Answer the question.",
        system_role=True,
        max_new_tokens=24,
        outcome=GoldOutcome(0.0, {}, "0", 0, "gold", 1),
    )


def test_probe_a_registered_version(pretrained):
    """A zero-initialised LoRA adapter on the tiny base, registered: it answers as the base does."""
    from hydra.core.global_hydra import GlobalHydra

    from forge_ml.compose import compose_config
    from forge_ml.jobs.pretrain import configured_base

    project, _, _ = pretrained
    root = project.root
    GlobalHydra.instance().clear()
    cfg = compose_config(project, OFFLINE)
    GlobalHydra.instance().clear()
    base = configured_base(cfg, project)
    version = register_zero_adapter(project, cfg, base, "zero-adapter")
    client, _ = client_of(root)
    client.set_registered_model_alias(version.name, "champion", version.version)

    result, base_probe = cli(root, "probe", "--tag", "pre", *OFFLINE)
    result, data = cli(root, "probe", "--tag", "post", "--model", "models:/small@champion", *OFFLINE)
    assert result.returncode == 0, result.stderr[-3000:]
    assert data["target"] == f"models:/small@champion (v{version.version})"
    assert [i["answer"] for i in data["items"]] == [i["answer"] for i in base_probe["items"]]

    result, data = cli(root, "probe", "--tag", "post", "--model", "models:/other/1", *OFFLINE)
    assert result.returncode == 1 and "'small'" in data["error"]["message"]


def test_a_pretrained_base_that_versions_name_is_kept_and_the_next_pretrain_goes_beside_it(pretrained):
    """A version trained on output/pretrain_merged: a second pretrain leaves that directory as it was."""
    from hydra.core.global_hydra import GlobalHydra

    from forge_ml.compose import compose_config
    from forge_ml.models.loader import resolve_base

    project, _, first = pretrained
    root = project.root
    merged = root / "output" / "pretrain_merged"
    GlobalHydra.instance().clear()
    cfg = compose_config(project, [*OFFLINE, "model.name_or_path=output/pretrain_merged"])
    GlobalHydra.instance().clear()
    base = resolve_base(cfg, project, [])
    version = register_zero_adapter(project, cfg, base, "adapter-on-merged")
    assert version.tags["forge.base.note"].startswith(f"pretrained by forge-ml (run {first['run_id']}")
    before = {p.name: p.read_bytes() for p in merged.iterdir()}

    result, data = cli(root, "pretrain", "--epochs", "1", *PRETRAIN)
    assert result.returncode == 0, result.stderr[-3000:]
    assert {p.name: p.read_bytes() for p in merged.iterdir()} == before  # the versions' base, untouched
    beside = root / "output" / f"pretrain_merged-{data['run_id'][:8]}"
    assert data["merged_dir"] == str(beside) and data["kept_base_of_versions"] == [str(version.version)]
    assert json.loads((beside / "forge_pretrain.json").read_text())["run_id"] == data["run_id"]
    said = result.stderr.replace("\n", "")
    assert f"base of registered version(s) {version.version}: kept as it was" in said
    assert f"forge-ml train model.name_or_path=output/pretrain_merged-{data['run_id'][:8]}" in said
    assert "this run trains on top of it" not in said  # it started from the configured tiny base

    # a project whose config names the pretrained model as its base: the next pretrain says it builds on it
    result, on_top = cli(
        root, "pretrain", "--epochs", "1", *PRETRAIN, "model.name_or_path=output/pretrain_merged"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    said = " ".join(result.stderr.split())
    assert f"note: the base is {merged}, itself pretrained by forge-ml (run {first['run_id']}" in said
    assert "this run trains on top of it" in said
    record = json.loads((Path(on_top["merged_dir"]) / "forge_pretrain.json").read_text())
    assert record["base"]["provenance"]["note"].startswith(f"pretrained by forge-ml (run {first['run_id']}")


# ---- bad input ----------------------------------------------------------------------------------------


def test_bad_input_exits_1_naming_the_thing_and_writes_nothing(small_project):
    root = small_project.root
    corpus = root / "dataset" / "corpus"
    result, data = cli(root, "pretrain", *FAST)
    assert result.returncode == 1 and str(corpus) in data["error"]["message"]
    corpus.mkdir()
    (corpus / "notes.pdf").write_bytes(b"%PDF")
    (corpus / "empty.txt").write_text("  \n")
    result, data = cli(root, "pretrain", *FAST)
    assert result.returncode == 1 and f"{corpus}: the corpus is empty" in data["error"]["message"]
    result, data = cli(root, "pretrain", "--epochs", "0")
    assert result.returncode == 1 and "--epochs 0" in data["error"]["message"]

    probe = root / "dataset" / "probe.jsonl"
    result, data = cli(root, "probe", "--tag", "pre", *OFFLINE)
    assert result.returncode == 1 and f"{probe}: probe file not found" in data["error"]["message"]
    probe.write_text("\n")
    result, data = cli(root, "probe", "--tag", "pre", *OFFLINE)
    assert result.returncode == 1 and f"{probe}: the probe is empty" in data["error"]["message"]
    probe.write_text('{"question": "q"}\n')
    result, data = cli(root, "probe", "--tag", "pre", *OFFLINE)
    assert result.returncode == 1 and f"{probe}:1: 'ideal'" in data["error"]["message"]
    probe.write_bytes(b'{"question": "caf\xe9", "ideal": "x"}\n')  # Latin-1: status counts it, probe names it
    status = run_cli("-p", str(root), "--json", "status")
    assert status.returncode == 0 and json.loads(status.stdout)["datasets"]["probe"] == 1, status.stderr[
        -2000:
    ]
    result, data = cli(root, "probe", "--compare")
    assert result.returncode == 1 and "no finished probe run tagged 'pre'" in data["error"]["message"]
    result, data = cli(root, "probe", "--tag", "later")
    assert result.returncode == 1 and "--tag 'later'" in data["error"]["message"]

    result, data = cli(root, "audit", "--min-severity", "fatal")
    assert result.returncode == 1 and "--min-severity 'fatal'" in data["error"]["message"]

    assert not (root / "output" / "pretrain_merged").exists()
    assert runs_of(root, "pretrain") == [] and runs_of(root, "probe") == []


@pytest.mark.parametrize(
    ("ratio", "blocks", "epochs", "batch", "accum", "max_steps", "expected"),
    [
        (0.03, 5, 2, 16, 1, -1, 0),  # 2 steps: no step is spent at a learning rate of 0
        (0.03, 1600, 2, 16, 1, -1, 6),  # 200 steps: 6, as Hugging Face's own rounding gives
        (0.1, 100, 3, 8, 2, -1, 2),  # 3 x ceil(13 / 2) = 21 steps
        (0.5, 100, 3, 8, 1, 10, 5),  # max_steps decides
        (0.0, 10_000, 5, 1, 1, -1, 0),
    ],
)
def test_pretrain_warmup_counts_whole_steps_rounded_down(
    ratio, blocks, epochs, batch, accum, max_steps, expected
):
    from forge_ml.config import ForgeConfig
    from forge_ml.jobs.pretrain import warmup_steps

    cfg = ForgeConfig()
    t = cfg.training
    t.warmup_ratio, t.epochs, t.batch_size, t.grad_accum, t.max_steps = ratio, epochs, batch, accum, max_steps
    assert warmup_steps(cfg, blocks) == expected


def test_a_corpus_of_one_step_per_epoch_learns_from_the_first_step(small_project):
    corpus = small_project.root / "dataset" / "corpus"
    corpus.mkdir()
    (corpus / "rtl.md").write_text("RTL means return to launch: the drone flies home and lands.\n" * 3)
    result, data = cli(
        small_project.root, "pretrain", "--epochs", "3", *PRETRAIN, "training.warmup_ratio=0.03"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    first, second, third = data["train_loss"]  # one optimizer step per epoch
    assert first > second > third
    assert data["optimizer_steps"] == 3 and data["learning_rate"] == 0.01
    said = " ".join(result.stderr.split())
    assert (
        "warning: 3 optimizer step(s) in all (2 block(s) of up to 64 tokens, training.batch_size 8, 3 epoch(s))"
        in said
    )
    assert "raise --epochs (and training.learning_rate, now 0.01)" in said
