"""`tracking` group: where MLflow records runs."""

from __future__ import annotations

from dataclasses import dataclass, field

from forge_ml.config.checks import Problems


@dataclass
class TrackingConfig:
    uri: str | None = field(
        default=None, metadata={"help": "MLflow tracking URI; null = sqlite:///<project>/mlflow.db"}
    )
    registry_uri: str | None = field(default=None, metadata={"help": "null = same as uri"})
    experiment: str | None = field(default=None, metadata={"help": "null = the project name"})
    log_adapter: bool = True
    log_datasets: bool = True

    def check(self, p: Problems) -> None:
        for name in ("uri", "registry_uri"):
            value = getattr(self, name)
            if value is not None and "://" not in value:
                p.add(name, f"{value!r} is not a URI (expected sqlite:///..., http://..., file://...)")
            if value is not None and "@" in value.split("://", 1)[-1].split("/", 1)[0]:
                p.add(name, "credentials do not belong in the URI: set MLFLOW_TRACKING_USERNAME/PASSWORD")
