"""Atomic file writes: a reader never sees half a file, a kill never leaves one."""

from __future__ import annotations

import functools
import glob
import hashlib
import json
import os
import socket
import stat
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

TEMP_SUFFIX = ".tmp"
CACHE_ENV = "FORGE_ML_CACHE"


def cache_root() -> Path:
    """forge-ml's cache: `FORGE_ML_CACHE`, else `$XDG_CACHE_HOME/forge-ml`, else ~/.cache/forge-ml."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "forge-ml"


HASH_CHUNK = 1 << 20


def file_hasher(path: Path, size: int | None = None) -> Any:
    """A sha256 object fed the first `size` bytes of `path` (all of it by default): more may follow."""
    h = hashlib.sha256()
    left = path.stat().st_size if size is None else size
    with path.open("rb") as fh:
        while left > 0:
            chunk = fh.read(min(HASH_CHUNK, left))
            if not chunk:
                break
            h.update(chunk)
            left -= len(chunk)
    return h


def file_sha256(path: Path, size: int | None = None) -> str:
    """sha256 of the first `size` bytes of `path` (all of it by default)."""
    return file_hasher(path, size).hexdigest()


def atomic_write_text(path: Path, text: str, *, verify: Callable[[Path], None] | None = None) -> None:
    """Write `text` to `path` through a temp file in the same directory and a rename.

    `verify(temp_path)` runs on the complete temp file before the rename; raising there leaves
    `path` untouched. The file keeps its permission bits (a new one gets the umask's).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_orphans(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{writer_tag()}.", suffix=TEMP_SUFFIX, dir=path.parent)
    try:
        os.fchmod(fd, _mode_for(path))
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        if verify is not None:
            verify(Path(tmp))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _sync_dir(path.parent)


def _sync_dir(folder: Path) -> None:
    """Persist the rename itself (the directory entry), so a power cut cannot undo it."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _mode_for(path: Path) -> int:
    """The permission bits the rewritten `path` keeps: its own, or for a new file 0o666 less the umask."""
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return 0o666 & ~_umask()


@functools.cache
def _umask() -> int:
    """The process umask (read once: setting it to read it is not thread-safe)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def writer_tag() -> str:
    """`PID@HOST` of this process, as temp names carry it (dots in the host name become `_`)."""
    return f"{os.getpid()}@{_host()}"


def _host() -> str:
    return socket.gethostname().replace(".", "_") or "localhost"


def writer_gone(tag: str) -> bool:
    """Whether the writer a temp name's `PID@HOST` tag names is dead: only a process on this host can be checked.

    On shared storage another host's in-flight write is never taken for an orphan. A bare PID
    (an older temp name) counts as this host's.
    """
    pid, _, host = tag.partition("@")
    if not pid.isdigit() or (host and host != _host()):
        return False
    return not pid_alive(int(pid))


def remove_orphans(path: Path) -> list[Path]:
    """Delete the temp files of writes to `path` whose process on this host is gone (killed mid-write)."""
    removed = []
    for tmp in path.parent.glob(f".{glob.escape(path.name)}.*{TEMP_SUFFIX}"):
        tag = tmp.name[len(path.name) + 2 :].split(".", 1)[0]
        if writer_gone(tag):
            tmp.unlink(missing_ok=True)
            removed.append(tmp)
    return removed


def pid_alive(pid: int) -> bool:
    """Whether a process with this id exists on this machine."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def atomic_write_json(path: Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def atomic_write_jsonl(path: Path, rows: Iterable[dict]) -> None:
    atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
