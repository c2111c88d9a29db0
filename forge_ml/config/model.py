"""`model` group: which base model to fine-tune and how to talk to it."""

from __future__ import annotations

from dataclasses import dataclass, field

from forge_ml.config.checks import Problems

TINY = "tiny"
DTYPES = ("auto", "float32", "bfloat16", "float16")


@dataclass
class TinyModelConfig:
    """Shape of the small Llama-architecture model that `model/tiny` builds locally."""

    vocab_size: int = field(
        default=1024, metadata={"help": "byte-level BPE vocabulary, trained on project text"}
    )
    hidden_size: int = 128
    intermediate_size: int = 256
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 4
    max_position_embeddings: int = 512
    seed: int = field(default=0, metadata={"help": "weight init seed; same seed + text = same model"})

    def check(self, p: Problems) -> None:
        p.range("vocab_size", self.vocab_size, 300, 65536)
        p.range("hidden_size", self.hidden_size, 8, 8192)
        p.range("intermediate_size", self.intermediate_size, 8, 32768)
        p.range("num_layers", self.num_layers, 1, 64)
        p.range("num_heads", self.num_heads, 1, 128)
        p.range("num_kv_heads", self.num_kv_heads, 1, 128)
        p.range("max_position_embeddings", self.max_position_embeddings, 32, 131072)
        if self.num_heads > 0 and self.hidden_size % self.num_heads:
            p.add("hidden_size", f"{self.hidden_size} is not divisible by num_heads={self.num_heads}")
        if self.num_kv_heads > 0 and self.num_heads % self.num_kv_heads:
            p.add("num_kv_heads", f"num_heads={self.num_heads} is not divisible by {self.num_kv_heads}")


@dataclass
class OfflineCopyConfig:
    """Weights of a Hub model shipped inside a Python package (a GGUF file), used when the Hub is not.

    Applies only while `model.name_or_path` is the Hub id named in `of`. The file is dequantized
    once into forge-ml's cache (`FORGE_ML_CACHE`, default ~/.cache/forge-ml), keyed by its sha256.
    """

    of: str = field(default="", metadata={"help": "the Hub id these weights stand in for"})
    package: str = field(default="", metadata={"help": "the installed distribution that ships the file"})
    file: str = field(default="", metadata={"help": "the GGUF file's path inside that distribution"})

    @property
    def enabled(self) -> bool:
        return bool(self.package)

    def check(self, p: Problems) -> None:
        if self.enabled and not (self.of and self.file):
            p.add("of", "an offline copy needs `of` (the Hub id), `package` and `file`")
        if self.file and not self.file.endswith(".gguf"):
            p.add("file", f"{self.file!r}: only GGUF files are supported")


@dataclass
class ModelConfig:
    name_or_path: str = field(
        default=TINY,
        metadata={"help": "Hugging Face Hub id, a local model directory, or 'tiny' (built locally)"},
    )
    revision: str | None = field(default=None, metadata={"help": "Hub revision (branch, tag or commit)"})
    trust_remote_code: bool = field(
        default=False,
        metadata={"help": "run code shipped with the model; only set it in your own forge.yaml"},
    )
    dtype: str = field(
        default="auto", metadata={"help": "weights dtype: auto | float32 | bfloat16 | float16"}
    )
    target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        metadata={"help": "LoRA target modules of this architecture"},
    )
    modules_to_save: list[str] = field(
        default_factory=list, metadata={"help": "modules trained in full next to the LoRA adapter"}
    )
    chat_template: str | None = field(
        default=None, metadata={"help": "path of a Jinja chat template overriding the tokenizer's own"}
    )
    system_role: bool = field(
        default=True,
        metadata={"help": "false: the template has no system role; the prompt goes into the user turn"},
    )
    pad_token: str | None = field(
        default=None, metadata={"help": "token used for padding when the tokenizer defines none"}
    )
    tiny: TinyModelConfig = field(default_factory=TinyModelConfig)
    offline_copy: OfflineCopyConfig = field(default_factory=OfflineCopyConfig)

    @property
    def is_tiny(self) -> bool:
        return self.name_or_path == TINY

    def check(self, p: Problems) -> None:
        if not self.name_or_path.strip():
            p.add("name_or_path", "must not be empty")
        p.one_of("dtype", self.dtype, DTYPES)
        if not self.target_modules:
            p.add("target_modules", "must list at least one module")
        sub = Problems(p.key("tiny"))
        self.tiny.check(sub)
        p.extend(sub)
        sub = Problems(p.key("offline_copy"))
        self.offline_copy.check(sub)
        p.extend(sub)
