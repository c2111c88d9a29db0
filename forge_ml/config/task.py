"""`task` group: where the project's data lives and how the dev split is carved."""

from __future__ import annotations

from dataclasses import dataclass, field

from forge_ml.config.checks import Problems


@dataclass
class TaskConfig:
    system_prompt: str = field(
        default="system_prompt.md", metadata={"help": "used at train, eval and serving"}
    )
    seed_path: str = "dataset/seed.jsonl"
    gold_path: str = field(
        default="dataset/gold.jsonl", metadata={"help": "locked eval set, never trained on"}
    )
    canonical_path: str = field(default="dataset/canonical.jsonl", metadata={"help": "the training data"})
    dev_fraction: float = field(
        default=0.1, metadata={"help": "share of canonical held out for model selection"}
    )
    dev_min: int = 8
    dev_max: int = 200
    split_seed: int = field(default=0, metadata={"help": "changing it re-draws the dev split"})

    def check(self, p: Problems) -> None:
        p.range("dev_fraction", self.dev_fraction, 0.0, 0.5, low_open=True)
        p.range("dev_min", self.dev_min, 1, 100_000)
        p.range("dev_max", self.dev_max, 1, 1_000_000)
        if self.dev_min > self.dev_max:
            p.add("dev_min", f"{self.dev_min} is larger than dev_max={self.dev_max}")
        for name in ("system_prompt", "seed_path", "gold_path", "canonical_path"):
            if not str(getattr(self, name)).strip():
                p.add(name, "must not be empty")
