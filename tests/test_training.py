"""One SFT run: assistant-only labels, the LoRA invariant, per-epoch metrics."""

from __future__ import annotations

import re
import warnings

import pytest
from conftest import THREADS

from forge_ml.config import ForgeConfig, TinyModelConfig
from forge_ml.data.chat import IGNORE_INDEX, sft_dataset, tokenize_for_sft
from forge_ml.data.examples import Example
from forge_ml.models.adapters import peft_config_for
from forge_ml.models.loader import BaseModelRef, load_base_model, load_tokenizer
from forge_ml.models.tiny import build_tiny_model
from forge_ml.project import Project
from forge_ml.training import train_sft

EXAMPLES = [Example(f"go to waypoint {w} please", f'{{"cmd": "goto", "wp": "{w}"}}') for w in "abcdefghijkl"]
SYSTEM = "Route the instruction to a JSON command."


@pytest.fixture
def setup(tmp_path):
    texts = [SYSTEM] + [t for e in EXAMPLES for t in (e.user, e.assistant)]
    tiny = TinyModelConfig(
        vocab_size=400, hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2, num_kv_heads=2
    )
    path = build_tiny_model(texts, tiny, tmp_path / "models")
    cfg = ForgeConfig(name="t", project_dir=str(tmp_path))
    cfg.model.modules_to_save = ["embed_tokens", "lm_head"]
    cfg.training.epochs = 2
    cfg.training.batch_size = 4
    cfg.training.learning_rate = 1e-2
    cfg.training.threads = THREADS
    ref = BaseModelRef(str(path), None, True)
    tokenizer = load_tokenizer(ref, cfg.model, Project(tmp_path))
    return cfg, ref, tokenizer


def test_labels_cover_the_answer_only(setup):
    _cfg, _ref, tokenizer = setup
    columns = tokenize_for_sft(EXAMPLES[:1], tokenizer, SYSTEM)
    ids, labels = columns["input_ids"][0], columns["labels"][0]
    answer = [t for t, lab in zip(ids, labels) if lab != IGNORE_INDEX]
    assert labels[0] == IGNORE_INDEX
    decoded = tokenizer.decode(answer)
    assert decoded.startswith(EXAMPLES[0].assistant) and decoded.endswith("<|im_end|>\n")
    assert labels[-len(answer) :] == answer  # the masked part is exactly the prompt prefix


@pytest.mark.slow
def test_lora_changes_the_adapter_and_never_the_base(setup, tmp_path, monkeypatch, capsys):
    import torch

    from forge_ml import progress

    monkeypatch.setattr(progress, "EPOCH_LINE_EVERY_S", 0.0)  # a line at every step after the first
    lines = progress.epoch_lines("/2")
    steps: list[float] = []
    cfg, ref, tokenizer = setup
    model = load_base_model(ref, cfg)
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    data = sft_dataset(EXAMPLES, tokenizer, SYSTEM)
    epochs: list[tuple[dict, int]] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outcome = train_sft(
            cfg,
            model,
            tokenizer,
            data,
            data,
            tmp_path / "adapter",
            peft_config=peft_config_for(cfg),
            on_epoch=lambda m, step: epochs.append((m, step)),
            on_step=lambda epoch: (steps.append(epoch), lines(epoch)),
            tqdm=False,
            scratch_dir=tmp_path / "scratch",
        )
    # after each optimizer step, the trainer's fractional epoch: 12 examples in batches of 4, 2 epochs
    assert steps == pytest.approx([1 / 3, 2 / 3, 1, 4 / 3, 5 / 3, 2])
    said = capsys.readouterr().err
    assert re.findall(r"epoch (\d)/2 at (\d+) %", said) == [
        ("1", "66"),
        ("1", "100"),
        ("2", "33"),
        ("2", "66"),
        ("2", "100"),
    ]
    # with the time left in its epoch, from the speed so far, while there is some
    assert said.count(" to go)") == 3 and "100 % (" not in said
    # the arguments forge-ml passes carry the installed transformers' own names and fit the device
    said = [str(w.message) for w in caught]
    assert [m for m in said if "`gradient_checkpointing` is deprecated" in m or "pin_memory" in m] == []
    trained = outcome.model
    state = trained.state_dict()
    base_keys = [k for k in state if "lora_" not in k and "modules_to_save" not in k]
    assert base_keys
    for key in base_keys:
        original = (
            key.replace("base_model.model.", "").replace(".base_layer", "").replace(".original_module", "")
        )
        assert torch.equal(state[key], before[original]), f"base weight {key} changed"
    lora_b = [k for k in state if "lora_B" in k]
    assert lora_b and all(state[k].abs().sum() > 0 for k in lora_b)  # B starts at zero
    saved = [k for k in state if "modules_to_save" in k and "embed_tokens" in k]
    assert saved and not torch.equal(state[saved[0]], before["model.embed_tokens.weight"])
    assert [step for _, step in epochs] == [1, 2]
    assert all({"train/loss", "dev/loss"} <= set(m) for m, _ in epochs)
    assert epochs[1][0]["dev/loss"] < epochs[0][0]["dev/loss"]
    assert (tmp_path / "adapter" / "adapter_config.json").is_file()
    assert (tmp_path / "adapter" / "tokenizer_config.json").is_file()
    assert outcome.tokens_per_s > 0


@pytest.mark.parametrize("checkpointing", [True, False])
def test_trainer_arguments_switch_activation_checkpointing_without_a_deprecation(tmp_path, checkpointing):
    import torch
    from transformers import TrainingArguments

    from forge_ml.training import trainer_arguments

    cfg = ForgeConfig(name="t", project_dir=str(tmp_path))
    cfg.training.gradient_checkpointing = checkpointing
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        args = TrainingArguments(**trainer_arguments(cfg, tmp_path, tqdm=False))
    assert args.gradient_checkpointing is checkpointing  # what the Trainer reads to switch it on
    assert args.dataloader_pin_memory is torch.cuda.is_available()
