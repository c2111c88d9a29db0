"""Commands added by issue 5 (see forge_ml/commands/__init__.py for the pattern)."""

from __future__ import annotations

from forge_ml.commands import Command

COMMANDS: list[Command] = []
