"""Where a round's trials keep their state: Ray Tune experiment directories, checkpoints, a shared base.

Local paths or URIs (s3://, gs://, file:// on shared storage). An experiment directory whose
saved state cannot be read is renamed aside, never overwritten; checkpoints in remote storage
are fetched to this machine before their adapters are read.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

from forge_ml.errors import ConfigError

ADAPTER_FILES = (
    "adapter_config.json",
    "adapter_model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "special_tokens_map.json",
)


def copy_adapter(checkpoint: Path, folder: Path) -> None:
    """Copy a checkpoint's adapter and tokenizer files into `folder`, not its optimizer state."""
    for name in ADAPTER_FILES:
        if (checkpoint / name).is_file():
            shutil.copy2(checkpoint / name, folder / name)


def unreadable_experiment(path: str) -> str | None:
    """Return what is wrong with a Ray Tune experiment directory's saved state, or None when it looks whole.

    Checks what `Tuner.restore` reads lazily: the newest experiment_state-*.json must parse
    and list its trials (a local directory; remote state is left to Ray Tune to judge).
    """
    from ray import tune

    if "://" not in path and not Path(path).is_dir():
        return "the directory does not exist (the round was stopped before its trials started)"
    if not tune.Tuner.can_restore(path):
        return "it holds no tuner.pkl"
    if "://" in path:
        return None
    states = sorted(Path(path).glob("experiment_state-*.json"), key=lambda p: p.stat().st_mtime)
    if not states:
        return "it holds no experiment_state-*.json"
    try:
        state = json.loads(states[-1].read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return f"{states[-1].name} is unreadable ({exc})"
    if not isinstance(state, dict) or not isinstance(state.get("trial_data"), list):
        return f"{states[-1].name} lists no trials"
    return None


def set_aside(path: str) -> str | None:
    """Rename a local experiment directory out of the way; return the new name (None when remote or absent)."""
    source = Path(path)
    if "://" in path or not source.exists():
        return None
    target = source.with_name(f"{source.name}.unrestorable-{int(time.time())}")
    source.rename(target)
    return str(target)


def local_checkpoint(checkpoint: Any) -> Any:
    """Return `checkpoint` on this machine's disk (one in remote storage, s3:// and the like, is downloaded)."""
    from ray import tune

    if checkpoint.filesystem.type_name == "local":
        return checkpoint
    return tune.Checkpoint.from_directory(checkpoint.to_directory())


def share_base(source: str, storage: str) -> str:
    """Copy a locally built base into the round's shared storage, so trials on other nodes can fetch it."""
    import pyarrow.fs

    target = f"{storage.rstrip('/')}/bases/{Path(source).name}"
    if "://" not in target:
        raise ConfigError(f"tune.storage_path: {storage} is not shared storage")
    filesystem, path = pyarrow.fs.FileSystem.from_uri(target)
    filesystem.create_dir(path, recursive=True)
    pyarrow.fs.copy_files(source, path, destination_filesystem=filesystem)
    return target
