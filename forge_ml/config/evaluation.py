"""`eval` group: how generations are scored against the gold set."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from forge_ml.config.checks import Problems

SCORERS = ("exact", "json_cmd", "json_match", "custom")


@dataclass
class EvalConfig:
    scorer: str = field(
        default="exact", metadata={"help": "exact | json_cmd | json_match | custom (scorer.py)"}
    )
    json_field: str = field(default="cmd", metadata={"help": "json_cmd: the field compared"})
    scorer_path: str = field(
        default="scorer.py", metadata={"help": "custom: file defining score(expected, actual)"}
    )
    forbidden_outputs: list[str] = field(
        default_factory=list,
        metadata={"help": "regular expressions; a matching output scores 0 and is flagged"},
    )
    batch_size: int = field(default=32, metadata={"help": "prompts generated together (left padding)"})
    max_new_tokens: int = 64
    target_accuracy: float = field(default=0.9, metadata={"help": "gold accuracy the flywheel aims for"})

    def check(self, p: Problems) -> None:
        p.one_of("scorer", self.scorer, SCORERS)
        p.range("batch_size", self.batch_size, 1, 4096)
        p.range("max_new_tokens", self.max_new_tokens, 1, 32768)
        p.range("target_accuracy", self.target_accuracy, 0.0, 1.0)
        if self.scorer == "json_cmd" and not self.json_field.strip():
            p.add("json_field", "must name a field when scorer=json_cmd")
        for i, pattern in enumerate(self.forbidden_outputs):
            try:
                re.compile(pattern)
            except re.error as exc:
                p.add(f"forbidden_outputs[{i}]", f"{pattern!r} is not a valid regular expression ({exc})")
