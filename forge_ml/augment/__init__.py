"""Augment: new training examples aimed at a plan's focus and the latest failures, appended to canonical.

round.py adds a flywheel round's examples (`augment_data`); claude.py and requests.py have Claude
write them, offline.py runs the project's generator.py, validate.py admits them, categories.py
reads a `patch` description, provenance.py records the change in MLflow.
"""

from __future__ import annotations

from forge_ml.augment.round import (
    ATTEMPTS,
    SOURCE,
    AugmentResult,
    allocate,
    append_examples,
    augment_data,
)

__all__ = ["ATTEMPTS", "SOURCE", "AugmentResult", "allocate", "append_examples", "augment_data"]
