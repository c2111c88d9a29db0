"""The flywheel's own bookkeeping: one process per project (a lock), and where the current round stands.

`output/flywheel_state.json` names the round in progress and its last completed stage
(planned → augmented → tuned → gated), its round run and its Ray Tune experiment directory, so a
killed run resumes where it stopped. A round counts as done once its line is in experiments.jsonl.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from forge_ml.config import ForgeConfig, config_to_dict
from forge_ml.errors import ConfigError, InputError
from forge_ml.fileio import atomic_write_json, pid_alive
from forge_ml.project import Project
from forge_ml.search import SearchParam
from forge_ml.secrets import flatten

LOCK = "flywheel.lock"
STATE = "flywheel_state.json"
STAGES = ("planned", "augmented", "tuned", "gated")
HALF_WRITTEN_S = 10.0  # an empty lock file older than this was left by a killed process


@dataclass
class RoundState:
    round: int
    stage: str = "new"
    round_run_id: str | None = None
    plan: dict[str, Any] = field(default_factory=dict)
    planner: dict[str, Any] = field(default_factory=dict)  # source, fallback, reason, usage
    experiment_path: str | None = None
    checkpoint_shape: dict[str, Any] = field(default_factory=dict)  # what its trial checkpoints need
    augment: dict[str, Any] = field(default_factory=dict)
    best: dict[str, Any] = field(default_factory=dict)  # trial_id, run_id, checkpoint, metrics
    gate: dict[str, Any] = field(default_factory=dict)  # version, promoted, reasons, gold
    started: float = field(default_factory=time.time)

    def reached(self, stage: str) -> bool:
        return self.stage in STAGES and STAGES.index(self.stage) >= STAGES.index(stage)


def load_state(project: Project) -> RoundState | None:
    path = project.output / STATE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8")).get("current")
    except (json.JSONDecodeError, AttributeError) as exc:
        raise InputError(
            f"{path}: unreadable flywheel state ({exc}); remove it to start the round again"
        ) from None
    if not data:
        return None
    known = {f.name for f in fields(RoundState)}
    return RoundState(**{k: v for k, v in data.items() if k in known})


def save_state(project: Project, state: RoundState | None) -> None:
    atomic_write_json(project.output / STATE, {"current": asdict(state) if state else None})


class ProjectLock:
    """An exclusive lock file: a second flywheel on the same project is refused; a dead owner's lock is taken over."""

    def __init__(self, project: Project) -> None:
        self.path = project.output / LOCK
        self.recovered = False  # took over the lock of a process that is gone
        self.recovered_from: int | None = None  # its pid, when the lock names one

    def __enter__(self) -> ProjectLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(2):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                owner = self._owner()
                same_host = owner.get("host") == socket.gethostname()
                dead = same_host and isinstance(owner.get("pid"), int) and not pid_alive(owner["pid"])
                # a process killed between creating the lock and writing its pid leaves it empty
                half_written = not owner and time.time() - self.path.stat().st_mtime > HALF_WRITTEN_S
                if dead or half_written:
                    self.recovered, self.recovered_from = True, owner.get("pid")
                    self.path.unlink(missing_ok=True)
                    continue
                raise InputError(
                    f"{self.path}: another forge-ml flywheel (pid {owner.get('pid')} on {owner.get('host')}) "
                    "is running on this project; wait for it, or remove the lock if that process is gone"
                ) from None
            with os.fdopen(fd, "w") as fh:
                json.dump({"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}, fh)
            return self
        raise InputError(f"{self.path}: could not take the project lock")

    def __exit__(self, *exc: object) -> None:
        if self._owner().get("pid") == os.getpid():
            self.path.unlink(missing_ok=True)

    def _owner(self) -> dict[str, Any]:
        try:
            return json.loads(Path(self.path).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return {}


# -- resuming trials: a Ray Tune experiment continues only under the config its checkpoints need --
# Keys that shape a trial's checkpoint (the adapter's tensors, the base under it, the optimizer
# state and step count): a restored trial with a different value cannot load its checkpoint.
CHECKPOINT_KEYS = ("model.", "lora.", "training.batch_size", "training.grad_accum", "training.precision")


def checkpoint_shape(cfg: ForgeConfig, params: dict[str, SearchParam]) -> dict[str, Any]:
    """Return the round's values of CHECKPOINT_KEYS that are not searched (trials keep their own)."""
    flat = flatten(config_to_dict(cfg))
    return {k: v for k, v in sorted(flat.items()) if k.startswith(CHECKPOINT_KEYS) and k not in params}


def check_resumable(state: RoundState, shape: dict[str, Any]) -> None:
    """Refuse to continue trials whose checkpoints were written under a different shape."""
    old = state.checkpoint_shape
    changed = [k for k in sorted(set(old) | set(shape)) if old.get(k) != shape.get(k)]
    if changed:
        details = ", ".join(f"{k}: {old.get(k)!r} → {shape.get(k)!r}" for k in changed)
        raise ConfigError(
            f"round {state.round}: the config changed since its trials wrote their checkpoints in "
            f"{state.experiment_path} ({details}); they cannot be resumed with it. Put the "
            f"value{'s' if len(changed) > 1 else ''} back to continue the round, or delete "
            f"output/{STATE} to run round {state.round} again from its plan."
        )
