"""`registry` group: the MLflow registered model and the gate a candidate must pass to become champion."""

from __future__ import annotations

from dataclasses import dataclass, field

from forge_ml.config.checks import Problems


@dataclass
class GateConfig:
    min_delta: float = field(
        default=0.0,
        metadata={
            "help": "gold accuracy a challenger must gain over the champion: 0 = strictly better (a tie"
            " is refused), > 0 = at least this much better, < 0 = a loss of up to this much accepted"
        },
    )
    significance: float | None = field(
        default=None,
        metadata={"help": "when set, an exact McNemar test on gold outcomes must give p < significance"},
    )
    max_category_drop: float | None = field(
        default=None,
        metadata={"help": "when set, no gold category may lose more than this accuracy vs the champion"},
    )

    def check(self, p: Problems) -> None:
        p.range("min_delta", self.min_delta, -1.0, 1.0)
        if self.significance is not None:
            p.range("significance", self.significance, 0.0, 1.0, low_open=True)
        if self.max_category_drop is not None:
            p.range("max_category_drop", self.max_category_drop, 0.0, 1.0)


@dataclass
class RegistryConfig:
    model_name: str | None = field(
        default=None, metadata={"help": "registered model name; None = the project name"}
    )
    stages: bool = field(
        default=False, metadata={"help": "also do legacy stage transitions (Staging/Production/Archived)"}
    )
    gate: GateConfig = field(default_factory=GateConfig)

    def check(self, p: Problems) -> None:
        if self.model_name is not None:
            if not self.model_name.strip():
                p.add("model_name", "must not be empty (leave it unset to use the project name)")
            elif any(c in self.model_name for c in "/\\:@"):
                p.add("model_name", f"{self.model_name!r} must not contain '/', '\\', ':' or '@'")
        sub = Problems(p.key("gate"))
        self.gate.check(sub)
        p.extend(sub)
