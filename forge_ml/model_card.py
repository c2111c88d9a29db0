"""The model card and Hub-side adapter config of a pushed registry version (`forge-ml push`).

`model_card(facts)` renders the README.md: front matter the Hub reads (`base_model`, `library_name`),
the base, the MLflow lineage, data hashes, gold figures, the config as trained, the system prompt and
a usage snippet that prompts as forge-ml trained (the chat template, the system prompt) and stops
where the template ends an answer. `hub_adapter_config` rewrites the adapter's `adapter_config.json`
so it names the base by its Hub id, not the local directory it trained from.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forge_ml.secrets import redact_mapping, redact_text

CARD_FILE = "README.md"
ADAPTER_CONFIG_FILE = "adapter_config.json"

CONFIG_GROUPS = ("model", "lora", "training", "eval")


@dataclass
class CardFacts:
    """Everything a model card says about one registry version."""

    repo_id: str
    registered_model: str
    version: str
    aliases: list[str]
    base_source: str
    base_revision: str | None
    base_built_locally: bool
    source_run_id: str
    round_run_id: str | None
    gold_accuracy: float | None
    gold_per_category: dict[str, float]
    gold_total: int | None
    gold_hash: str | None
    data: dict[str, str] = field(default_factory=dict)  # dataset hashes and counts, by name
    config: dict[str, Any] = field(default_factory=dict)  # flattened config of the relevant groups
    system_prompt: str | None = None
    gate: str | None = None
    base_provenance: dict[str, str] = field(default_factory=dict)  # BaseProvenance.to_dict()
    stop_tokens: list[str] = field(default_factory=list)  # the template's end of turn, the tokenizer's EOS
    system_role: bool = True  # False: the system prompt leads the user turn
    max_new_tokens: int = 64
    answer_lead: str = ""  # what the chat template writes before every answer: part of the prompt
    template_date: str | None = None  # the `date_string` a template that writes today's date is given

    @property
    def base_kind(self) -> str:
        """hub | local | offline-copy | tiny (versions of before provenance: tiny when built locally)."""
        return self.base_provenance.get("kind") or ("tiny" if self.base_built_locally else "hub")

    @property
    def base_hub_id(self) -> str | None:
        """The Hub id this adapter's base is (or stands in for); None for a local or tiny base."""
        if self.base_kind == "hub":
            return self.base_source
        if self.base_kind == "offline-copy":
            return self.base_provenance.get("stands_in_for")
        return None


QLORA_KEYS = ("lora.quant_type", "lora.double_quant", "lora.compute_dtype")


def _applies(key: str, flat: dict[str, Any], base_kind: str) -> bool:
    """Whether a key had a say in this version: the tiny model's shape only for `model=tiny`, the
    offline copy's origin only for a base loaded from it, 4-bit settings only for `lora.method=qlora`,
    a scorer's own settings only for that scorer."""
    if key.startswith("model.tiny."):
        return base_kind == "tiny"
    if key.startswith("model.offline_copy."):
        return base_kind == "offline-copy"
    if key in QLORA_KEYS:
        return flat.get("lora.method") == "qlora"
    if key == "eval.json_field":
        return flat.get("eval.scorer") == "json_cmd"
    if key == "eval.scorer_path":
        return flat.get("eval.scorer") == "custom"
    return True


def relevant_config(flat: dict[str, Any]) -> dict[str, Any]:
    """Return the model/lora/training/eval keys of a flattened config, secrets redacted, sorted.

    `model.source` (where the base loaded from, possibly a local path) is left to the card's base section.
    """
    keep = {k: v for k, v in flat.items() if k.split(".", 1)[0] in CONFIG_GROUPS and k != "model.source"}
    return dict(sorted(redact_mapping(keep).items()))


def _front_matter(facts: CardFacts) -> str:
    import yaml

    meta: dict[str, Any] = {}
    if facts.base_hub_id:
        meta["base_model"] = facts.base_hub_id
    meta["library_name"] = "peft"
    meta["tags"] = ["forge-ml", "lora", "peft"]
    return yaml.safe_dump(meta, sort_keys=False, allow_unicode=True)


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _table(header: tuple[str, str], rows: list[tuple[str, str]]) -> list[str]:
    lines = [f"| {header[0]} | {header[1]} |", "|---|---|"]
    return lines + [f"| {_cell(a)} | {_cell(b)} |" for a, b in rows]


def _base_lines(facts: CardFacts) -> list[str]:
    prov = facts.base_provenance
    if facts.base_kind == "offline-copy":
        hub_id = facts.base_hub_id
        return [
            f"- base model: an offline copy of [{hub_id}](https://huggingface.co/{hub_id})",
            f"- weights: `{prov.get('file')}` from the Python package `{prov.get('name')}=={prov.get('version')}`, "
            f"{prov.get('note', 'converted')}",
            f"- weights file sha256: `{prov.get('sha256')}`",
            "- the Hub's own weights differ from these by the quantization round trip: evaluate the adapter "
            "on them before relying on it",
        ]
    if facts.base_kind == "local":
        made = [f"- made by: {prov['note']}"] if prov.get("note") else []  # `forge-ml pretrain`'s record
        return [
            f"- base model: a local directory (`{Path(facts.base_source).name}`), not on the Hub",
            "- revision: none (a local directory)",
            *made,
        ]
    if facts.base_kind == "tiny":
        return [
            f"- base model: built locally by forge-ml (`model=tiny`, `{Path(facts.base_source).name}`); "
            "it is not on the Hub, so this adapter loads only on that base (rebuild it from the project)",
            "- revision: none (a local build)",
        ]
    return [
        f"- base model: [{facts.base_source}](https://huggingface.co/{facts.base_source})",
        f"- revision: `{facts.base_revision or 'main (unpinned)'}`",
    ]


def hub_adapter_config(config: dict[str, Any], facts: CardFacts) -> dict[str, Any]:
    """Return the adapter config to publish: the base named by its Hub id (and commit), never a local path.

    PEFT records the directory the adapter trained from (an HF snapshot, an offline copy, the tiny
    build), which loads nowhere else; `AutoPeftModelForCausalLM` reads this field to fetch the base.
    A base that is not on the Hub is named by its directory's name only.
    """
    hub_id = facts.base_hub_id
    published = dict(config)
    published["base_model_name_or_path"] = hub_id or Path(facts.base_source).name
    published["revision"] = facts.base_revision if facts.base_kind == "hub" else None
    return published


def _prompt_lines(facts: CardFacts) -> list[str]:
    if not facts.system_prompt:
        return ['messages = [{"role": "user", "content": user}]']
    lines = [f"system_prompt = {facts.system_prompt!r}  # the system prompt it was trained with"]
    if facts.system_role:
        return [
            *lines,
            'messages = [{"role": "system", "content": system_prompt}, {"role": "user", "content": user}]',
        ]
    return [*lines, 'messages = [{"role": "user", "content": f"{system_prompt}\\n\\n{user}"}]']


def _render_lines(facts: CardFacts) -> list[str]:
    if not facts.template_date:
        return [
            "prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)"
        ]
    return [
        "prompt = tokenizer.apply_chat_template(  # on the date it trained with: the template writes one",
        f"    messages, add_generation_prompt=True, tokenize=False, date_string={facts.template_date!r}",
        ")",
    ]


def _usage(facts: CardFacts) -> list[str]:
    repo = json.dumps(facts.repo_id)
    if facts.base_hub_id:
        load = [
            "from peft import AutoPeftModelForCausalLM",
            "from transformers import AutoTokenizer",
            "",
            f"model = AutoPeftModelForCausalLM.from_pretrained({repo})",
        ]
    else:
        base = Path(facts.base_source).name
        load = [
            "from peft import PeftModel",
            "from transformers import AutoModelForCausalLM, AutoTokenizer",
            "",
            f"base = AutoModelForCausalLM.from_pretrained({json.dumps('path/to/' + base)})  # its base",
            f"model = PeftModel.from_pretrained(base, {repo})",
        ]
    stop = (
        [
            "# stop where the chat template ends an answer: the base's own EOS may be another token",
            f"stop = tokenizer.convert_tokens_to_ids({facts.stop_tokens!r})",
            "output = model.generate(",
            f"    **inputs, max_new_tokens={facts.max_new_tokens}, do_sample=False, eos_token_id=stop,",
            "    pad_token_id=tokenizer.pad_token_id,",
            ")",
        ]
        if facts.stop_tokens
        else [f"output = model.generate(**inputs, max_new_tokens={facts.max_new_tokens}, do_sample=False)"]
    )
    return [
        "## Usage",
        "",
        "```python",
        *load,
        f"tokenizer = AutoTokenizer.from_pretrained({repo})",
        "",
        'user = "your input"',
        *_prompt_lines(facts),
        *_render_lines(facts),
        *(
            [
                f"prompt += {facts.answer_lead!r}  # the template writes this before every answer: it trained after it"
            ]
            if facts.answer_lead
            else []
        ),
        'inputs = tokenizer(prompt, add_special_tokens=False, return_tensors="pt")',
        *stop,
        'print(tokenizer.decode(output[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True))',
        "```",
        "",
    ]


def model_card(facts: CardFacts) -> str:
    """Return the README.md of a pushed version: YAML front matter, then lineage, data, gold, config."""
    name = facts.repo_id.split("/", 1)[-1]
    aliases = ", ".join(f"@{a}" for a in facts.aliases) or "none"
    lineage = [
        ("registered model", f"`{facts.registered_model}`"),
        ("registry version", f"`{facts.version}`"),
        ("aliases", aliases),
        ("source run", f"`{facts.source_run_id}`"),
        (
            "round run",
            f"`{facts.round_run_id}`" if facts.round_run_id else "none (not from a flywheel round)",
        ),
    ]
    if facts.gate:
        lineage.append(("gate", facts.gate))
    lines = [
        "---",
        _front_matter(facts).rstrip("\n"),
        "---",
        "",
        f"# {name}",
        "",
        f"A LoRA adapter (with its tokenizer) trained and selected by forge-ml: version {facts.version} "
        f"of the registered model `{facts.registered_model}` ({aliases}).",
        "",
        "## Base model",
        "",
        *_base_lines(facts),
        "",
        "## Lineage (MLflow)",
        "",
        *_table(("field", "value"), lineage),
        "",
        "## Data",
        "",
        *_table(("field", "value"), [(k, f"`{v}`") for k, v in sorted(facts.data.items())] or [("-", "-")]),
        "",
        "## Gold evaluation",
        "",
    ]
    if facts.gold_accuracy is None:
        lines += ["No gold outcome was recorded for this version.", ""]
    else:
        lines += [
            f"- gold accuracy: {facts.gold_accuracy:.4f} on {facts.gold_total} examples "
            f"(gold hash `{facts.gold_hash}`)",
            "",
            *_table(
                ("category", "gold accuracy"),
                [(c, f"{a:.4f}") for c, a in sorted(facts.gold_per_category.items())],
            ),
            "",
        ]
    config = {k: v for k, v in facts.config.items() if _applies(k, facts.config, facts.base_kind)}
    config_rows = [(k, f"`{v}`") for k, v in redact_mapping(config).items()] or [("-", "not recorded")]
    lines += ["## Configuration (as trained)", "", *_table(("key", "value"), config_rows), ""]
    if facts.system_prompt:
        lines += ["## System prompt (used at training, evaluation and serving)", "", "```text"]
        lines += [facts.system_prompt.strip(), "```", ""]
    lines += _usage(facts)
    return redact_text("\n".join(lines).rstrip("\n") + "\n")
