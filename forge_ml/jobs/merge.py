"""`forge-ml merge`: merge a registry version's LoRA adapter into its base model, for export.

PEFT `merge_and_unload` folds the adapter (and any fully trained `modules_to_save`) into the base
weights; the model and tokenizer are saved with `save_pretrained`, so the result loads with
`AutoModelForCausalLM.from_pretrained(out)` alone and answers as the adapter does. The directory
is built beside its destination and renamed into place: a reader never sees half of it. Its
provenance lies in `forge_merge.json` inside it and on an MLflow run (forge.kind=merge).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib.metadata import version as installed_version
from pathlib import Path
from typing import Any

from forge_ml import __version__
from forge_ml.config import ForgeConfig
from forge_ml.errors import InputError
from forge_ml.models.generation import NO_HUB_KERNELS, stop_token_ids
from forge_ml.models.loader import torch_dtype
from forge_ml.project import Project
from forge_ml.registry import CHAMPION, ModelFiles, Registry
from forge_ml.tracking import Tracker

PROVENANCE_FILE = "forge_merge.json"
METHOD = "peft.merge_and_unload"


@dataclass
class MergeResult:
    model: str
    version: str
    out: Path
    base: str  # the base model as registered (a Hub id or the local path it was built at)
    adapter_run_id: str
    run_id: str


def default_out(project: Project, model: str, number: str) -> Path:
    return project.output / "merged" / f"{model}-v{number}"


def check_out(out: Path) -> None:
    """InputError naming `out` unless it is absent or an empty directory."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise InputError(f"--out: {out} is not empty; choose a new directory or remove it first")


def merge_into(files: ModelFiles, dest: Path, dtype: str, trust: bool) -> None:
    """Load the base of `files` in `dtype`, merge its adapter in, save model and tokenizer into `dest`.

    `trust` (remote code) comes from the project's config, never from the downloaded artifact.
    """
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base = files.base_ref()
    model = AutoModelForCausalLM.from_pretrained(
        base.source,
        revision=base.revision,
        dtype=torch_dtype(dtype),
        trust_remote_code=trust,
        **NO_HUB_KERNELS,
    )
    merged = PeftModel.from_pretrained(model, str(files.adapter)).merge_and_unload()
    tokenizer = AutoTokenizer.from_pretrained(str(files.adapter), trust_remote_code=trust)
    # servers (transformers, vLLM, TGI) stop at generation_config's EOS ids: give them the turn's end
    stops = stop_token_ids(merged.generation_config, tokenizer)
    if len(stops) > 1:
        merged.generation_config.eos_token_id = stops
    merged.save_pretrained(str(dest))
    tokenizer.save_pretrained(str(dest))


def provenance(registry: Registry, files: ModelFiles, run_id: str, dtype: str) -> dict[str, Any]:
    """What `forge_merge.json` records: the source version, its base, the adapter, the method."""
    version = files.version
    lora = json.loads((files.adapter / "adapter_config.json").read_text(encoding="utf-8"))
    s = files.settings
    return {
        "source": {
            "model": registry.name,
            "version": str(version.version),
            "uri": f"models:/{registry.name}/{version.version}",
            "aliases": sorted(getattr(version, "aliases", []) or []),
        },
        "adapter_run_id": version.run_id,
        "base": s["base"],
        "method": METHOD,
        "dtype": dtype,
        "lora": {
            key: lora.get(key)
            for key in ("peft_type", "r", "lora_alpha", "target_modules", "modules_to_save")
        },
        "serving": {key: s[key] for key in ("system_prompt", "system_role", "max_new_tokens")},
        "merge_run_id": run_id,
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "versions": {"forge-ml": __version__}
        | {n: installed_version(n) for n in ("torch", "transformers", "peft")},
    }


def run_merge(
    cfg: ForgeConfig, *, alias: str | None = None, version: int | None = None, out: str | None = None
) -> MergeResult:
    """Merge version `version` (or the one `alias` points at, default `champion`) into its base."""
    project = Project(Path(cfg.project_dir))
    registry = Registry.for_project(cfg, project)
    found = registry.version(version, alias=None if version is not None else alias or CHAMPION)
    number = str(found.version)
    dest = project.resolve(out) if out else default_out(project, registry.name, number)
    check_out(dest)
    tags = {
        "forge.kind": "merge",
        "forge.merge.model": registry.name,
        "forge.merge.version": number,
        "forge.merge.method": METHOD,
        "forge.merge.adapter_run_id": found.run_id,
        "forge.merge.out": str(dest),
    }
    dtype = str(torch_dtype(cfg.model.dtype)).removeprefix("torch.")  # "auto" resolved, as recorded
    with Tracker(cfg, project).start_run(f"merge-v{number}", tags) as run:
        with tempfile.TemporaryDirectory(prefix="forge-merge-") as tmp:
            files = registry.download(found, Path(tmp))
            trust = cfg.model.trust_remote_code
            if files.settings.get("trust_remote_code") and not trust:
                raise InputError(
                    f"version {number} was trained with model.trust_remote_code=true: merging runs the base "
                    "model's own code; set model.trust_remote_code=true in your config if you trust it"
                )
            record = provenance(registry, files, run.run_id, dtype)
            run.set_tags({"forge.merge.base": record["base"]["source"]})
            _build(dest, lambda staging: _write(files, staging, record, dtype, trust))
        run.log_artifact(dest / PROVENANCE_FILE, "merge")
    return MergeResult(registry.name, number, dest, record["base"]["source"], found.run_id, run.run_id)


def _write(files: ModelFiles, staging: Path, record: dict[str, Any], dtype: str, trust: bool) -> None:
    merge_into(files, staging, dtype, trust)
    text = json.dumps(record, indent=2, ensure_ascii=False) + "\n"
    (staging / PROVENANCE_FILE).write_text(text, encoding="utf-8")  # the directory is renamed whole


def _build(dest: Path, fill: Callable[[Path], None]) -> None:
    """Fill a fresh directory beside `dest`, then rename it to `dest` (an empty `dest` is replaced)."""
    staging = dest.parent / f".{dest.name}.{uuid.uuid4().hex[:12]}.tmp"
    staging.mkdir(parents=True)
    try:
        fill(staging)
        check_out(dest)  # filled by someone else meanwhile?
        os.replace(staging, dest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
