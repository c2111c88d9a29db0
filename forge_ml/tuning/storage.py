"""Where a round's trials keep their state: Ray Tune experiment directories, checkpoints, a shared base.

Local paths or URIs (s3://, gs://, file:// on shared storage), a URI's query (an S3-compatible
store's `endpoint_override`, say) kept at its end. An experiment directory whose saved state cannot
be read is renamed aside, never overwritten. A checkpoint in remote storage stays there, named by
its URI: only its adapter files are fetched, when they are read.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

from forge_ml.errors import ConfigError, RuntimeFault

ADAPTER_FILES = (
    "adapter_config.json",
    "adapter_model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "special_tokens_map.json",
)


def copy_adapter(checkpoint: str | Path, folder: Path) -> None:
    """Copy a checkpoint's adapter and tokenizer files into `folder`, not its optimizer state.

    `checkpoint` is a local directory or a URI in the round's storage (`s3://…`): only these few
    files are fetched from there, nothing is left behind in a temporary directory.
    """
    location = str(checkpoint)
    if "://" not in location:
        for name in ADAPTER_FILES:
            if (Path(location) / name).is_file():
                shutil.copy2(Path(location) / name, folder / name)
        return
    import pyarrow.fs

    filesystem, root = pyarrow.fs.FileSystem.from_uri(location)
    found = filesystem.get_file_info([f"{root}/{name}" for name in ADAPTER_FILES])
    for info in found:
        if info.type == pyarrow.fs.FileType.File:
            with (
                filesystem.open_input_stream(info.path) as source,
                (folder / info.base_name).open("wb") as target,
            ):
                shutil.copyfileobj(source, target)


def storage_child(storage: str, *parts: str) -> str:
    """`storage`/parts/…: a URI's query (`s3://b/p?endpoint_override=…`) stays at its end."""
    base, sep, query = storage.partition("?") if "://" in storage else (storage, "", "")
    return "/".join([base.rstrip("/"), *parts]) + sep + query


def checkpoint_location(storage: str, checkpoint: Any) -> str:
    """Where a trial's checkpoint is, as a string a later process can open: a local path, or a URI in
    the round's storage with its query (endpoint and the like) kept. Nothing is downloaded."""
    if checkpoint.filesystem.type_name == "local":
        return str(checkpoint.path)
    scheme = storage.split("://", 1)[0]
    query = storage.partition("?")[2]
    return f"{scheme}://{checkpoint.path.lstrip('/')}" + (f"?{query}" if query else "")


def check_storage(storage: str) -> None:
    """Refuse a storage URI that names no filesystem pyarrow (and so Ray Tune) can open, or a bucket
    that does not exist (exit 1); one that cannot be reached is a runtime fault (exit 2). Before any
    work, where Ray Tune would fail after the base is built and Ray started."""
    if "://" not in storage:
        return
    import pyarrow.fs

    try:
        filesystem, path = pyarrow.fs.FileSystem.from_uri(storage)
    except ValueError as exc:  # pyarrow's ArrowInvalid: a scheme or query option it does not know
        raise ConfigError(f"tune.storage_path: {storage}: {exc}") from None
    if filesystem.type_name not in ("s3", "gcs"):  # a local path (file://) or one Ray Tune judges itself
        return
    bucket = path.split("/", 1)[0]
    try:
        found = filesystem.get_file_info(bucket)
    except OSError as exc:
        raise RuntimeFault(f"tune.storage_path: cannot reach {storage}: {exc}") from None
    if found.type == pyarrow.fs.FileType.NotFound:
        raise ConfigError(f"tune.storage_path: {storage}: bucket {bucket!r} does not exist; create it first")


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


def share_base(source: str, storage: str) -> str:
    """Copy a locally built base into the round's shared storage, so trials on other nodes can fetch it."""
    import pyarrow.fs

    target = storage_child(storage, "bases", Path(source).name)
    if "://" not in target:
        raise ConfigError(f"tune.storage_path: {storage} is not shared storage")
    filesystem, path = pyarrow.fs.FileSystem.from_uri(target)
    filesystem.create_dir(path, recursive=True)
    pyarrow.fs.copy_files(source, path, destination_filesystem=filesystem)
    return target
