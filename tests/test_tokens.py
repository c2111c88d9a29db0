"""The token cache: the tokens of `chat.tokenize_for_sft` for any text, each shard tokenised once,
only what is new tokenised again, the same dev loss as the uncached path."""

from __future__ import annotations

import json

import pytest
from conftest import FAST, chat_record, write_jsonl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forge_ml.config import TaskConfig
from forge_ml.data import tokens
from forge_ml.data.chat import tokenize_for_sft
from forge_ml.data.examples import Example
from forge_ml.data.project_data import load_project_data
from forge_ml.models.tiny import CHAT_TEMPLATE, EOS, IM_START, train_tokenizer

SPECIAL_LOOKING = st.sampled_from([EOS, IM_START, "<|pad|>", "assistant\n", "\n\n", " ", "é", "🚁", "\t"])
TEXT = st.lists(st.one_of(st.text(max_size=12), SPECIAL_LOOKING), min_size=1, max_size=5).map("".join)


@pytest.fixture(scope="module")
def tokenizer():
    corpus = ["take off to 10 m", "land now", "go to waypoint alpha", '{"cmd": "land", "args": {}}'] * 20
    return train_tokenizer(corpus, 400)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    pairs=st.lists(st.tuples(TEXT.filter(str.strip), TEXT.filter(str.strip)), min_size=1, max_size=12),
    system_prompt=TEXT.filter(str.strip),
    system_role=st.booleans(),
)
def test_the_encoder_gives_the_tokens_of_tokenize_for_sft(tokenizer, pairs, system_prompt, system_role):
    """Any text, special-token look-alikes included, with or without a system role."""
    assert tokenizer.chat_template == CHAT_TEMPLATE
    expected = tokenize_for_sft(
        [Example(u, a) for u, a in pairs], tokenizer, system_prompt, system_role=system_role
    )
    encoder = tokens.ChatEncoder(tokenizer, system_prompt, system_role)
    ids, prompt_lens = encoder.encode([u for u, _ in pairs], [a for _, a in pairs])
    assert ids == expected["input_ids"]
    assert [[-100] * n + row[n:] for row, n in zip(ids, prompt_lens)] == expected["labels"]


def test_a_shortcut_that_differs_falls_back_to_the_plain_encoding(tokenizer):
    """The shared-prefix shortcut is checked on every batch: a wrong prefix is caught, not trained on."""
    encoder = tokens.ChatEncoder(tokenizer, "You route drones.", True)
    assert encoder.prefix  # the system turn, up to the user turn's start token
    encoder.prefix_ids = encoder.prefix_ids[:-1]  # as if the prefix encoded differently on its own
    ids, _ = encoder.encode(["land now"], ["ok"])
    assert ids == tokenize_for_sft([Example("land now", "ok")], tokenizer, "You route drones.")["input_ids"]
    assert encoder.prefix == ""


def _rows_as_lists(dataset) -> tuple[list, list]:
    return dataset["input_ids"][:], dataset["labels"][:]


@pytest.mark.parametrize("parallel", [False, True])
def test_shards_are_tokenised_once_and_appends_only_add_shards(
    bare_project, tokenizer, monkeypatch, parallel
):
    monkeypatch.setattr(tokens, "SHARD_ROWS", 8)
    monkeypatch.setattr(tokens, "PARALLEL_MIN_ROWS", 1 if parallel else 10**9)
    path = bare_project.root / "dataset" / "canonical.jsonl"
    write_jsonl(path, [chat_record(f"instruction {i}", f"answer {i}") for i in range(30)])
    task = TaskConfig(dev_min=2)
    cache = tokens.token_cache(bare_project)

    def tokenised():
        data = load_project_data(bare_project, task)
        rows = tokens.tokenize_rows(data.rows, tokenizer, "sys", system_role=True, cache=cache)
        examples = data.train + data.dev
        order = sorted(range(len(examples)), key=lambda i: int(examples[i].origin.rsplit(":", 1)[1]))
        expected = tokenize_for_sft([examples[i] for i in order], tokenizer, "sys")
        assert _rows_as_lists(rows) == (expected["input_ids"], expected["labels"])
        return {p: p.stat().st_mtime_ns for p in cache.rglob("*.arrow")}

    first = tokenised()
    assert len(first) == 4  # 30 rows in shards of 8
    assert tokenised() == first  # unchanged data: nothing written
    with path.open("a") as fh:
        fh.write("".join(json.dumps(chat_record(f"more {i}")) + "\n" for i in range(5)))
    grown = tokenised()
    assert set(first) - set(grown) == set()
    new = set(grown) - set(first)
    assert len(new) == 2  # the last shard, now full (6 + 2 rows), and one with the other 3
    assert all(grown[p] == first[p] for p in first)


def test_shards_unused_for_a_week_are_pruned_and_used_ones_kept(bare_project, tokenizer, monkeypatch):
    import os
    import time

    monkeypatch.setattr(tokens, "SHARD_ROWS", 8)
    write_jsonl(
        bare_project.root / "dataset" / "canonical.jsonl",
        [chat_record(f"instruction {i}") for i in range(20)],
    )
    data = load_project_data(bare_project, TaskConfig(dev_min=2))
    cache = tokens.token_cache(bare_project)
    tokens.tokenize_rows(data.rows, tokenizer, "sys", system_role=True, cache=cache)
    used = sorted(cache.rglob("*.arrow"))
    stale = cache / "another-tokenizer" / "old.arrow"
    stale.parent.mkdir()
    stale.write_bytes(b"")
    week_ago = time.time() - tokens.KEEP_UNUSED_S - 60
    for path in [stale, used[0]]:
        os.utime(path, (week_ago, week_ago))
    tokens.tokenize_rows(data.rows, tokenizer, "sys", system_role=True, cache=cache)
    assert sorted(cache.rglob("*.arrow")) == used  # the old shard still in use was kept (and touched)
    assert not stale.parent.exists()


def test_the_dev_loss_is_the_same_with_and_without_the_cache(small_project):
    """drone-router, tiny model, a max_seq_length that cuts some rows and drops others: the path
    before the cache (token lists, TRL's own preparation), a cold cache and a warm one train alike."""
    from datasets import Dataset
    from hydra.core.global_hydra import GlobalHydra

    from forge_ml.compose import compose_config
    from forge_ml.models.adapters import peft_config_for
    from forge_ml.models.loader import load_base_model, load_tokenizer, resolve_base
    from forge_ml.training import train_sft

    GlobalHydra.instance().clear()
    cfg = compose_config(small_project, [*FAST, "training.epochs=2"])
    data = load_project_data(small_project, cfg.task)
    base = resolve_base(cfg, small_project, data.training_text())
    tokenizer = load_tokenizer(base, cfg.model, small_project)
    before = {
        split: tokenize_for_sft(examples, tokenizer, data.system_prompt)
        for split, examples in (("train", data.train), ("dev", data.dev))
    }
    lengths = sorted(len(ids) for ids in before["train"]["input_ids"])
    prompts = sorted(labels.count(-100) for labels in before["train"]["labels"])
    cfg.training.max_seq_length = lengths[len(lengths) // 2]  # half the rows are cut...
    assert (
        prompts[-1] >= cfg.training.max_seq_length > prompts[0]
    )  # ...and the longest prompts lose their answer
    cache = tokens.token_cache(small_project)

    def dev_losses(train, dev, name):
        outcome = train_sft(
            cfg, load_base_model(base, cfg), tokenizer, train, dev, small_project.output / name,
            peft_config=peft_config_for(cfg), tqdm=False,
        )  # fmt: skip
        return [h["dev/loss"] for h in outcome.history], outcome.train_tokens

    plain = dev_losses(Dataset.from_dict(before["train"]), Dataset.from_dict(before["dev"]), "plain")
    cold = tokens.sft_datasets(data, tokenizer, system_role=True, max_length=None, cache=cache)
    assert len(list(cache.rglob("*.arrow"))) >= 1
    warm = tokens.sft_datasets(data, tokenizer, system_role=True, max_length=None, cache=cache)
    assert dev_losses(cold.train, cold.dev, "cold") == plain
    assert dev_losses(warm.train, warm.dev, "warm") == plain
    losses = plain[0]
    assert len(losses) == 2 and losses[1] < losses[0]
