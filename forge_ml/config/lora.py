"""`lora` group: the parameter-efficient method and its hyperparameters."""

from __future__ import annotations

from dataclasses import dataclass, field

from forge_ml.config.checks import Problems

METHODS = ("lora", "qlora", "full")


@dataclass
class LoraConfig:
    method: str = field(default="lora", metadata={"help": "lora | qlora (4-bit base, CUDA) | full"})
    r: int = field(default=8, metadata={"help": "adapter rank"})
    alpha: int = field(default=16, metadata={"help": "scaling numerator; usually 2 x r"})
    dropout: float = 0.05
    bias: str = field(default="none", metadata={"help": "none | all | lora_only"})
    target_modules: list[str] | None = field(
        default=None, metadata={"help": "override the model preset's target modules"}
    )
    modules_to_save: list[str] | None = field(
        default=None, metadata={"help": "override the model preset's fully trained modules"}
    )
    quant_type: str = field(default="nf4", metadata={"help": "qlora: nf4 | fp4"})
    double_quant: bool = field(default=True, metadata={"help": "qlora: quantize the quantization constants"})
    compute_dtype: str = field(default="bfloat16", metadata={"help": "qlora: dtype of the 4-bit matmuls"})

    def check(self, p: Problems) -> None:
        p.one_of("method", self.method, METHODS)
        p.range("r", self.r, 1, 1024)
        p.range("alpha", self.alpha, 1, 4096)
        p.range("dropout", self.dropout, 0.0, 0.9)
        p.one_of("bias", self.bias, ("none", "all", "lora_only"))
        p.one_of("quant_type", self.quant_type, ("nf4", "fp4"))
        p.one_of("compute_dtype", self.compute_dtype, ("bfloat16", "float16", "float32"))
