"""`training` group: one supervised fine-tuning run."""

from __future__ import annotations

from dataclasses import dataclass, field

from forge_ml.config.checks import Problems

PRECISIONS = ("auto", "fp32", "bf16", "fp16")
SCHEDULERS = ("linear", "cosine", "constant", "constant_with_warmup")


@dataclass
class TrainingConfig:
    epochs: int = 3
    learning_rate: float = 2e-4
    batch_size: int = field(default=8, metadata={"help": "per-device train batch size"})
    grad_accum: int = field(default=1, metadata={"help": "gradient accumulation steps"})
    max_seq_length: int = field(default=512, metadata={"help": "longer examples are truncated"})
    warmup_ratio: float = 0.03
    weight_decay: float = 0.0
    lr_scheduler: str = "linear"
    max_grad_norm: float = 1.0
    seed: int = 42
    precision: str = field(
        default="auto", metadata={"help": "auto (bf16 on capable CUDA, else fp32) | fp32 | bf16 | fp16"}
    )
    gradient_checkpointing: bool = field(default=False, metadata={"help": "trade compute for GPU memory"})
    threads: int = field(default=0, metadata={"help": "CPU threads for torch; 0 = torch's default"})
    max_steps: int = field(
        default=-1, metadata={"help": "stop after this many optimizer steps; -1 = by epochs"}
    )

    def check(self, p: Problems) -> None:
        p.range("epochs", self.epochs, 1, 1000)
        p.range("learning_rate", self.learning_rate, 0.0, 1.0, low_open=True)
        p.range("batch_size", self.batch_size, 1, 4096)
        p.range("grad_accum", self.grad_accum, 1, 1024)
        p.range("max_seq_length", self.max_seq_length, 16, 131072)
        p.range("warmup_ratio", self.warmup_ratio, 0.0, 0.5)
        p.range("weight_decay", self.weight_decay, 0.0, 1.0)
        p.range("max_grad_norm", self.max_grad_norm, 0.0, 1000.0)
        p.one_of("lr_scheduler", self.lr_scheduler, SCHEDULERS)
        p.one_of("precision", self.precision, PRECISIONS)
        p.range("threads", self.threads, 0, 1024)
        if self.max_steps != -1:
            p.range("max_steps", self.max_steps, 1, 10_000_000)
