"""Generation stops where the chat template ends an assistant's turn, whatever the model calls its EOS.

A model is trained on its template's rendering, so it learns to end each answer with the token
the template writes there (`<|im_end|>`, `<|eot_id|>`, `<end_of_turn>`, `</s>`). Base models
often name another token as EOS (Qwen2.5 and Llama 3 base: `<|endoftext|>`, `<|end_of_text|>`);
generation must stop at the turn's end too, and a template with no special token there is refused
before anything trains.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import AddedToken
from transformers import GenerationConfig

from forge_ml.errors import ConfigError
from forge_ml.models.generation import stop_token_ids, turn_end
from forge_ml.models.loader import check_turn_end
from forge_ml.models.tiny import train_tokenizer

EXTRA_SPECIALS = ["<|eot_id|>", "<end_of_turn>", "</s>", "<|end|>", "<|endoftext|>"]
PLAIN_ENDS = ["", "\n", "\n\n", "###", " END", "<|not_special|>"]


@pytest.fixture(scope="module")
def tokenizer():
    texts = ["take off to 30 m", "land now", "### user: hello", "assistant answer END"] * 4
    tok = train_tokenizer(texts, 400)
    tok.add_tokens([AddedToken(token, special=True) for token in EXTRA_SPECIALS])
    return tok


def template(header: str, before: str, end: str, after: str) -> str:
    """A Jinja chat template: each turn `<header><role>: <content><before><end><after>`."""
    turn = f"{{{{ {header!r} + m['role'] + ': ' + m['content'] + {before!r} + {end!r} + {after!r} }}}}"
    prompt = f"{{% if add_generation_prompt %}}{{{{ {header!r} + 'assistant: ' }}}}{{% endif %}}"
    return f"{{% for m in messages %}}{turn}{{% endfor %}}{prompt}"


specials = st.sampled_from(["<|im_end|>", *EXTRA_SPECIALS])


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    header=st.sampled_from(["", "<|im_start|>", "### "]),
    before=st.sampled_from(["", " ", "\n"]),
    end=st.one_of(specials, st.sampled_from(PLAIN_ENDS)),
    after=st.sampled_from(["", "\n", "\n\n"]),
    eos=specials,
    configured=st.one_of(st.none(), specials, st.lists(specials, min_size=1, max_size=3)),
)
def test_the_turns_end_is_found_and_generation_stops_there(
    tokenizer, header, before, end, after, eos, configured
):
    tokenizer.chat_template = template(header, before, end, after)
    tokenizer.eos_token = eos
    ids = tokenizer.convert_tokens_to_ids
    found = turn_end(tokenizer)
    assert found.text == before + end + after
    special = end in ["<|im_end|>", *EXTRA_SPECIALS]
    assert found.token_id == (ids(end) if special else None)

    if isinstance(configured, list):
        eos_ids = [ids(token) for token in configured]
    else:
        eos_ids = None if configured is None else ids(configured)
    stops = stop_token_ids(GenerationConfig(eos_token_id=eos_ids), tokenizer)
    assert len(stops) == len(set(stops))
    wanted = {ids(eos)} | ({ids(end)} if special else set())
    wanted |= set(eos_ids if isinstance(eos_ids, list) else [] if eos_ids is None else [eos_ids])
    assert set(stops) == wanted
    if isinstance(eos_ids, list):  # the model's own ids come first, in its order
        own = list(dict.fromkeys(eos_ids))
        assert stops[: len(own)] == own

    if special:
        check_turn_end(tokenizer, "chat.jinja")
    else:
        with pytest.raises(ConfigError) as refused:
            check_turn_end(tokenizer, "chat.jinja")
        message = str(refused.value)
        assert message.startswith("model.chat_template: the chat template of chat.jinja writes ")
        assert repr(before + end + after) in message and "{{ eos_token }}" in message


def test_a_template_that_wants_a_system_turn_first_is_read_with_one(tokenizer):
    tokenizer.eos_token = "<|endoftext|>"
    tokenizer.chat_template = (
        "{% if messages[0]['role'] != 'system' %}{{ raise_exception('a system turn first') }}{% endif %}"
        + template("<|im_start|>", "", "<|eot_id|>", "\n")
    )
    assert turn_end(tokenizer).token_id == tokenizer.convert_tokens_to_ids("<|eot_id|>")
    tokenizer.chat_template = "{{ raise_exception('no chat here') }}"
    end = turn_end(tokenizer)
    assert end.token_id is None and not end.rendered
    check_turn_end(tokenizer, "chat.jinja")  # nothing rendered: training's own rendering names the fault


def test_train_refuses_a_template_without_an_end_of_turn_before_any_training(small_project):
    root: Path = small_project.root
    (root / "plain.jinja").write_text(template("### ", "", "", "\n"), encoding="utf-8")
    result = run_cli("-p", str(root), "train", "model.chat_template=plain.jinja", "training.epochs=1")
    assert result.returncode == 1, result.stderr[-2000:]
    err = " ".join(result.stderr.split())
    assert f"model.chat_template: the chat template of {root / 'plain.jinja'} writes '\\n' after" in err
    assert "Traceback" not in result.stderr
    assert not (root / "output" / "adapter").exists()


def test_a_merged_model_stops_at_the_turns_end_where_its_base_names_another_eos(tmp_path):
    """`merge` writes the turn's end into generation_config.json, which servers (vLLM, TGI) stop at."""
    import json

    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from forge_ml.config.model import TinyModelConfig
    from forge_ml.jobs.merge import merge_into
    from forge_ml.models.loader import BaseModelRef
    from forge_ml.models.tiny import BOS, EOS, build_tiny_model
    from forge_ml.registry import ModelFiles

    base = build_tiny_model(["take off to 30 m", "land now"] * 8, TinyModelConfig(vocab_size=300), tmp_path)
    tokenizer = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base)
    tokenizer.eos_token = BOS  # this base's EOS is not the template's end of turn (<|im_end|>)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(base)
    tokenizer.save_pretrained(base)
    adapter = tmp_path / "adapter"
    get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"])).save_pretrained(adapter)
    tokenizer.save_pretrained(adapter)

    ref = BaseModelRef(str(base), None, True)
    files = ModelFiles(
        root=tmp_path, adapter=adapter, base=base, settings={"base": ref.to_dict()}, version=None
    )
    merge_into(files, tmp_path / "merged", "float32", False)
    ids = tokenizer.convert_tokens_to_ids
    saved = json.loads((tmp_path / "merged" / "generation_config.json").read_text())
    assert saved["eos_token_id"] == [ids(BOS), ids(EOS)]
    assert GenerationConfig.from_pretrained(tmp_path / "merged").eos_token_id == [ids(BOS), ids(EOS)]
