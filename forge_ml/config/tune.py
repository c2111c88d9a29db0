"""`tune` group: how a round of parallel trials runs on Ray Tune."""

from __future__ import annotations

from dataclasses import dataclass, field

from forge_ml.config.checks import Problems


@dataclass
class TrialResources:
    cpu: float = field(default=1.0, metadata={"help": "CPUs per trial (also its torch thread count)"})
    gpu: float = field(
        default=0.0, metadata={"help": "GPUs per trial; fractions pack small models on one GPU"}
    )


@dataclass
class TuneConfig:
    space: dict[str, str] = field(
        default_factory=dict, metadata={"help": "config key -> Hydra sweep expression, e.g. choice(8,16)"}
    )
    num_samples: int = field(default=4, metadata={"help": "trials per round"})
    max_concurrent_trials: int = 2
    metric: str = field(default="dev/loss", metadata={"help": "what the searcher and scheduler optimise"})
    mode: str = "min"
    searcher: str = field(default="optuna", metadata={"help": "optuna (TPE, warm-started) | random"})
    scheduler: str = field(default="asha", metadata={"help": "asha (early stopping on metric) | fifo"})
    grace_period: int = field(default=1, metadata={"help": "asha: epochs before a trial can be stopped"})
    reduction_factor: float = field(default=2.0, metadata={"help": "asha: keep 1/reduction_factor per rung"})
    seed: int = 0
    resources: TrialResources = field(default_factory=TrialResources)
    max_failures: int = field(default=1, metadata={"help": "retries of a crashed trial, from its checkpoint"})
    num_to_keep: int = field(default=1, metadata={"help": "checkpoints kept per trial"})
    top_k: int = field(default=1, metadata={"help": "best trials whose adapters are logged to MLflow"})
    storage_path: str | None = field(
        default=None,
        metadata={"help": "trial storage; null = <project>/output/ray, or a shared URI (s3://, NFS)"},
    )
    address: str | None = field(
        default=None, metadata={"help": "Ray cluster to join (auto or host:port); null = a local runtime"}
    )
    num_cpus: int | None = field(default=None, metadata={"help": "local runtime size; null = every core"})

    def check(self, p: Problems) -> None:
        p.range("num_samples", self.num_samples, 1, 10_000)
        p.range("max_concurrent_trials", self.max_concurrent_trials, 1, 1024)
        p.one_of("mode", self.mode, ("min", "max"))
        p.one_of("searcher", self.searcher, ("optuna", "random"))
        p.one_of("scheduler", self.scheduler, ("asha", "fifo"))
        p.range("grace_period", self.grace_period, 1, 1000)
        p.range("reduction_factor", self.reduction_factor, 1.0, 100.0, low_open=True)
        p.range("resources.cpu", self.resources.cpu, 0.0, 1024.0, low_open=True)
        p.range("resources.gpu", self.resources.gpu, 0.0, 64.0)
        p.range("max_failures", self.max_failures, 0, 100)
        p.range("num_to_keep", self.num_to_keep, 1, 100)
        p.range("top_k", self.top_k, 0, 100)
        if self.num_cpus is not None:
            p.range("num_cpus", self.num_cpus, 1, 4096)
        if not self.metric.strip():
            p.add("metric", "must name a reported metric")
