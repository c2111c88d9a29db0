"""Where a base model's weights came from, recorded on every run and registry version that used them."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Literal

BaseKind = Literal["hub", "local", "offline-copy", "tiny"]
TAG_PREFIX = "forge.base."
PRETRAIN_FILE = "forge_pretrain.json"  # written by `forge-ml pretrain` into the model it saves


@dataclass(frozen=True)
class BaseProvenance:
    """The origin of a base model's weights.

    `hub`: `name` is the Hub id, `revision` the commit. `local`: `name` is the directory.
    `offline-copy`: `name` is the Python package that ships the weights, `version` its version,
    `file` the weights file inside it, `sha256` that file's digest, `note` how it was converted,
    `stands_in_for` the Hub id it is a copy of. `tiny`: built by forge-ml from the project's text.
    """

    kind: BaseKind
    name: str
    revision: str | None = None
    version: str | None = None
    file: str | None = None
    sha256: str | None = None
    note: str | None = None
    stands_in_for: str | None = None

    def to_dict(self) -> dict[str, str]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> BaseProvenance | None:
        if not data or "kind" not in data:
            return None
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def tags(self) -> dict[str, str]:
        """The run / model-version tags (`forge.base.kind`, `forge.base.sha256`, ...)."""
        return {TAG_PREFIX + k: str(v)[:5000] for k, v in self.to_dict().items()}

    def describe(self) -> str:
        """One line for people: the model card, `status`, logs."""
        if self.kind == "hub":
            return f"Hub model {self.name} at commit {self.revision or 'main (unpinned)'}"
        if self.kind == "offline-copy":
            parts = [f"{self.file} from the Python package {self.name}=={self.version}"]
            if self.stands_in_for:
                parts.append(f"a copy of {self.stands_in_for}")
            if self.note:
                parts.append(self.note)
            if self.sha256:
                parts.append(f"file sha256 {self.sha256}")
            return "; ".join(parts)
        if self.kind == "tiny":
            return f"built locally by forge-ml (model=tiny, {self.name})"
        return f"local directory {self.name}" + (f" ({self.note})" if self.note else "")


def local_provenance(directory: str) -> BaseProvenance:
    """A local base; when `forge-ml pretrain` made it, what it was made from (its `forge_pretrain.json`)."""
    note = None
    try:
        record = json.loads((Path(directory) / PRETRAIN_FILE).read_text(encoding="utf-8"))
        origin = BaseProvenance.from_dict((record.get("base") or {}).get("provenance"))
        note = (
            f"pretrained by forge-ml (run {record['run_id']}, corpus {str(record['corpus_hash'])[:12]}, "
            f"{record['epochs']} epoch(s)) from {origin.describe() if origin else record['base'].get('source')}"
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):  # not a pretrain output, or unreadable
        pass
    return BaseProvenance(kind="local", name=directory, note=note)
