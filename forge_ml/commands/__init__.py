"""The `forge-ml` commands: each module adds its subcommands with `Command` entries.

A command reads its arguments from a `Context`, records what it did there (`run_id`,
`config_hash`, its own envelope keys), prints for people through `results`, and returns an
exit code. With `--json` the CLI prints one envelope per command from what the context holds.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from forge_ml.project import Project, find_project


@dataclass
class Context:
    """One invocation: its arguments, and what the command reports back for the envelope."""

    args: argparse.Namespace
    extra: list[str]
    json: bool = False
    run_id: str | None = None
    config_hash: str | None = None
    fields: dict[str, Any] = field(default_factory=dict)

    @property
    def overrides(self) -> list[str]:
        return [*getattr(self.args, "overrides", []), *self.extra]

    def project(self) -> Project:
        return find_project(self.args.project, explicit=self.args.project is not None)

    def compose(self, overrides: list[str] | None = None) -> Any:
        """Return the project's validated config (command-line overrides applied); remember its hash."""
        from forge_ml.compose import compose_config
        from forge_ml.config import config_hash

        cfg = compose_config(self.project(), self.overrides if overrides is None else overrides)
        self.config_hash = config_hash(cfg)
        return cfg

    def report(self, **fields: Any) -> None:
        self.fields.update(fields)


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[Context], int]
    keys: tuple[str, ...] = ()  # the command's own envelope keys (always present, null when unknown)


def all_commands() -> list[Command]:
    from forge_ml.commands import audit, cluster, data, flywheel, hub, knowledge, project, registry, training

    modules = (project, training, flywheel, data, audit, knowledge, registry, hub, cluster)
    return [command for module in modules for command in module.COMMANDS]


def overrides_argument(
    parser: argparse.ArgumentParser, text: str = "Hydra overrides, e.g. lora.r=16"
) -> None:
    parser.add_argument("overrides", nargs="*", help=text)
