"""`output/flywheel_heartbeat.json`: is the flywheel alive, and where in its round is it.

The flywheel rewrites the file when a round starts and moves to its next step (plan, augment,
tune, gate, record), when a trial ends, and every `interval_s` seconds in between (a daemon
thread), so its `time` is never older than that while the process lives. `forge-ml status`
reads it with `liveness`: on the machine that wrote it a dead pid settles the question; from
another machine (a flywheel submitted to a cluster, its project on shared storage) the age of
the last beat does.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import Any, Literal

from forge_ml.fileio import atomic_write_json, pid_alive
from forge_ml.project import Project
from forge_ml.secrets import redact_text

HEARTBEAT = "flywheel_heartbeat.json"
INTERVAL_S = 30.0
Step = Literal["plan", "augment", "tune", "gate", "record"]


@dataclass(frozen=True)
class TrialCounts:
    """Where a round's trials stand, as the round engine last saw them."""

    running: int
    finished: int
    stopped: int
    failed: int
    total: int


class Heartbeat:
    """The heartbeat file of one flywheel run; use as a context manager to keep it beating."""

    def __init__(self, project: Project, interval_s: float = INTERVAL_S) -> None:
        self.path = project.output / HEARTBEAT
        self.interval_s = interval_s
        self._fields: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Heartbeat:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._pulse, name="forge-heartbeat", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def beat(self, round_number: int, status: str, **fields: Any) -> None:
        """Start a new record: the round, its status and what else is known (the step, an error…)."""
        with self._lock:
            self._fields = {"round": round_number, "status": status, **fields}
            self._write()

    def step(self, step: Step) -> None:
        """The round moved on to `step`; trial counts belong to the step that reported them."""
        self.update(step=step, step_since=_iso(time.time()), trials=None)

    def trials(self, counts: TrialCounts) -> None:
        self.update(trials=asdict(counts))

    def update(self, **fields: Any) -> None:
        with self._lock:
            if not self._fields:
                return  # nothing begun yet: no round to speak of
            self._fields.update(fields)
            self._fields = {k: v for k, v in self._fields.items() if v is not None}
            self._write()

    def _pulse(self) -> None:
        while not self._stop.wait(self.interval_s):
            with self._lock:
                if self._fields.get("status") == "running":
                    self._write()

    def _write(self) -> None:
        now = time.time()
        data = {
            **self._fields,
            "time": _iso(now),  # ISO 8601, UTC
            "timestamp": now,  # the same moment in epoch seconds
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "interval_s": self.interval_s,
        }
        if "error" in data:
            data["error"] = redact_text(str(data["error"]))
        atomic_write_json(self.path, data)


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).isoformat(timespec="seconds")


def read_heartbeat(project: Project) -> dict[str, Any] | None:
    """The heartbeat as written, or None when there is none or it cannot be read."""
    try:
        data = json.loads((project.output / HEARTBEAT).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


Liveness = Literal["alive", "gone", "silent", "unknown"]


def liveness(beat: dict[str, Any], now: float | None = None) -> Liveness:
    """Whether the flywheel that wrote a "running" heartbeat still runs.

    "gone": its pid no longer exists on this machine; "silent": written elsewhere and not
    rewritten for three intervals; "alive" otherwise; "unknown" for a heartbeat of an older
    forge-ml (no pid, no interval).
    """
    now = time.time() if now is None else now
    pid, host, interval = beat.get("pid"), beat.get("host"), beat.get("interval_s")
    if not isinstance(pid, int) or not isinstance(interval, int | float):
        return "unknown"
    if host == socket.gethostname():
        return "alive" if pid_alive(pid) else "gone"
    age = now - float(beat.get("timestamp", 0))
    return "alive" if age <= 3 * interval else "silent"
