"""Reading one config value by its dotted name (`lora.r`), from the typed config or plain sections."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import is_dataclass
from typing import Any


def config_value(cfg: Any, key: str) -> Any:
    """Return the value of dotted `key` in a config (or its plain form); KeyError names the key when it is not in the config."""
    node: Any = cfg
    for part in key.split("."):
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif is_dataclass(node) and hasattr(node, part):
            node = getattr(node, part)
        else:
            raise KeyError(f"'{key}' is not a config key")
    return node
