"""Model sources, the tiny model builder, loading from a local directory, adapters."""

from __future__ import annotations

import pytest

from forge_ml.config import ForgeConfig, TinyModelConfig
from forge_ml.errors import InputError
from forge_ml.models.loader import BaseModelRef, load_base_model, load_tokenizer
from forge_ml.models.source import resolve_model_source
from forge_ml.models.tiny import build_tiny_model, tiny_model_hash
from forge_ml.project import Project

TEXTS = [
    "take off to 20 meters",
    '{"cmd": "takeoff", "args": {"altitude_m": 20}}',
    "land now",
    "hover here",
] * 20
SMALL = TinyModelConfig(
    vocab_size=400, hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2, num_kv_heads=2
)


@pytest.mark.parametrize("name", ["./models/missing", "/nonexistent/model", "~/no/such/model", "a/b/c"])
def test_path_like_model_that_does_not_exist_is_an_input_error(tmp_path, name):
    with pytest.raises(InputError, match=r"model\.name_or_path"):
        resolve_model_source(name, Project(tmp_path))


def test_hub_ids_pass_through_and_local_dirs_resolve_against_the_project(tmp_path):
    project = Project(tmp_path)
    assert resolve_model_source("Qwen/Qwen2.5-0.5B-Instruct", project) == "Qwen/Qwen2.5-0.5B-Instruct"
    (tmp_path / "weights" / "m").mkdir(parents=True)
    assert resolve_model_source("weights/m", project) == str(tmp_path / "weights" / "m")
    assert resolve_model_source("./weights/m", project) == str(tmp_path / "weights" / "m")


def test_tiny_model_is_deterministic_and_cached(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    a = build_tiny_model(TEXTS, SMALL, tmp_path / "a")
    b = build_tiny_model(TEXTS, SMALL, tmp_path / "b")
    assert a.name == b.name == f"tiny-{tiny_model_hash(TEXTS, SMALL)}"
    assert AutoTokenizer.from_pretrained(a).get_vocab() == AutoTokenizer.from_pretrained(b).get_vocab()
    wa = AutoModelForCausalLM.from_pretrained(a).state_dict()
    wb = AutoModelForCausalLM.from_pretrained(b).state_dict()
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    mtime = (a / "model.safetensors").stat().st_mtime_ns
    assert build_tiny_model(TEXTS, SMALL, tmp_path / "a") == a
    assert (a / "model.safetensors").stat().st_mtime_ns == mtime  # cache hit, not rebuilt
    assert build_tiny_model([*TEXTS, "new text"], SMALL, tmp_path / "a") != a


def test_tiny_tokenizer_has_a_chat_template_and_pad_token(tmp_path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(build_tiny_model(TEXTS, SMALL, tmp_path))
    text = tok.apply_chat_template(
        [{"role": "system", "content": "s"}, {"role": "user", "content": "land now"}],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert text.endswith("<|im_start|>assistant\n")
    assert tok.pad_token_id is not None and tok.pad_token_id != tok.eos_token_id
    assert tok.decode(tok("land now hover")["input_ids"]) == "land now hover"


def test_a_model_saved_in_hub_format_loads_from_a_local_directory(tmp_path):
    source = build_tiny_model(TEXTS, SMALL, tmp_path / "cache")
    project = Project(tmp_path)
    cfg = ForgeConfig(name="t", project_dir=str(tmp_path))
    cfg.model.name_or_path = "./cache/" + source.name
    ref = BaseModelRef(resolve_model_source(cfg.model.name_or_path, project), None, False)
    tokenizer = load_tokenizer(ref, cfg.model, project)
    model = load_base_model(ref, cfg)
    assert model.config.hidden_size == 32
    assert tokenizer.chat_template
    assert not cfg.model.trust_remote_code
    # no "Hub kernels": transformers would otherwise fetch layer code from the Hub at load time,
    # which fails offline on a GPU and is pinned by no config
    assert model.use_kernels is False


def test_a_hub_snapshot_names_the_commit_it_resolved(tmp_path):
    """A branch resolves to the snapshot's commit (an HF cache laid out by hand, read offline)."""
    import json
    import os
    import subprocess
    import sys

    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "models--org--tiny-model"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    (repo / "snapshots" / commit).mkdir(parents=True)
    (repo / "snapshots" / commit / "config.json").write_text("{}")
    script = "import json; from forge_ml.hub import hub_snapshot; print(json.dumps(hub_snapshot('org/tiny-model', 'main')))"
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    path, resolved = json.loads(out.stdout)
    assert resolved == commit and path == str(repo / "snapshots" / commit)
