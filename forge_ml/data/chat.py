"""Chat formatting through the tokenizer's template, and tokenisation for SFT.

Prompt and completion are tokenised separately and concatenated, so the tokens a model is
trained to produce after the prompt are exactly those it must generate at eval time.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from forge_ml.data.examples import Example
from forge_ml.models.generation import build_messages, render_prompt

IGNORE_INDEX = -100
PASS_LOG_ENV = "FORGE_TOKENIZE_LOG"  # bench hook: append "pid examples" per tokenisation pass


def render_completion(
    tokenizer: Any, system_prompt: str, example: Example, prompt: str, *, system_role: bool = True
) -> str:
    """Return the text the template puts after `prompt` for the assistant's answer (end-of-turn included)."""
    messages = build_messages(system_prompt, example.user, system_role=system_role)
    messages.append({"role": "assistant", "content": example.assistant})
    full = tokenizer.apply_chat_template(messages, tokenize=False)
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
    if os.environ.get(PASS_LOG_ENV):
        with open(os.environ[PASS_LOG_ENV], "a", encoding="utf-8") as log:
            log.write(f"{os.getpid()} {len(examples)}\n")
    input_ids, labels = [], []
    for ex in examples:
        prompt = render_prompt(tokenizer, system_prompt, ex.user, system_role=system_role)
        completion = render_completion(tokenizer, system_prompt, ex, prompt, system_role=system_role)
        prompt_ids = encode_text(tokenizer, prompt)
        completion_ids = encode_text(tokenizer, completion)
        input_ids.append(prompt_ids + completion_ids)
        labels.append([IGNORE_INDEX] * len(prompt_ids) + completion_ids)
    return {"input_ids": input_ids, "labels": labels}


def sft_dataset(examples: Sequence[Example], tokenizer: Any, system_prompt: str, *, system_role: bool = True):
    """Return a tokenised `datasets.Dataset` that TRL's SFTTrainer takes as is."""
    from datasets import Dataset

    return Dataset.from_dict(tokenize_for_sft(examples, tokenizer, system_prompt, system_role=system_role))
