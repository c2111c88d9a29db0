"""Optuna TPE for one round: told the scores of earlier rounds' trials, and given points to try first.

Ray's `OptunaSearch` takes either scored points (added to the study as finished trials) or points
to run first (queued), not both at once. A planned round wants both: the earlier rounds' trials
inside its space shape TPE's model, and the plan's `first_points` run before TPE samples.
"""

from __future__ import annotations

import logging
from typing import Any

import optuna
from ray.tune.search.optuna import OptunaSearch

# Optuna puts its logger at INFO when imported, over the CLI's setting: one "A new study created in
# memory" line a round. Its INFO lines are shown with forge-ml's own debug lines (`-v`) only.
optuna.logging.set_verbosity(
    logging.DEBUG if logging.getLogger("forge_ml").isEnabledFor(logging.DEBUG) else logging.WARNING
)


class WarmStartedTPE(OptunaSearch):
    """TPE with `warm_start` (config, score) pairs told up front and `first_points` queued in order."""

    def __init__(
        self, *, warm_start: list[tuple[dict[str, Any], float]], first_points: list[dict[str, Any]], seed: int
    ) -> None:
        super().__init__(
            points_to_evaluate=[config for config, _ in warm_start] or None,
            evaluated_rewards=[score for _, score in warm_start] or None,
            seed=seed,
        )
        self._first_points = [dict(point) for point in first_points]

    def _setup_study(self, mode: Any) -> None:
        super()._setup_study(mode)  # the study, with the scored points as finished trials
        for point in self._first_points:  # Optuna hands queued trials out before it samples
            self._ot_study.enqueue_trial(point)
