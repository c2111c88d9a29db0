"""PEFT adapters: the LoRA config for a run, and loading a trained adapter for inference."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from forge_ml.config import ForgeConfig


def peft_config_for(cfg: ForgeConfig) -> Any | None:
    """Return the PEFT LoraConfig for `cfg`, or None for full fine-tuning."""
    if cfg.lora.method == "full":
        return None
    from peft import LoraConfig

    return LoraConfig(
        task_type="CAUSAL_LM",
        r=cfg.lora.r,
        lora_alpha=cfg.lora.alpha,
        lora_dropout=cfg.lora.dropout,
        bias=cfg.lora.bias,
        target_modules=list(cfg.lora.target_modules or cfg.model.target_modules),
        modules_to_save=list(cfg.lora.modules_to_save or cfg.model.modules_to_save) or None,
    )


def is_adapter_dir(path: Path) -> bool:
    return (path / "adapter_config.json").is_file()


def load_adapter(base_model: Any, adapter_dir: Path) -> Any:
    """Return `base_model` with the adapter in `adapter_dir` applied, ready for generation."""
    from peft import PeftModel

    return PeftModel.from_pretrained(base_model, str(adapter_dir), is_trainable=False)
