"""CUDA-only checks: QLoRA (4-bit NF4 base through bitsandbytes) and bf16 training. Skipped without a GPU."""

from __future__ import annotations

import pytest
from conftest import FAST

from forge_ml.compose import compose_config
from forge_ml.jobs.train import run_train
from forge_ml.models.tiny import build_tiny_model

pytestmark = [pytest.mark.gpu, pytest.mark.slow]


def test_qlora_trains_a_4bit_base_in_bf16_and_frees_gpu_memory(small_project):
    import torch

    # A locally built model saved in the Hub format stands in for a pretrained base.
    base = build_tiny_model(
        ["takeoff", "land", "hover"] * 50,
        compose_config(small_project, FAST).model.tiny,
        small_project.root / "weights",
    )
    cfg = compose_config(
        small_project,
        [
            *FAST,
            f"model.name_or_path={base}",
            "lora=qlora",
            "model.dtype=bfloat16",
            "training.precision=bf16",
        ],
    )
    summary = run_train(cfg)
    assert summary.history and summary.history[-1]["dev/loss"] < summary.history[0]["dev/loss"] * 1.5
    assert (summary.adapter_dir / "adapter_model.safetensors").is_file()
    torch.cuda.empty_cache()
    assert torch.cuda.memory_allocated() < 64 * 2**20
