"""`planner` group: who plans each round (Claude or the offline planner) and what a plan may touch."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from forge_ml.config.checks import Problems

BACKENDS = ("auto", "claude", "offline")

# Keys no search or plan may touch: identity, paths, tracking, Ray placement and secrets live here.
NEVER_SEARCHED = (
    "name",
    "project_dir",
    "tracking",
    "tune",
    "task",
    "model.name_or_path",
    "model.revision",
    "model.trust_remote_code",
    "model.chat_template",
    "model.offline_copy",
    "eval.scorer_path",
)


def never_searched(key: str) -> bool:
    """Whether `key` (dotted) is one no search space, plan or planner bound may ever touch."""
    return any(key == k or key.startswith(k + ".") for k in NEVER_SEARCHED)


@dataclass
class BoundConfig:
    """What a plan may set for one config key: a numeric range or a list of choices."""

    low: float | None = None
    high: float | None = None
    choices: list[Any] | None = None
    log: bool = field(default=False, metadata={"help": "the offline planner moves on a log scale"})


def _bounds() -> dict[str, BoundConfig]:
    return {
        "training.learning_rate": BoundConfig(low=1e-5, high=1e-2, log=True),
        "training.epochs": BoundConfig(low=1, high=8),
        "training.batch_size": BoundConfig(choices=[4, 8, 16, 32]),
        "training.warmup_ratio": BoundConfig(low=0.0, high=0.2),
        "training.weight_decay": BoundConfig(low=0.0, high=0.1),
        "lora.r": BoundConfig(choices=[4, 8, 16, 32, 64]),
        "lora.alpha": BoundConfig(low=4, high=128, log=True),
        "lora.dropout": BoundConfig(low=0.0, high=0.3),
    }


@dataclass
class PriceConfig:
    """US dollars per million tokens, for the planner's cost accounting."""

    input: float = 3.0
    output: float = 15.0
    cache_write: float = 3.75
    cache_read: float = 0.30


@dataclass
class PlannerConfig:
    backend: str = field(
        default="auto", metadata={"help": "auto (Claude when ANTHROPIC_API_KEY is set) | claude | offline"}
    )
    model: str = field(default="claude-sonnet-4-5", metadata={"help": "Claude model that plans the rounds"})
    data_model: str | None = field(
        default=None,
        metadata={
            "help": "Claude model that writes and reviews examples (write_examples, review_examples):"
            " a cheaper one may do; null = planner.model"
        },
    )
    max_tokens: int = 4096
    timeout_s: float = field(default=120.0, metadata={"help": "per request"})
    max_retries: int = field(
        default=3, metadata={"help": "retries of 429, 5xx, 529 and timeouts (with backoff)"}
    )
    max_retry_wait_s: float = field(
        default=60.0,
        metadata={"help": "longest retry-after honoured before a retry (the API may ask for hours)"},
    )
    failures_shown: int = field(default=20, metadata={"help": "gold failures sampled into the prompt"})
    context_tail_chars: int = field(default=6000, metadata={"help": "tail of AGENT_CONTEXT.md in the prompt"})
    history_rows: int = field(default=60, metadata={"help": "earlier trials shown to the planner"})
    min_samples: int = field(default=2, metadata={"help": "fewest trials a plan may ask for"})
    max_samples: int = field(default=16, metadata={"help": "most trials a plan may ask for"})
    augment_n: int = field(default=200, metadata={"help": "examples the offline planner adds per round"})
    max_augment: int = field(default=1000, metadata={"help": "most examples a plan may ask for"})
    augment_batch: int = field(default=25, metadata={"help": "examples per write_examples request"})
    augment_concurrency: int = field(default=4, metadata={"help": "write_examples requests in flight"})
    trust_radius: float = field(
        default=0.25,
        metadata={
            "help": "offline: first radius of the region around the best trial, as a share of each bound"
        },
    )
    local_points: int = field(
        default=3,
        metadata={
            "help": "offline: trials per round drawn in that region; TPE picks the rest over the whole bounds"
        },
    )
    prices: PriceConfig = field(default_factory=PriceConfig)
    bounds: dict[str, BoundConfig] = field(
        default_factory=_bounds, metadata={"help": "every key a plan may search or patch, with its range"}
    )

    @property
    def writer_model(self) -> str:
        """The model that writes and reviews data."""
        return self.data_model or self.model

    def check(self, p: Problems) -> None:
        p.one_of("backend", self.backend, BACKENDS)
        for name in ("model", "data_model"):
            value = getattr(self, name)
            if value is not None and not str(value).strip():
                p.add(name, "empty: name a Claude model (or leave data_model null)")
        p.range("max_tokens", self.max_tokens, 256, 128_000)
        p.range("timeout_s", self.timeout_s, 0.0, 3600.0, low_open=True)
        p.range("max_retries", self.max_retries, 0, 20)
        p.range("max_retry_wait_s", self.max_retry_wait_s, 0.0, 3600.0)
        p.range("failures_shown", self.failures_shown, 0, 1000)
        p.range("context_tail_chars", self.context_tail_chars, 0, 200_000)
        p.range("history_rows", self.history_rows, 0, 10_000)
        p.range("min_samples", self.min_samples, 1, 10_000)
        p.range("max_samples", self.max_samples, 1, 10_000)
        if self.min_samples > self.max_samples:
            p.add("min_samples", f"{self.min_samples} is larger than max_samples={self.max_samples}")
        p.range("augment_n", self.augment_n, 0, 100_000)
        p.range("max_augment", self.max_augment, 0, 100_000)
        if self.augment_n > self.max_augment:  # the offline plan must itself be a valid plan
            p.add("augment_n", f"{self.augment_n} is more than max_augment={self.max_augment}")
        p.range("augment_batch", self.augment_batch, 1, 500)
        p.range("augment_concurrency", self.augment_concurrency, 1, 64)
        p.range("trust_radius", self.trust_radius, 0.0, 1.0, low_open=True)
        p.range("local_points", self.local_points, 0, 1000)
        for name in ("input", "output", "cache_write", "cache_read"):
            p.range(f"prices.{name}", getattr(self.prices, name), 0.0, 10_000.0)
        for key, bound in self.bounds.items():
            self._check_bound(p, key, bound)

    @staticmethod
    def _check_bound(p: Problems, key: str, bound: BoundConfig) -> None:
        name = f"bounds.{key}"
        if never_searched(key):
            p.add(name, f"'{key}' can never be planned (identity, paths, tracking, placement or secrets)")
        if bound.choices is not None:
            if not bound.choices:
                p.add(name, "choices must not be empty")
            if bound.low is not None or bound.high is not None:
                p.add(name, "give either choices or low/high, not both")
            return
        if bound.low is None or bound.high is None:
            p.add(name, "needs low and high (or choices)")
        elif bound.low >= bound.high:
            p.add(name, f"low {bound.low:g} must be below high {bound.high:g}")
        elif bound.log and bound.low <= 0:
            p.add(name, "a log bound needs low > 0")
