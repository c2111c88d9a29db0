"""Where a base model comes from: a Hub id, a local directory, or the locally built tiny model."""

from __future__ import annotations

import re
from pathlib import Path

from forge_ml.errors import InputError
from forge_ml.project import Project

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


def looks_like_path(name: str) -> bool:
    return name.startswith((".", "/", "~")) or "\\" in name


def resolve_model_source(name_or_path: str, project: Project) -> str:
    """Return an absolute local directory or a Hub id; never a Hub lookup for a path-like string.

    A string starting with '.', '/' or '~' is a path and must exist. A string with a path
    separator is a local directory when one exists (against the project directory), else
    it must have the Hub's `org/name` shape.
    """
    if looks_like_path(name_or_path):
        path = project.resolve(name_or_path)
        if not path.is_dir():
            raise InputError(f"model.name_or_path: local model directory {str(path)!r} not found")
        return str(path)
    local = project.resolve(name_or_path)
    if local.is_dir():
        return str(local)
    if not _HUB_ID.match(name_or_path):
        raise InputError(
            f"model.name_or_path: {name_or_path!r} is neither an existing directory nor a Hub id (org/name)"
        )
    return name_or_path


def is_local(source: str) -> bool:
    return Path(source).is_absolute()
