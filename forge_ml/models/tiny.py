"""`model/tiny`: a small Llama-architecture model and byte-level BPE tokenizer, built offline.

The tokenizer learns its merges from the project's training text (never gold), and the
weights are drawn from a fixed seed, so the same text and config give the same model. Built
models are cached under `output/models/tiny-<hash>/` and saved in the Hugging Face format,
so everything downstream loads them like any Hub model.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from forge_ml.config import TinyModelConfig
from forge_ml.progress import Stage

log = logging.getLogger(__name__)

BOS, EOS, PAD, UNK = "<|bos|>", "<|im_end|>", "<|pad|>", "<|unk|>"
IM_START = "<|im_start|>"
SPECIAL_TOKENS = [PAD, BOS, EOS, IM_START, UNK]
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
FORMAT_VERSION = 1  # bump when the build below changes what it produces


def tiny_model_hash(texts: Sequence[str], cfg: TinyModelConfig) -> str:
    """Return the cache key of a tiny model: its config, build format and training text."""
    h = hashlib.sha256(json.dumps({"cfg": asdict(cfg), "format": FORMAT_VERSION}, sort_keys=True).encode())
    for text in texts:
        h.update(text.encode("utf-8"))
        h.update(b"\x00")
    return h.hexdigest()[:16]


def train_tokenizer(texts: Sequence[str], vocab_size: int):
    """Return a PreTrainedTokenizerFast with byte-level BPE merges learnt from `texts`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=BOS, eos_token=EOS, pad_token=PAD, unk_token=UNK, padding_side="right"
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_tiny_model(texts: Sequence[str], cfg: TinyModelConfig, cache_root: Path) -> Path:
    """Return the directory of the tiny model for `texts`, building and caching it when missing."""
    target = cache_root / f"tiny-{tiny_model_hash(texts, cfg)}"
    if (target / "config.json").is_file():
        return target
    log.debug("building tiny model %s", target.name)  # the stage says so itself when it takes a while
    with Stage(f"building the tiny model {target.name} (tokenizer from {len(texts):,} texts)", unit="models"):
        return _build(texts, cfg, cache_root, target)


def _build(texts: Sequence[str], cfg: TinyModelConfig, cache_root: Path, target: Path) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = train_tokenizer(texts, cfg.vocab_size)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_kv_heads,
        max_position_embeddings=cfg.max_position_embeddings,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id

    tmp = cache_root / f".{target.name}.building"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
    return target
