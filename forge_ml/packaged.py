"""Where the files that ship beside the code are: the Hydra config tree and the example projects.

In a source checkout they are the top-level `conf/` and `examples/` folders; the wheel maps both
into the package (`forge_ml/conf`, `forge_ml/examples`, see pyproject.toml's force-include), so
an installed forge-ml finds them with no checkout around. Standard library only: the Hydra
search-path plugin imports this module before any composition.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def _shipped(name: str) -> Path | None:
    installed = Path(str(resources.files("forge_ml") / name))
    checkout = Path(__file__).resolve().parents[1] / name
    return next((p for p in (installed, checkout) if p.is_dir()), None)


def conf_root() -> Path:
    """The packaged Hydra config tree (forge.yaml and the model, lora, training, ... groups)."""
    found = _shipped("conf")
    if found is None:
        raise FileNotFoundError(
            "forge-ml's config tree is missing: neither forge_ml/conf (a wheel install) nor conf/ "
            "beside forge_ml/ (a source checkout); reinstall forge-ml"
        )
    return found


def examples_root() -> Path | None:
    """The folder of example projects, or None when this install ships none."""
    return _shipped("examples")
