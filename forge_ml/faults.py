"""Failpoints: named places where the reliability suite makes forge-ml die, to prove it recovers.

Off unless `FORGE_FAILPOINTS` is set, e.g. `FORGE_FAILPOINTS=flywheel.gold_eval=kill`
(comma-separated `name=action`). Actions:

- `kill`: SIGKILL, like a power cut for the driver: the whole process group when this process
  leads it (the way a shell runs a command), else this process alone.
- `raise`: a RuntimeError at that point, as a bug there would.
- `sleep:SECONDS`: a stage that takes that long (to hold the project lock, or be killed there).

The points, in the order a flywheel round passes them, are listed in FAILPOINTS; the suite
kills the driver at each and checks that the next run finishes the round with nothing lost or
counted twice. Trial-side faults (a trial raising, a trial out of GPU memory) have their own
hooks in trainables/sft.py; one failpoint is read there, in the trial's worker: `trial.stopped`,
where a trial that the scheduler stopped unwinds (`sleep:SECONDS` makes it take that long).
"""

from __future__ import annotations

import os
import signal
import sys
import time

ENV = "FORGE_FAILPOINTS"
FAILPOINTS = (
    "flywheel.plan",  # planned and forge.yaml/BACKGROUND.md written; the stage not yet saved
    "flywheel.augment",  # canonical.jsonl grown; the stage not yet saved
    "tune.checkpoint",  # a trial saved a checkpoint, after Ray Tune first saved the experiment
    "flywheel.gold_eval",  # the best adapter scored on gold; nothing registered yet
    "flywheel.register",  # the version registered; the gate not yet applied
    "flywheel.record",  # the round's line appended to experiments.jsonl; the state not yet cleared
)


def _action(name: str) -> str | None:
    """The action FORGE_FAILPOINTS sets for `name` ("" for a bare name), or None."""
    for item in os.environ.get(ENV, "").split(","):
        point, _, action = item.strip().partition("=")
        if point and point == name:
            return action
    return None


def armed(name: str) -> bool:
    """Whether FORGE_FAILPOINTS sets `name` (lets a caller skip the work of reaching it)."""
    return _action(name) is not None


def failpoint(name: str) -> None:
    """Act on `name` when FORGE_FAILPOINTS asks for it; otherwise return at once."""
    action = _action(name)
    if action is None:
        return
    if action in ("", "kill"):
        os.environ.pop(ENV, None)
        if os.getpgrp() == os.getpid():
            os.killpg(os.getpgrp(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)
    if action == "raise":
        raise RuntimeError(f"failpoint {name} ({ENV})")
    if action.startswith("sleep:"):
        print(f"failpoint {name}: sleeping", file=sys.stderr, flush=True)  # the suite's cue to signal us
        time.sleep(float(action.split(":", 1)[1]))
        return
    raise ValueError(f"{ENV}: unknown action {action!r} for {name} (use kill, raise or sleep:SECONDS)")
