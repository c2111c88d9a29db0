"""What a data job (`generate`, `patch`, `augment`) is asked to do, and what it did."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forge_ml.errors import InputError
from forge_ml.llm import Usage

KINDS = ("generate", "patch", "augment")  # each is also the `meta.source` of what it adds
DEFAULT_BATCH_WAIT_S = 24 * 3600.0  # a Message Batch expires after 24 hours
MAX_N = 100_000
MAX_PER_REQUEST = 500


@dataclass(frozen=True)
class DataJob:
    """One invocation's arguments."""

    kind: str  # generate | patch | augment
    n: int
    per_request: int
    output: str | None = None  # generate --output: a file to write instead of appending to canonical
    force: bool = False  # generate --output: replace an existing file
    batch: bool = False
    batch_wait_s: float = DEFAULT_BATCH_WAIT_S
    dry_run: bool = False
    description: str | None = None  # patch


@dataclass
class DataSummary:
    """What a job did (or, with `dry_run`, would do and cost)."""

    kind: str
    writer: str  # claude | generator
    requested: int
    output: Path
    focus: list[str]
    batch: bool = False
    dry_run: bool = False
    added: int | None = None
    dropped: dict[str, int] = field(default_factory=dict)
    mended: dict[str, int] = field(default_factory=dict)  # changes made to the examples added
    by_category: dict[str, int] = field(default_factory=dict)
    dataset_size: int | None = None
    dataset_hash: str | None = None
    requests: int = 0
    failed_requests: int = 0
    usage: Usage = field(default_factory=Usage)
    cost_usd: float = 0.0
    batch_id: str | None = None
    run_id: str | None = None

    def fields(self) -> dict[str, Any]:
        """The command's `--json` envelope keys."""
        return {
            "writer": self.writer,
            "requested": self.requested,
            "added": self.added,
            "dropped": self.dropped,
            "mended": self.mended,
            "by_category": self.by_category,
            "focus": self.focus,
            "output": str(self.output),
            "dataset_size": self.dataset_size,
            "dataset_hash": self.dataset_hash,
            "requests": self.requests,
            "input_tokens": self.usage.input_tokens,
            "output_tokens": self.usage.output_tokens,
            "cost_usd": self.cost_usd,
            "batch_id": self.batch_id,
            "dry_run": self.dry_run,
        }


def check_job(job: DataJob) -> None:
    """Refuse bad arguments before anything is read or written."""
    if job.kind not in KINDS:
        raise InputError(f"unknown data job {job.kind!r}; expected one of {', '.join(KINDS)}")
    if not 1 <= job.n <= MAX_N:
        raise InputError(f"--n {job.n}: must be between 1 and {MAX_N}")
    if not 1 <= job.per_request <= MAX_PER_REQUEST:
        raise InputError(f"--batch-size {job.per_request}: must be between 1 and {MAX_PER_REQUEST}")
    if job.batch_wait_s <= 0:
        raise InputError(f"--batch-wait {job.batch_wait_s:g}: must be above 0 seconds")
    if job.kind == "patch" and not (job.description or "").strip():
        raise InputError(
            "patch: the description is empty; say which examples to write, e.g. 'hover with durations'"
        )
