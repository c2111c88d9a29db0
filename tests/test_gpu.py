"""CUDA-only checks: bf16 training that leaves no GPU memory behind, and QLoRA (4-bit NF4 base
through bitsandbytes). Skipped without a GPU; `bench/gpu_check.py` measures the same on the real base.

The release check trains a model large enough to matter (about 0.4 B parameters, ~0.8 GB in bf16)
and then calls only what a reused Ray trial actor calls between trials,
`release_trial_memory()`: if training kept a reference to the model, its optimizer or its
activations, the memory stays allocated and the check fails.
"""

from __future__ import annotations

import pytest
from conftest import FAST

from forge_ml.compose import compose_config
from forge_ml.data.project_data import load_project_data
from forge_ml.jobs.train import run_train
from forge_ml.models.tiny import build_tiny_model
from trainables.sft import release_trial_memory

pytestmark = [pytest.mark.gpu, pytest.mark.slow]
MiB = 2**20
# hidden 2048, 8 layers, intermediate 5632: ~0.4 B parameters, the size of a small real base
LARGE = [
    "model.tiny.hidden_size=2048",
    "model.tiny.intermediate_size=5632",
    "model.tiny.num_layers=8",
    "model.tiny.num_heads=16",
    "model.tiny.num_kv_heads=16",
    "model.tiny.vocab_size=512",
]


def local_base(project, overrides: list[str]):
    """A locally built model saved in the Hub format: it stands in for a pretrained base.

    Its tokenizer learns the project's own text, as a real base's covers it: one learned from a
    handful of words spells the system prompt out in hundreds of tokens, and no answer would fit
    in training.max_seq_length (refused before training since the first GPU run showed it).
    """
    cfg = compose_config(project, [*FAST, *overrides])
    text = load_project_data(project, cfg.task).training_text()
    return build_tiny_model(text, cfg.model.tiny, project.root / "weights")


def test_bf16_training_leaves_no_gpu_memory_once_released(small_project):
    import torch

    base = local_base(small_project, LARGE)
    cfg = compose_config(
        small_project,
        [
            *FAST,
            f"model.name_or_path={base}",
            "model.dtype=bfloat16",
            "training.precision=bf16",
            "training.epochs=1",
        ],
    )
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    summary = run_train(cfg)
    assert summary.history
    peak = torch.cuda.max_memory_allocated() - before
    release_trial_memory()  # all a reused trial actor does between trials
    torch.cuda.synchronize()
    left = torch.cuda.memory_allocated() - before
    assert peak > 700 * MiB, f"the model was too small to show a leak: peak {peak / MiB:.0f} MiB"
    assert left < 32 * MiB, f"{left / MiB:.0f} MiB still allocated of a {peak / MiB:.0f} MiB peak"
    assert torch.cuda.memory_reserved() < peak * 0.1  # the cache handed back too


def test_qlora_trains_a_4bit_base_in_bf16(small_project):
    import torch

    base = local_base(small_project, [])
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
    release_trial_memory()
    assert torch.cuda.memory_allocated() < 64 * MiB
