"""Chat formatting through the tokenizer's template, and tokenisation for SFT.

Prompt and completion are tokenised separately and concatenated, so the tokens a model is
trained to produce after the prompt are exactly those it must generate at eval time.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from forge_ml.data.examples import Example
from forge_ml.errors import InputError
from forge_ml.models.generation import build_messages, chat_text, render_prompt

log = logging.getLogger(__name__)

IGNORE_INDEX = -100


def render_completion(
    tokenizer: Any, system_prompt: str, example: Example, prompt: str, *, system_role: bool = True
) -> str:
    """Return the text the template puts after `prompt` for the assistant's answer (end-of-turn included)."""
    messages = build_messages(system_prompt, example.user, system_role=system_role)
    messages.append({"role": "assistant", "content": example.assistant})
    full = chat_text(tokenizer, messages)
    if not full.startswith(prompt):
        raise ValueError(
            "the chat template renders the prompt differently with and without the answer; "
            "set model.chat_template to a template whose generation prompt is a prefix of the full chat"
        )
    return full[len(prompt) :]


def encode_text(tokenizer: Any, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def tokenize_for_sft(
    examples: Sequence[Example], tokenizer: Any, system_prompt: str, *, system_role: bool = True
) -> dict[str, list[list[int]]]:
    """Return columns `input_ids` and `labels` (prompt tokens masked with -100)."""
    input_ids, labels = [], []
    for ex in examples:
        prompt = render_prompt(tokenizer, system_prompt, ex.user, system_role=system_role)
        completion = render_completion(tokenizer, system_prompt, ex, prompt, system_role=system_role)
        prompt_ids = encode_text(tokenizer, prompt)
        completion_ids = encode_text(tokenizer, completion)
        input_ids.append(prompt_ids + completion_ids)
        labels.append([IGNORE_INDEX] * len(prompt_ids) + completion_ids)
    return {"input_ids": input_ids, "labels": labels}


def check_lengths(columns: dict[str, list[list[int]]], max_length: int, name: str) -> None:
    """Fail when `max_length` leaves no answer to learn in any example; warn when it cuts some answers.

    TRL truncates to `max_length` and then drops every example whose answer is cut away entirely,
    so a system prompt longer than `training.max_seq_length` would otherwise end in a bare
    "num_samples=0" from the data loader, after the model is loaded.
    """
    lengths = [len(ids) for ids in columns["input_ids"]]
    answer_starts = [
        next((i for i, t in enumerate(lab) if t != IGNORE_INDEX), len(lab)) for lab in columns["labels"]
    ]
    check_lengths_of(lengths, answer_starts, max_length, name)


def check_lengths_of(
    lengths: Sequence[int], answer_starts: Sequence[int], max_length: int, name: str
) -> None:
    """`check_lengths` on each example's token count and the position its answer starts at."""
    if not len(lengths):
        return
    lost = sum(int(start) >= max_length for start in answer_starts)
    cut = sum(int(n) > max_length for n in lengths)
    span = f"{min(lengths)}-{max(lengths)} tokens with this tokenizer"
    if lost == len(lengths):
        raise InputError(
            f"training.max_seq_length={max_length}: the answer of every one of the {len(lengths)} {name} "
            f"examples starts after token {max_length} (examples are {span}, system prompt included), "
            f"so nothing would be learned; set training.max_seq_length to at least {max(lengths)} "
            "or shorten system_prompt.md"
        )
    if cut:
        log.warning(
            "training.max_seq_length=%d cuts %d of %d %s examples (%s): their answers lose their end "
            "(%d lose all of it and are left out); set training.max_seq_length to at least %d to keep them whole",
            max_length, cut, len(lengths), name, span, lost, max(lengths),
        )  # fmt: skip


def sft_dataset(
    examples: Sequence[Example],
    tokenizer: Any,
    system_prompt: str,
    *,
    system_role: bool = True,
    max_length: int | None = None,
    name: str = "training",
):
    """Return a tokenised `datasets.Dataset` that TRL's SFTTrainer takes as is.

    With `max_length` (training.max_seq_length), examples it would cut are reported first (`check_lengths`).
    """
    from datasets import Dataset

    columns: dict[str, list] = dict(
        tokenize_for_sft(examples, tokenizer, system_prompt, system_role=system_role)
    )
    if max_length is not None:
        check_lengths(columns, max_length, name)
    columns["prompt_len"] = [sum(1 for t in labels if t == IGNORE_INDEX) for labels in columns["labels"]]
    columns["length"] = [len(ids) for ids in columns["input_ids"]]
    return Dataset.from_dict(columns)
