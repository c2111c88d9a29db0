"""One supervised fine-tuning run with TRL's SFTTrainer (+ PEFT): the only module that touches TRL.

The run reports per-epoch `train/loss` and `dev/loss` through a callback hook, so the
caller decides where metrics go (MLflow for `forge-ml train`, Ray Tune inside a trial).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forge_ml.config import ForgeConfig

log = logging.getLogger(__name__)

EpochHook = Callable[[dict[str, float], int], None]
CheckpointHook = Callable[[dict[str, float], int, Path], None]  # (epoch metrics, epoch, checkpoint dir)


@dataclass
class TrainOutcome:
    output_dir: Path
    model: Any = None  # the trained model (PEFT-wrapped for LoRA), ready for evaluation
    history: list[dict[str, float]] = field(default_factory=list)  # one entry per epoch
    train_tokens: int = 0  # tokens processed, all epochs
    train_runtime_s: float = 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.train_tokens / self.train_runtime_s if self.train_runtime_s else 0.0

    @property
    def final(self) -> dict[str, float]:
        return self.history[-1] if self.history else {}


def mixed_precision(precision: str) -> tuple[bool, bool]:
    """Return (bf16, fp16) for a `training.precision` value."""
    import torch

    cuda = torch.cuda.is_available()
    if precision == "auto":
        bf16 = cuda and torch.cuda.is_bf16_supported()
        return bf16, cuda and not bf16
    return precision == "bf16", precision == "fp16"


def trainer_arguments(cfg: ForgeConfig, output_dir: Path, *, tqdm: bool) -> dict[str, Any]:
    """The Hugging Face TrainingArguments every forge-ml trainer shares (SFT and pretraining)."""
    import torch

    bf16, fp16 = mixed_precision(cfg.training.precision)
    t = cfg.training
    return {
        "output_dir": str(output_dir),
        "num_train_epochs": t.epochs,
        "max_steps": t.max_steps,
        "learning_rate": t.learning_rate,
        "per_device_train_batch_size": t.batch_size,
        "gradient_accumulation_steps": t.grad_accum,
        "warmup_steps": t.warmup_ratio,  # a float below 1 is a ratio of the total steps
        "weight_decay": t.weight_decay,
        "lr_scheduler_type": t.lr_scheduler,
        "max_grad_norm": t.max_grad_norm,
        "seed": t.seed,
        "data_seed": t.seed,
        "bf16": bf16,
        "fp16": fp16,
        checkpointing_argument(): t.gradient_checkpointing,
        "logging_strategy": "epoch",
        "report_to": "none",
        "disable_tqdm": not tqdm,
        "dataloader_num_workers": 0,
        "dataloader_pin_memory": torch.cuda.is_available(),  # pinned memory serves copies to a GPU only
    }


def checkpointing_argument() -> str:
    """Return TrainingArguments' name for activation checkpointing: transformers 5.x renamed it from
    `gradient_checkpointing` (a deprecated alias, which warns even when False)."""
    from dataclasses import fields

    from transformers import TrainingArguments

    names = {f.name for f in fields(TrainingArguments)}
    return "activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing"


def sft_config(
    cfg: ForgeConfig, output_dir: Path, *, tqdm: bool = True, checkpoints: bool = False, prepared: bool = True
) -> Any:
    """Return TRL's SFTConfig for `cfg`: evaluate each epoch, report to no one.

    `prepared`: the datasets come from `data.tokens` (fitted to max_length by `fit_to_length`),
    so TRL's own per-row preparation is skipped.

    With `checkpoints`, a full trainer checkpoint (adapter, optimizer, scheduler, RNG) is
    written to `output_dir` after every epoch's evaluation, for resuming a crashed trial.
    """
    from trl import SFTConfig

    t = cfg.training
    return SFTConfig(
        **trainer_arguments(cfg, output_dir, tqdm=tqdm),
        per_device_eval_batch_size=max(t.batch_size, 8),
        max_length=t.max_seq_length,
        eval_strategy="epoch",
        save_strategy="epoch" if checkpoints else "no",
        save_total_limit=1 if checkpoints else None,
        remove_unused_columns=True,
        dataset_kwargs={"skip_prepare_dataset": prepared},
    )


class _EpochMetrics:
    """TrainerCallback that turns the trainer's epoch logs into (metrics, epoch) calls."""

    def __init__(
        self,
        hook: EpochHook | None,
        history: list[dict[str, float]],
        on_checkpoint: CheckpointHook | None = None,
        on_step: Callable[[float], None] | None = None,
    ) -> None:
        from transformers import TrainerCallback

        self.hook = hook
        self.history = history
        self.pending: dict[str, float] = {}
        outer = self

        class Callback(TrainerCallback):
            def on_log(self, args, state, control, logs=None, **kwargs):
                outer.on_log(state, logs or {})

            def on_step_end(self, args, state, control, **kwargs):
                if on_step is not None and state.epoch is not None:
                    on_step(float(state.epoch))

            def on_save(self, args, state, control, **kwargs):
                if on_checkpoint is not None and outer.history:
                    path = Path(args.output_dir) / f"checkpoint-{state.global_step}"
                    on_checkpoint(
                        {k: v for k, v in outer.history[-1].items() if k != "epoch"},
                        round(state.epoch or 0),
                        path,
                    )

        self.callback = Callback()

    def on_log(self, state: Any, logs: dict[str, float]) -> None:
        if "loss" in logs:
            self.pending["train/loss"] = float(logs["loss"])
        if "eval_loss" in logs:
            epoch = round(state.epoch or 0)
            metrics = {**self.pending, "dev/loss": float(logs["eval_loss"]), "epoch": float(epoch)}
            self.pending = {}
            self.history.append(metrics)
            if self.hook is not None:
                self.hook({k: v for k, v in metrics.items() if k != "epoch"}, epoch)


def quiet_trainer_logs(trainer: Any) -> None:
    """Stop the trainer printing each log as a dict (`{'loss': '1.759', 'grad_norm': ...}`): forge-ml
    records every epoch (MLflow, Ray Tune) and the commands print their own lines. In a terminal the
    progress bar stays."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    class BarOnly(ProgressCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            pass

    trainer.remove_callback(PrinterCallback)
    if trainer.pop_callback(ProgressCallback) is not None:
        trainer.add_callback(BarOnly())


def train_sft(
    cfg: ForgeConfig,
    model: Any,
    tokenizer: Any,
    train_dataset: Any,
    dev_dataset: Any,
    output_dir: Path,
    *,
    on_epoch: EpochHook | None = None,
    peft_config: Any | None = None,
    tqdm: bool = True,
    scratch_dir: Path | None = None,
    on_checkpoint: CheckpointHook | None = None,
    on_step: Callable[[float], None] | None = None,
    resume_from: Path | None = None,
) -> TrainOutcome:
    """Train `model` on the tokenised datasets and save the adapter (or model) + tokenizer to `output_dir`.

    `on_checkpoint` gets each epoch's checkpoint directory (written under `scratch_dir`);
    `on_step` gets the trainer's fractional epoch after each optimizer step;
    `resume_from` continues a run from such a checkpoint, optimizer and data order included.
    """
    import json

    import torch
    from trl import SFTTrainer

    from forge_ml.data.tokens import fit_to_length, token_count

    if cfg.training.threads:
        torch.set_num_threads(cfg.training.threads)
    outcome = TrainOutcome(output_dir=output_dir)
    metrics = _EpochMetrics(on_epoch, outcome.history, on_checkpoint, on_step)
    prepared = "length" in train_dataset.column_names  # else input_ids and labels only: TRL prepares them
    args = sft_config(
        cfg,
        scratch_dir or output_dir / "trainer",
        tqdm=tqdm,
        checkpoints=on_checkpoint is not None,
        prepared=prepared,
    )
    if prepared:
        train_dataset = fit_to_length(train_dataset, cfg.training.max_seq_length)
        dev_dataset = fit_to_length(dev_dataset, cfg.training.max_seq_length)
    trainer = SFTTrainer(
        model=model,
        args=args,
        train_dataset=train_dataset,
        eval_dataset=dev_dataset,
        processing_class=tokenizer,
        peft_config=peft_config,
        callbacks=[metrics.callback],
    )
    quiet_trainer_logs(trainer)
    start_step = 0
    if resume_from is not None:
        start_step = json.loads((resume_from / "trainer_state.json").read_text())["global_step"]
    started = time.perf_counter()
    result = trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
    outcome.train_runtime_s = time.perf_counter() - started
    steps_per_epoch = math.ceil(
        len(trainer.train_dataset) / (cfg.training.batch_size * cfg.training.grad_accum)
    )
    epochs_done = (result.global_step - start_step) / steps_per_epoch if steps_per_epoch else 0
    tokens = (
        token_count(train_dataset)
        if prepared
        else sum(len(ids) for ids in trainer.train_dataset["input_ids"])
    )
    outcome.train_tokens = int(tokens * epochs_done)
    trainer.model.save_pretrained(str(output_dir))
    tokenizer.save_pretrained(str(output_dir))
    outcome.model = trainer.model
    return outcome
