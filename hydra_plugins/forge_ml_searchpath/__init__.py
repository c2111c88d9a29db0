"""Hydra search-path plugin: makes forge-ml's packaged config groups visible to every project.

A project's forge.yaml is the primary config; its defaults list (`model: tiny`,
`lora: qlora`, ...) resolves against `pkg://forge_ml.conf` thanks to this plugin, after the
project directory itself, so a project can add or shadow any group file.
"""

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin


class ForgeMLSearchPathPlugin(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        search_path.append(provider="forge-ml", path="pkg://forge_ml.conf")
