"""Offline data: the project's own `generator.py` (`generate(n, *, seed, focus) -> list[dict]`)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from forge_ml.errors import InputError, describe
from forge_ml.project import GENERATOR_FILE, load_project_function

__all__ = ["GENERATOR_FILE", "generate_offline", "load_generator"]
log = logging.getLogger(__name__)


def load_generator(project_root: Path) -> Any | None:
    """Return the project's `generate` function, or None when the project has no generator.py."""
    path = project_root / GENERATOR_FILE
    if not path.is_file():
        return None
    return load_project_function(path, "generate", "generate(n, *, seed, focus) -> list[dict]")


def generate_offline(generate: Any, path: Path, n: int, *, seed: int, focus: list[str]) -> list[Any]:
    """Return `n` rows from the generator; an unknown focus falls back to every category."""
    try:
        rows = generate(n, seed=seed, focus=focus or None)
    except ValueError as exc:
        if not focus:
            raise InputError(f"{path}: generate() raised {describe(exc)}") from exc
        log.warning("%s: focus %s refused (%s); generating for every category", path, focus, exc)
        rows = generate(n, seed=seed, focus=None)
    except Exception as exc:
        raise InputError(f"{path}: generate() raised {describe(exc)}") from exc
    if not isinstance(rows, list):
        raise InputError(f"{path}: generate() returned {type(rows).__name__}; expected a list of examples")
    return rows
