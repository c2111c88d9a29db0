"""Where each running trial is inside its epoch, for the round's progress line.

A trial reports to Ray Tune once per epoch; a real base's epoch on a CPU takes many minutes, and
until it ends the round's line could only say "no result yet". Each trial therefore posts its
position (the trainer's fractional epoch and how fast it moves) to one small actor of the round,
a few times a minute; the driver reads it when it prints the periodic line. Posting never blocks a
trial and never fails it, and a board that cannot be read leaves the line as it was.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

from forge_ml.progress import Position, paced, where_in_epoch

log = logging.getLogger(__name__)

POST_EVERY_S = 10.0  # a trial posts at most this often
READ_TIMEOUT_S = 5.0  # the driver waits at most this long for the board
SHOWN = 4  # trials named on one line; more are counted


def describe(positions: dict[str, Position], running: list[str]) -> str:
    """`now dfff70ab epoch 1 at 61 % (about 5 min to go), …` for the running trials that posted."""
    posted = [trial_id for trial_id in running if trial_id in positions]
    parts = [f"{trial_id} {where_in_epoch(positions[trial_id])}" for trial_id in posted[:SHOWN]]
    if not parts:
        return ""
    more = len(posted) - SHOWN
    return "now " + ", ".join(parts) + (f" and {more} more" if more > 0 else "")


class _Board:
    """The round's actor: the latest position of each trial."""

    def __init__(self) -> None:
        self.positions: dict[str, Position] = {}

    def post(self, trial_id: str, position: Position) -> None:
        self.positions[trial_id] = position

    def read(self) -> dict[str, Position]:
        return dict(self.positions)


@contextlib.contextmanager
def step_board() -> Iterator[Any]:
    """A board actor for one round (no CPU of its own), removed when the round's fit returns."""
    import ray

    board = ray.remote(num_cpus=0, max_restarts=0)(_Board).remote()
    try:
        yield board
    finally:
        with contextlib.suppress(Exception):
            ray.kill(board)


def read_board(board: Any) -> dict[str, Position]:
    """The board's positions, or none when it does not answer in time."""
    import ray

    try:
        return ray.get(board.read.remote(), timeout=READ_TIMEOUT_S)
    except Exception as exc:  # progress is a courtesy: the round goes on without it
        log.debug("the step board did not answer: %s", exc)
        return {}


def poster(board: Any, trial_id: str, clock: Callable[[], float] = time.monotonic) -> Callable[[float], None]:
    """The step hook of a trial: its position to the round's board, at most every POST_EVERY_S."""

    def post(position: Position) -> None:
        try:
            board.post.remote(trial_id, position)
        except Exception as exc:  # a gone board costs the line its detail, never the trial
            log.debug("could not post to the step board: %s", exc)

    return paced(post, POST_EVERY_S, clock=clock)
