"""Hydra search-path plugin: makes forge-ml's packaged config groups visible to every project.

A project's forge.yaml is the primary config; its defaults list (`model: tiny`, `lora: qlora`,
...) resolves against forge-ml's config tree (the top-level conf/ of a checkout, forge_ml/conf in
a wheel: forge_ml/packaged.py) after the project directory itself, so a project can add or shadow
any group file.
"""

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin

from forge_ml.packaged import conf_root


class ForgeMLSearchPathPlugin(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        search_path.append(provider="forge-ml", path=f"file://{conf_root()}")
