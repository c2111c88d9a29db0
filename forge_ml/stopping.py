"""Orderly stops: SIGTERM, SIGHUP and SIGINT end every command the same way.

`docker stop`, `ray job stop`, Kubernetes evictions, Slurm pre-emption and Ctrl-C all ask a
process to stop. The first signal raises `Stopped` (a KeyboardInterrupt) in the main thread, so
the code unwinds as it does for Ctrl-C: state saved, open MLflow runs ended KILLED with the
reason, Ray trials stopped with the runtime, the project lock released; the command exits
128 + the signal's number (143 for SIGTERM, 130 for Ctrl-C). A second signal while that runs
exits at once.

Ray replaces the SIGTERM handler when it starts (`ray.init`): the runtime calls `install()`
again after it, and Ray Tune's own Ctrl-C handler is turned off (`TUNE_DISABLE_SIGINT_HANDLER`)
so one handler decides for every signal.
"""

from __future__ import annotations

import os
import signal
import threading

SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
_stopping: list[int] = []  # the signal being handled, once one arrived


class Stopped(KeyboardInterrupt):
    """The process was asked to stop by `signum`."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"stopped by {signal.Signals(signum).name}")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def install() -> None:
    """Handle SIGTERM, SIGHUP and SIGINT in this process (main thread only; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        return
    os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = "1"
    for signum in SIGNALS:
        signal.signal(signum, _on_signal)


def _on_signal(signum: int, frame: object) -> None:
    if _stopping:  # a second signal: the user means it
        os._exit(128 + signum)
    _stopping.append(signum)
    raise Stopped(signum)


def signal_of(exc: BaseException) -> int | None:
    """The signal that stopped the process, for a KeyboardInterrupt; None for a plain Ctrl-C in a
    process without `install()`.

    `Stopped` names its signal, but it does not always arrive as itself: raised while the main
    thread waits inside Ray's C++ core (a round's driver spends nearly all its time there), it is
    replaced by a plain KeyboardInterrupt (`ray._raylet.check_status`). The signal is remembered
    here when it arrives, so the stop is still told apart from a Ctrl-C."""
    if isinstance(exc, Stopped):
        return exc.signum
    return _stopping[0] if _stopping else None


def exit_code(exc: BaseException) -> int:
    """128 + the signal for a stop (143 for SIGTERM, 130 for Ctrl-C)."""
    signum = signal_of(exc)
    return 128 + signum if signum is not None else 130


def reason(exc: BaseException) -> str:
    """What a run stopped this way is tagged with."""
    signum = signal_of(exc)
    return f"stopped by {signal.Signals(signum).name}" if signum is not None else "interrupted"
