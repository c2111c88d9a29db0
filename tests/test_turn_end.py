"""Generation stops where the chat template ends an assistant's turn, whatever the model calls its EOS.

A model is trained on its template's rendering, so it learns to end each answer with the token
the template writes there (`<|im_end|>`, `<|eot_id|>`, `<end_of_turn>`, `</s>`). Base models
often name another token as EOS (Qwen2.5 and Llama 3 base: `<|endoftext|>`, `<|end_of_text|>`);
generation must stop at the turn's end too, and a template with no special token there is refused
before anything trains. What a template writes before an answer (Qwen3's empty `<think>` block) is
prompt: trained after it, a model answers with the answer alone.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import AddedToken
from transformers import GenerationConfig

from forge_ml.data.chat import IGNORE_INDEX, encode_text, tokenize_for_sft
from forge_ml.data.examples import Example
from forge_ml.data.tokens import ChatEncoder
from forge_ml.errors import ConfigError
from forge_ml.models.generation import build_messages, render_prompt, stop_token_ids, turn_end
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


def lead_template(lead: str) -> str:
    """ChatML, but the last assistant turn writes `lead` before its answer, as Qwen3's template writes
    `<think>\n\n</think>\n\n`; the generation prompt does not."""
    turn = (
        "{{ '<|im_start|>' + m['role'] + '\\n' }}"
        f"{{% if m['role'] == 'assistant' and loop.last %}}{{{{ {lead!r} }}}}{{% endif %}}"
        "{{ m['content'] + '<|im_end|>\\n' }}"
    )
    prompt = "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
    return f"{{% for m in messages %}}{turn}{{% endfor %}}{prompt}"


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lead=st.one_of(
        st.sampled_from(["<think>\n\n</think>\n\n", "Answer: ", "<|eot_id|>", " ", "\n\n", ""]),
        st.text(st.characters(exclude_categories=["Cs"]), max_size=12),
    ),
    user=st.text(min_size=1, max_size=30),
    answer=st.text(min_size=1, max_size=30),
    system_role=st.booleans(),
)
def test_what_the_template_writes_before_an_answer_is_prompt_not_answer(
    tokenizer, lead, user, answer, system_role
):
    tokenizer.chat_template = lead_template(lead)
    tokenizer.eos_token = "<|im_end|>"
    messages = build_messages("route drones", user, system_role=system_role)
    header = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    visible = bool(lead.strip())  # whitespace alone stays with the answer, as forge-ml always trained it
    prompt = render_prompt(tokenizer, "route drones", user, system_role=system_role)
    assert prompt == header + (lead if visible else "")

    columns = tokenize_for_sft([Example(user, answer)], tokenizer, "route drones", system_role=system_role)
    learned = [t for t in columns["labels"][0] if t != IGNORE_INDEX]
    assert learned == encode_text(tokenizer, ("" if visible else lead) + answer + "<|im_end|>\n")
    assert columns["input_ids"][0] == encode_text(tokenizer, prompt) + learned
    ids, prompt_lens = ChatEncoder(tokenizer, "route drones", system_role).encode([user], [answer])
    assert ids == columns["input_ids"] and prompt_lens == [len(ids[0]) - len(learned)]


@pytest.mark.parametrize(
    ("lead", "probed", "second"),
    [  # the probe's lead is not where a pair's starts / is the start of a pair's longer lead
        ("'Re: ' + messages[loop.index0 - 1]['content'] + ' -> '", "Re: A -> ", "Re: land now -> "),
        ("'Re' + '!' * (messages[loop.index0 - 1]['content'] | length)", "Re!", "Re" + "!" * 8),
    ],
)
def test_a_lead_that_depends_on_the_chat_is_found_for_each_pair(tokenizer, lead, probed, second):
    """The encoder finds the lead once; a template whose lead depends on the chat is caught (by a
    pair's rendering, or by the check on each batch's first pairs) and then rendered pair by pair,
    as `tokenize_for_sft` does."""
    tokenizer.eos_token = "<|im_end|>"
    tokenizer.chat_template = lead_template("").replace("{{ '' }}", "{{ " + lead + " }}")
    users, answers = ["take off", "land now", "hover 5 s"], ["up", "down", "stay"]
    expected = tokenize_for_sft(
        [Example(u, a) for u, a in zip(users, answers)], tokenizer, "route drones", system_role=True
    )
    learned = [t for t in expected["labels"][1] if t != IGNORE_INDEX]
    assert learned == encode_text(tokenizer, "down<|im_end|>\n")
    prompt = render_prompt(tokenizer, "route drones", users[1])
    assert prompt.endswith(f"assistant\n{second}")
    encoder = ChatEncoder(tokenizer, "route drones", True)
    assert encoder.lead == probed
    ids, _ = encoder.encode(users, answers)
    assert ids == expected["input_ids"] and encoder.lead is None


LLAMA_DATE = (  # Llama 3.2's way: today's date unless the caller gives `date_string`
    "{% if not date_string is defined %}{% if strftime_now is defined %}"
    "{% set date_string = strftime_now('%d %b %Y') %}{% else %}{% set date_string = '26 Jul 2024' %}"
    "{% endif %}{% endif %}{{ '<|im_start|>system\\nToday Date: ' + date_string + '<|im_end|>\\n' }}"
)


@pytest.mark.parametrize("system_role", [True, False])
def test_a_template_that_writes_today_gets_one_fixed_date_in_training_and_serving(tokenizer, system_role):
    from datetime import datetime, timedelta

    tokenizer.chat_template = LLAMA_DATE + lead_template("")
    tokenizer.eos_token = "<|im_end|>"
    prompt = render_prompt(tokenizer, "route drones", "land now", system_role=system_role)
    assert "Today Date: 26 Jul 2024" in prompt
    for day in (datetime.now(), datetime.now() - timedelta(days=1)):  # the render straddling midnight
        assert day.strftime("%d %b %Y") not in prompt
    columns = tokenize_for_sft(
        [Example("land now", "ok")], tokenizer, "route drones", system_role=system_role
    )
    assert columns["input_ids"][0][: len(encode_text(tokenizer, prompt))] == encode_text(tokenizer, prompt)


def test_a_template_that_reads_the_clock_itself_is_warned_about(tokenizer, caplog):
    from forge_ml.models.loader import check_fixed_date

    tokenizer.eos_token = "<|im_end|>"
    tokenizer.chat_template = LLAMA_DATE + lead_template("")
    with caplog.at_level("WARNING", logger="forge_ml.models.loader"):
        check_fixed_date(tokenizer, "llama.jinja")  # reads date_string: fixed, nothing to say
    assert not caplog.records
    tokenizer.chat_template = "{{ strftime_now('%Y-%m-%d') }}" + lead_template("")
    with caplog.at_level("WARNING", logger="forge_ml.models.loader"):
        check_fixed_date(tokenizer, "clock.jinja")
    (record,) = caplog.records
    assert "the chat template of clock.jinja writes today's date" in record.getMessage()
