"""Load a base model and tokenizer for training or evaluation."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from forge_ml import hub
from forge_ml.config import ForgeConfig, LoraConfig, ModelConfig
from forge_ml.errors import ConfigError, ForgeError, InputError, RuntimeFault, describe
from forge_ml.models.generation import NO_HUB_KERNELS, auto_dtype, chat_text, turn_end
from forge_ml.models.offline_copy import prepare_offline_copy
from forge_ml.models.provenance import BaseProvenance, local_provenance
from forge_ml.models.source import is_local, resolve_model_source
from forge_ml.models.tiny import build_tiny_model
from forge_ml.progress import Stage
from forge_ml.project import Project, read_utf8

log = logging.getLogger(__name__)


@dataclass
class BaseModelRef:
    """A resolved base model: where it loads from, with the revision pinned by config."""

    source: str  # absolute local directory or Hub id
    revision: str | None
    built_locally: bool  # the directory exists on this machine only (tiny, an offline copy)
    provenance: BaseProvenance | None = None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "source": self.source,
            "revision": self.revision,
            "built_locally": self.built_locally,
        }
        if self.provenance is not None:
            data["provenance"] = self.provenance.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BaseModelRef:
        return cls(
            source=data["source"],
            revision=data.get("revision"),
            built_locally=bool(data.get("built_locally")),
            provenance=BaseProvenance.from_dict(data.get("provenance")),
        )

    def with_commit(self, commit: str | None) -> BaseModelRef:
        """This Hub base pinned to the commit it resolved to (what trained on it can name it)."""
        if not commit:
            return self
        provenance = self.provenance and replace(self.provenance, revision=commit)
        return replace(self, revision=commit, provenance=provenance)


_said_offline: set[str] = set()  # the Hub ids this process said load from their offline copy


def resolve_base(cfg: ForgeConfig, project: Project, training_text: list[str]) -> BaseModelRef:
    """Return the base model reference, building the tiny model when `model=tiny`.

    A Hub id with an offline copy configured (`model.offline_copy.of` is that id) resolves to
    the Hub when its snapshot is in the HF cache, or when the Hub is allowed (HF_HUB_OFFLINE
    unset) and reachable; else to the offline copy, converted once into forge-ml's cache.
    """
    if cfg.model.is_tiny:
        path = build_tiny_model(training_text, cfg.model.tiny, project.output / "models")
        return BaseModelRef(str(path), None, True, BaseProvenance(kind="tiny", name=path.name))
    source = resolve_model_source(cfg.model.name_or_path, project)
    if is_local(source):
        return BaseModelRef(source, None, False, local_provenance(source))
    revision = cfg.model.revision
    copy = cfg.model.offline_copy
    if copy.enabled and copy.of == source and not _hub_usable(source, revision):
        path, provenance = prepare_offline_copy(copy)
        if source not in _said_offline:  # once per process, not every round of a flywheel
            _said_offline.add(source)
            log.info(
                "the Hub is not in use: %s loads from its offline copy (%s)", source, provenance.describe()
            )
        return BaseModelRef(str(path), None, True, provenance)
    if hub.cached_snapshot(source, revision) is None:
        local = f"no directory {project.resolve(source)}, and " if "/" in source else ""
        if hub.hub_offline():
            raise InputError(
                f"model.name_or_path: {local}no snapshot of the Hub repo {source!r} in the HF cache while "
                "HF_HUB_OFFLINE is set; fix the path, download the model, or unset HF_HUB_OFFLINE"
            )
        if not hub.hub_reachable():  # fail in seconds, not after the Hub client's retries
            raise RuntimeFault(
                f"model.name_or_path: {local}the Hub ({hub.endpoint()}) does not answer, so the repo {source!r} "
                "cannot be fetched; fix the path, or try again when the Hub answers"
            )
    return BaseModelRef(source, revision, False, BaseProvenance(kind="hub", name=source, revision=revision))


def _hub_usable(repo_id: str, revision: str | None) -> bool:
    if hub.cached_snapshot(repo_id, revision) is not None:
        return True
    return not hub.hub_offline() and hub.hub_reachable()


def pin_hub_commit(base: BaseModelRef) -> BaseModelRef:
    """A Hub base with the commit of the snapshot it loaded from (from the HF cache); others unchanged."""
    if base.provenance is None or base.provenance.kind != "hub" or is_local(base.source):
        return base
    cached = hub.cached_snapshot(base.source, base.revision)
    return base.with_commit(cached[1]) if cached else base


def torch_dtype(name: str):
    """Return the torch dtype for a config name; 'auto' means bf16 on capable CUDA, else fp32."""
    import torch

    if name == "auto":
        return auto_dtype()
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def _hub_error(ref: BaseModelRef, exc: Exception, project_dir: str | Path | None) -> ForgeError:
    """A failed load: a retry may help (no answer, 429, 5xx: exit 2), or the name is wrong (exit 1).

    A Hub id that could also be a project path names both readings.
    """
    if is_local(ref.source):
        return InputError(f"model.name_or_path: could not load {ref.source!r} ({describe(exc)})")
    if hub.transient_failure(exc):
        return RuntimeFault(
            f"model.name_or_path: the Hub did not answer for {ref.source!r} ({describe(exc)}); try again, "
            "or download it and point to the local directory"
        )
    local = (
        f"no directory {ref.source} in the project ({Path(project_dir or '.') / ref.source}), and "
        if "/" in ref.source
        else ""
    )
    return InputError(
        f"model.name_or_path: {local}could not load {ref.source!r} from the Hub ({describe(exc)}); "
        "check the id, HF_TOKEN for gated models, or download it and point to the local directory"
    )


def load_tokenizer(ref: BaseModelRef, model_cfg: ModelConfig, project: Project) -> Any:
    """Return the tokenizer, with the configured chat template and a pad token."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(
            ref.source, revision=ref.revision, trust_remote_code=model_cfg.trust_remote_code
        )
    except (OSError, ValueError) as exc:
        raise _hub_error(ref, exc, project.root) from exc
    template = ref.source
    if model_cfg.chat_template:
        path = project.resolve(model_cfg.chat_template)
        if not path.is_file():
            raise InputError(f"model.chat_template: {path} not found")
        tokenizer.chat_template = read_utf8(path)
        template = str(path)
    if not getattr(tokenizer, "chat_template", None):
        raise ConfigError(
            f"model.chat_template: {ref.source} ships no chat template; set model.chat_template to a Jinja file"
        )
    check_turn_end(tokenizer, template)
    check_fixed_date(tokenizer, template)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = model_cfg.pad_token or tokenizer.eos_token
    return tokenizer


def check_turn_end(tokenizer: Any, template: str) -> None:
    """ConfigError unless the chat template ends an assistant's answer with a special token to stop at.

    Without one a trained model has nothing that ends generation: every answer runs on to
    `eval.max_new_tokens` and no whole-answer scorer can give it credit.
    """
    end = turn_end(tokenizer)
    if end.rendered and end.token_id is None:
        raise ConfigError(
            f"model.chat_template: the chat template of {template} writes {end.text!r} after an assistant's "
            "answer, no special token, so a trained model has no token to stop at and every answer would "
            "run on to eval.max_new_tokens; end the assistant's turn with {{ eos_token }} (or the model's "
            "own end-of-turn token)"
        )


DATE_FORMATS = ("%d %b %Y", "%d %B %Y", "%Y-%m-%d", "%B %d, %Y", "%b %d, %Y")


def check_fixed_date(tokenizer: Any, template: str) -> None:
    """Warn when the chat template writes today's date though given `date_string` (forge-ml's fixed one):
    its prompts differ from one day to the next, between training, eval and serving."""
    if "strftime_now" not in str(tokenizer.chat_template):
        return
    from datetime import datetime

    import jinja2

    try:
        rendered = chat_text(tokenizer, [{"role": "user", "content": "q"}], add_generation_prompt=True)
    except (
        jinja2.TemplateError
    ):  # a template that wants other turns: training's own rendering names its fault
        return
    today = datetime.now()
    dates = [today.strftime(f) for f in DATE_FORMATS]
    if any(d in rendered for d in dates):
        log.warning(
            "model.chat_template: the chat template of %s writes today's date into every prompt "
            "(strftime_now), so a prompt differs between training, eval and serving on different days; "
            "write {{ date_string }} instead (forge-ml gives it a fixed date)",
            template,
        )


def quantization_config(lora: LoraConfig) -> Any:
    """Return the bitsandbytes 4-bit config for QLoRA (CUDA only)."""
    import torch

    if not torch.cuda.is_available():
        raise ConfigError("lora.method=qlora needs a CUDA GPU; use lora=default on this machine")
    try:
        import bitsandbytes  # noqa: F401
    except ImportError:
        raise ConfigError("lora.method=qlora needs bitsandbytes: pip install 'forge-ml[qlora]'") from None
    from transformers import BitsAndBytesConfig

    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type=lora.quant_type,
        bnb_4bit_use_double_quant=lora.double_quant,
        bnb_4bit_compute_dtype=torch_dtype(lora.compute_dtype),
    )


def load_base_model(ref: BaseModelRef, cfg: ForgeConfig) -> Any:
    """Return the base causal LM, quantized to 4-bit when `lora.method=qlora`."""
    from transformers import AutoModelForCausalLM

    kwargs: dict[str, Any] = {
        "revision": ref.revision,
        "trust_remote_code": cfg.model.trust_remote_code,
        "dtype": torch_dtype(cfg.model.dtype),
        **NO_HUB_KERNELS,
    }
    if cfg.lora.method == "qlora":
        kwargs["quantization_config"] = quantization_config(cfg.lora)
        kwargs["device_map"] = {"": 0}
    try:
        with Stage(f"loading the base model ({Path(ref.source).name or ref.source})", unit="models"):
            model = AutoModelForCausalLM.from_pretrained(ref.source, **kwargs)
    except (OSError, ValueError) as exc:
        raise _hub_error(ref, exc, cfg.project_dir) from exc
    if cfg.lora.method == "qlora":
        from peft import prepare_model_for_kbit_training

        model = prepare_model_for_kbit_training(
            model, use_gradient_checkpointing=cfg.training.gradient_checkpointing
        )
    return model


def adapter_base(adapter_dir: Path) -> str | None:
    """Return the base model path recorded in a saved PEFT adapter, if any."""
    import json

    config = adapter_dir / "adapter_config.json"
    if not config.is_file():
        return None
    return json.loads(config.read_text()).get("base_model_name_or_path")
