"""`forge-ml push`: a registry version's adapter, tokenizer and model card to the Hugging Face Hub.

Only this command reaches the Hub (through forge_ml/hub.py), and only after everything local
checked out: `HF_TOKEN` set, `--repo` well formed, the version or alias known. The default repo is
`<user of the token (whoami)>/<project name>`; when whoami is unavailable, `--repo` is required.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from forge_ml.commands import Command, Context, overrides_argument
from forge_ml.console import console, results
from forge_ml.errors import EXIT_OK, InputError

PUSH_KEYS = ("repo", "model", "version", "aliases", "private", "commit", "commit_url", "url", "files")


def _push_args(p) -> None:
    which = p.add_mutually_exclusive_group()
    which.add_argument("--alias", help="push the version this registry alias points at (default: champion)")
    which.add_argument("--version", dest="version_number", metavar="N", help="push registry version N")
    p.add_argument(
        "--repo", help="Hub repo id namespace/name (default: <user of HF_TOKEN>/<project name>, via whoami)"
    )
    visibility = p.add_mutually_exclusive_group()
    visibility.add_argument(
        "--private", dest="public", action="store_false", help="create the repo private (the default)"
    )
    visibility.add_argument("--public", dest="public", action="store_true", help="create the repo public")
    p.set_defaults(public=False)
    overrides_argument(p)


def _card_facts(registry: Any, files: Any, repo_id: str) -> Any:
    """Collect the card's facts: base, lineage run ids, data hashes and counts, gold, config as trained."""
    from forge_ml.errors import ConfigError
    from forge_ml.gate import GoldOutcome
    from forge_ml.model_card import CardFacts, relevant_config

    version = files.version
    tags = dict(version.tags)
    source = registry.client.get_run(version.run_id)
    round_run_id = tags.get("forge.round_run_id")
    round_run = (
        registry.find_run(round_run_id) if round_run_id else None
    )  # deleted since: the card still names it
    runs = [round_run] if round_run is not None else []
    data: dict[str, str] = {}
    for run in [*runs, source]:  # the source run's figures win over its round's
        data |= {
            k.removeprefix("forge.data."): v for k, v in run.data.tags.items() if k.startswith("forge.data.")
        }
        data |= {k.removeprefix("data."): v for k, v in run.data.params.items() if k.startswith("data.")}
    try:
        gold = GoldOutcome.from_tags(tags)
    except ConfigError:
        gold = None
    decision = tags.get("forge.gate.decision")
    base = files.settings["base"]
    system_role = bool(files.settings.get("system_role", True))
    return CardFacts(
        repo_id=repo_id,
        registered_model=registry.name,
        version=str(version.version),
        aliases=sorted(version.aliases or []),
        base_source=base["source"],
        base_revision=base.get("revision"),
        base_built_locally=bool(base.get("built_locally")),
        base_provenance=dict(base.get("provenance") or {}),
        source_run_id=version.run_id,
        round_run_id=round_run_id,
        gold_accuracy=gold.accuracy if gold else None,
        gold_per_category=gold.per_category if gold else {},
        gold_total=gold.total if gold else None,
        gold_hash=gold.gold_hash if gold else None,
        data=data,
        config=relevant_config(dict(source.data.params)),
        system_prompt=files.settings.get("system_prompt"),
        gate=f"{decision}: {tags.get('forge.gate.reasons', '')}" if decision else None,
        system_role=system_role,
        max_new_tokens=int(files.settings.get("max_new_tokens", 64)),
        **_prompting(files.adapter, files.settings.get("system_prompt") or "", system_role),
    )


def _prompting(adapter_dir: Path, system_prompt: str, system_role: bool) -> dict[str, Any]:
    """How the version is prompted, from its tokenizer: the tokens generation stops at (the chat
    template's end of turn, the EOS) and the text the template writes before every answer."""
    from transformers import AutoTokenizer

    from forge_ml.models.generation import (
        TEMPLATE_DATE,
        answer_lead,
        build_messages,
        chat_text,
        stop_token_ids,
    )

    tokenizer = AutoTokenizer.from_pretrained(adapter_dir)
    messages = build_messages(system_prompt, "q", system_role=system_role)
    header = chat_text(tokenizer, messages, add_generation_prompt=True)
    return {
        "template_date": TEMPLATE_DATE if "date_string" in str(tokenizer.chat_template) else None,
        "stop_tokens": [tokenizer.convert_ids_to_tokens(i) for i in stop_token_ids(None, tokenizer)],
        "answer_lead": answer_lead(tokenizer, messages, header),
    }


def _uploads(adapter_dir: Path, facts: Any, card: Path) -> dict[str, Path | bytes]:
    """Every file of the adapter dir (weights, tokenizer) but PEFT's own README; the card; the adapter
    config naming the base as the Hub knows it."""
    import json

    from forge_ml.model_card import ADAPTER_CONFIG_FILE, CARD_FILE, hub_adapter_config

    files: dict[str, Path | bytes] = {
        p.relative_to(adapter_dir).as_posix(): p for p in sorted(adapter_dir.rglob("*")) if p.is_file()
    }
    config = json.loads((adapter_dir / ADAPTER_CONFIG_FILE).read_text(encoding="utf-8"))
    published = json.dumps(hub_adapter_config(config, facts), indent=2, sort_keys=True) + "\n"
    return files | {ADAPTER_CONFIG_FILE: published.encode("utf-8"), CARD_FILE: card}


def _print_push(result: Any, model: str, version: str, aliases: list[str], sizes: dict[str, int]) -> None:
    from rich.table import Table

    where = f" ({', '.join(f'@{a}' for a in aliases)})" if aliases else ""
    visibility = "private" if result.private else "public"
    results.print(
        f"pushed {model} v{version}{where} to {result.repo_id} ({visibility}), commit {result.commit[:12]}",
        soft_wrap=True,
        highlight=False,
    )
    table = Table()
    table.add_column("file")
    table.add_column("bytes", justify="right")
    for path in result.files:
        table.add_row(path, str(sizes[path]))
    results.print(table)
    results.print(result.url, soft_wrap=True, highlight=False)


def run_push(ctx: Context) -> int:
    from forge_ml.hub import HubClient, check_repo_id, hub_token, repo_name
    from forge_ml.model_card import CARD_FILE, model_card
    from forge_ml.registry import CHAMPION, Registry
    from forge_ml.tracking import Tracker, tracking_uri

    args = ctx.args
    cfg = ctx.compose()
    project = ctx.project()
    token = hub_token()  # nothing reaches the Hub without it
    repo_id = check_repo_id(args.repo) if args.repo else None
    if (
        tracking_uri(cfg, project) == project.default_tracking_uri
        and not (project.root / "mlflow.db").exists()
    ):
        raise InputError(
            f"{project.root / 'mlflow.db'}: nothing is registered yet; run `forge-ml flywheel` or `forge-ml train --register` first"
        )
    registry = Registry.for_project(cfg, project)
    alias = None if args.version_number else (args.alias or CHAMPION)
    version = registry.version(args.version_number, alias=alias)
    number, aliases = str(version.version), sorted(version.aliases or [])
    ctx.report(model=registry.name, version=number, aliases=aliases, private=not args.public)
    with tempfile.TemporaryDirectory(prefix="forge-push-") as tmp:
        files = registry.download(version, Path(tmp) / "model")
        hub = HubClient(token)
        repo_id = repo_id or f"{hub.user()}/{repo_name(cfg.name)}"
        ctx.report(repo=repo_id)
        facts = _card_facts(registry, files, repo_id)
        card_path = Path(tmp) / CARD_FILE
        card_path.write_text(model_card(facts), encoding="utf-8")
        uploads = _uploads(files.adapter, facts, card_path)
        console.print(
            f"pushing {registry.name} v{number}: {len(uploads)} files to {repo_id} on {hub.endpoint}"
        )
        tags = {
            "forge.kind": "push",
            "forge.hub.repo": repo_id,
            "forge.version": number,
            "forge.registered_model": registry.name,
            "forge.source_run_id": version.run_id,
        }
        with Tracker(cfg, project).start_run("push", tags) as run:
            ctx.run_id = run.run_id
            run.log_params(
                {
                    "hub.repo": repo_id,
                    "hub.endpoint": hub.endpoint,
                    "hub.private_requested": not args.public,
                    "registry.model": registry.name,
                    "registry.version": number,
                    "registry.alias": alias,
                }
            )
            result = hub.push(
                repo_id,
                uploads,
                private=not args.public,
                message=f"forge-ml: {registry.name} v{number}",
                description=f"registry version {number} of {registry.name}, source run {version.run_id}",
            )
            run.set_tags(
                {
                    "forge.hub.commit": result.commit,
                    "forge.hub.url": result.url,
                    "forge.hub.private": result.private,
                }
            )
            run.log_artifact(card_path, "hub")
        registry.client.set_model_version_tag(registry.name, number, "forge.hub.repo", repo_id)
        registry.client.set_model_version_tag(registry.name, number, "forge.hub.commit", result.commit)
        sizes = {p: len(f) if isinstance(f, bytes) else f.stat().st_size for p, f in uploads.items()}
    ctx.report(
        private=result.private,
        commit=result.commit,
        commit_url=result.commit_url,
        url=result.url,
        files=result.files,
    )
    _print_push(result, registry.name, number, aliases, sizes)
    if args.public and result.private:
        console.print(f"note: {repo_id} already existed and stays private; change its visibility on the Hub")
    return EXIT_OK


COMMANDS = [
    Command(
        "push",
        "upload a registry version (adapter, tokenizer, model card) to the Hugging Face Hub",
        _push_args,
        run_push,
        PUSH_KEYS,
    ),
]
