"""Answering prompts: the chat rendering and batched greedy generation that eval, probe and serving share.

This module imports nothing of forge_ml (torch is imported where it is used): a registered model
ships a copy of it beside its pyfunc code (`forge_ml/models/pyfunc.py`), so a version loads and
answers in an environment that has only the model's own requirements.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

# transformers 5.x swaps layers for "Hub kernels" (code fetched from the Hub at load time) unless told
# not to. On a GPU that fails offline ("not available in the local cache") and makes a run depend on
# code no config pins, so every model forge-ml loads passes this (a saved model's pyfunc too).
NO_HUB_KERNELS = {"use_kernels": False}

# PEFT reads transformers' deprecated `is_gradient_checkpointing` alias each time it loads an adapter,
# which warns (FutureWarning) about code that is not the user's: the CLI and every saved model hide it.
PEFT_ALIAS_WARNING = {"message": ".*is_gradient_checkpointing.*", "category": FutureWarning}


def auto_dtype() -> Any:
    """Return bf16 on a CUDA device that has it, else fp32 (the `dtype: auto` rule)."""
    import torch

    if torch.cuda.is_available() and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float32


def build_messages(system_prompt: str, user: str, *, system_role: bool = True) -> list[dict[str, str]]:
    """Return the chat messages of a prompt; without a system role the prompt leads the user turn."""
    if system_role:
        return [{"role": "system", "content": system_prompt}, {"role": "user", "content": user}]
    return [{"role": "user", "content": f"{system_prompt}\n\n{user}"}]


# The date a chat template that writes "today" is given (`date_string`, as Llama 3.x templates read it;
# Llama 3.1's own default): without it Llama 3.2's template writes the day it renders, and the same
# prompt would differ between training, eval and serving on different days.
TEMPLATE_DATE = "26 Jul 2024"


def chat_text(tokenizer: Any, messages: list[dict[str, str]], *, add_generation_prompt: bool = False) -> str:
    """Return the chat template's rendering of `messages`, on the fixed date every render shares."""
    return tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=add_generation_prompt, date_string=TEMPLATE_DATE
    )


ANSWER_MARK = "forge-ml answer mark"  # a plain-text answer the template's text around an answer is found by


def render_prompt(tokenizer: Any, system_prompt: str, user: str, *, system_role: bool = True) -> str:
    """Return the prompt text: the assistant's generation header, then whatever the template writes
    before every answer (`answer_lead`), so the model is trained on and asked for the answer alone."""
    messages = build_messages(system_prompt, user, system_role=system_role)
    prompt = chat_text(tokenizer, messages, add_generation_prompt=True)
    return prompt + answer_lead(tokenizer, messages, prompt)


def answer_lead(tokenizer: Any, messages: list[dict[str, str]], prompt: str) -> str:
    """Return the text the chat template writes between the generation header and an answer; "" when
    that is nothing or only whitespace.

    Qwen3's template writes an empty reasoning block (`<think>\n\n</think>\n\n`) before an
    assistant's answer but not after the generation header: trained on the answer as rendered, a
    model learns to write that block first and every answer it gives starts with it. Put in the
    prompt (what Qwen3's `enable_thinking=False` does), it is context the model answers after.
    """
    answered = [*messages, {"role": "assistant", "content": ANSWER_MARK}]
    full = chat_text(tokenizer, answered)
    at = full.find(ANSWER_MARK, len(prompt))
    if not full.startswith(prompt) or at < 0:
        return ""  # the prefix rule is checked, and named, where the answer is rendered
    lead = full[len(prompt) : at]
    return lead if lead.strip() else ""


@dataclass(frozen=True)
class TurnEnd:
    """What the chat template writes after an assistant's answer, and its first special token (None: none).

    `rendered` is False when the template would not render a short chat at all.
    """

    text: str
    token_id: int | None
    rendered: bool = True


def turn_end(tokenizer: Any) -> TurnEnd:
    """Return how the tokenizer's chat template ends an assistant's turn.

    A model is trained on the template's rendering, so it learns to end each answer with this token
    (`<|im_end|>`, `<|eot_id|>`, `<end_of_turn>`, `</s>`...). Base models often name another token
    as their EOS (Qwen2.5 and Llama 3 base: `<|endoftext|>`, `<|end_of_text|>`), so generation
    must stop at this one too.
    """
    import jinja2

    chat = [{"role": "user", "content": "q"}, {"role": "assistant", "content": ANSWER_MARK}]
    for messages in (chat, [{"role": "system", "content": "s"}, *chat]):
        try:
            full = chat_text(tokenizer, messages)
            break
        except jinja2.TemplateError:  # e.g. a template that wants a system turn first
            continue
    else:
        return TurnEnd("", None, rendered=False)
    at = full.rfind(ANSWER_MARK)
    text = full[at + len(ANSWER_MARK) :] if at >= 0 else ""
    special = set(tokenizer.all_special_ids)
    special.update(i for i, added in tokenizer.added_tokens_decoder.items() if added.special)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"] if text else []
    return TurnEnd(text, next((i for i in ids if i in special), None))


def stop_token_ids(generation_config: Any, tokenizer: Any) -> list[int]:
    """Return the token ids generation stops at: the model's EOS ids, the tokenizer's, and the turn's end."""
    configured = getattr(generation_config, "eos_token_id", None)
    ids = [configured] if isinstance(configured, int) else list(configured or [])
    ids += [tokenizer.eos_token_id, turn_end(tokenizer).token_id]
    return list(dict.fromkeys(i for i in ids if i is not None))


@dataclass(frozen=True)
class Completion:
    """A prompt's answer, and whether it ended (an end-of-turn token) rather than ran out of `max_new_tokens`."""

    text: str
    ended: bool


def generate_batched(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[str],
    *,
    batch_size: int,
    max_new_tokens: int,
    on_batch: Callable[[int], None] | None = None,
) -> list[str]:
    """Return the greedy completion of each prompt, in input order (`complete_batched`'s texts)."""
    completions = complete_batched(
        model, tokenizer, prompts, batch_size=batch_size, max_new_tokens=max_new_tokens, on_batch=on_batch
    )
    return [c.text for c in completions]


def complete_batched(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[str],
    *,
    batch_size: int,
    max_new_tokens: int,
    on_batch: Callable[[int], None] | None = None,
) -> list[Completion]:
    """Return the greedy completion of each prompt, in input order, each with whether it ended.

    Prompts are grouped by length so a batch pads little; padding goes on the left so every
    sequence ends where generation starts.
    """
    import torch

    encoded = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    order = sorted(range(len(prompts)), key=lambda i: len(encoded[i]))
    outputs: list[Completion] = [Completion("", True)] * len(prompts)
    pad_id = tokenizer.pad_token_id
    stop_ids = stop_token_ids(model.generation_config, tokenizer)
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            width = max(len(encoded[i]) for i in idx)
            input_ids = torch.full((len(idx), width), pad_id, dtype=torch.long)
            attention = torch.zeros((len(idx), width), dtype=torch.long)
            for row, i in enumerate(idx):
                ids = encoded[i]
                input_ids[row, width - len(ids) :] = torch.tensor(ids)
                attention[row, width - len(ids) :] = 1
            with torch.inference_mode():
                generated = model.generate(
                    input_ids=input_ids.to(device),
                    attention_mask=attention.to(device),
                    max_new_tokens=max_new_tokens,
                    do_sample=False,
                    pad_token_id=pad_id,
                    eos_token_id=stop_ids,
                )
            new = generated[:, width:]
            # a row ended where an end-of-turn token appears; a batch that stopped short ended in every row
            ended = torch.isin(new, torch.tensor(stop_ids, dtype=new.dtype, device=new.device)).any(dim=1)
            for row, i in enumerate(idx):
                text = tokenizer.decode(new[row], skip_special_tokens=True).strip()
                outputs[i] = Completion(text, bool(ended[row]) or new.shape[1] < max_new_tokens)
            if on_batch is not None:
                on_batch(len(idx))
    finally:
        model.train(was_training)
    return outputs
