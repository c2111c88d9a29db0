"""`forge-ml push` against a local stand-in for the Hub (tests/hub_stand_in.py), with a real registry."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from conftest import FAST, run_cli, shrink_jsonl
from hub_stand_in import HubStandIn

from forge_ml.hub import check_repo_id, repo_name

TOKEN = "hf_SENTINELpushsecret0000000001"
KEYS = ["repo", "model", "version", "aliases", "private", "commit", "commit_url", "url", "files"]
COMMON = ["command", "success", "exit_code", "run_id", "config_hash"]
ADAPTER_FILES = {"adapter_config.json", "adapter_model.safetensors"}
TOKENIZER_FILES = {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"}


@dataclass
class Registered:
    project: object
    cfg: object
    run_id: str
    round_run_id: str
    gold: object  # GoldOutcome of version 1
    data_tags: dict
    hf_home: Path

    @property
    def root(self) -> Path:
        return self.project.root

    def client(self):
        from mlflow import MlflowClient

        uri = f"sqlite:///{self.root / 'mlflow.db'}"
        return MlflowClient(tracking_uri=uri, registry_uri=uri)


@pytest.fixture(scope="module")
def registered(tmp_path_factory) -> Registered:
    """One tiny training, registered as version 1 of `small` from a round run, and promoted to champion."""
    from hydra.core.global_hydra import GlobalHydra

    from forge_ml.compose import compose_config
    from forge_ml.config import GateConfig
    from forge_ml.data.project_data import read_system_prompt
    from forge_ml.evaluation.scorers import scoring_rule
    from forge_ml.gate import GoldOutcome
    from forge_ml.jobs.train import run_train
    from forge_ml.project import init_project
    from forge_ml.registry import Registry
    from forge_ml.tracking import Tracker

    base = tmp_path_factory.mktemp("push")
    project = init_project(base / "small", example="drone-router")
    shrink_jsonl(project.root / "dataset" / "canonical.jsonl", 240)
    shrink_jsonl(project.root / "dataset" / "gold.jsonl", 27)
    GlobalHydra.instance().clear()
    cfg = compose_config(project, FAST)
    GlobalHydra.instance().clear()
    summary = run_train(cfg)
    tracker = Tracker(cfg, project)
    with tracker.start_run("round-001", {"forge.kind": "round", "forge.round": "round-001"}) as round_run:
        round_run.set_tags({"forge.data.canonical_hash": "c" * 64})
        round_run.log_params({"data.writer": "generator"})
    data_tags = tracker.client.get_run(summary.run_id).data.tags
    gold = GoldOutcome.from_report(
        summary.gold, data_tags["forge.data.gold_hash"], scoring_rule(cfg.eval, project.root)
    )
    registry = Registry.for_project(cfg, project)
    version = registry.register(
        summary.run_id,
        adapter_dir=summary.adapter_dir,
        base=summary.base,
        system_prompt=read_system_prompt(project, cfg.task),
        system_role=cfg.model.system_role,
        max_new_tokens=cfg.eval.max_new_tokens,
        outcome=gold,
        tags={"forge.round": 1, "forge.round_run_id": round_run.run_id},
    )
    assert registry.gate(version, gold, GateConfig()).promote
    return Registered(project, cfg, summary.run_id, round_run.run_id, gold, data_tags, base / "hf-home")


def hub_env(hub: HubStandIn, home: Path, token: str | None = TOKEN) -> dict:
    env = {
        "HF_ENDPOINT": hub.base_url,
        "HF_HOME": str(home),
        "HF_HUB_OFFLINE": "0",
        "HF_HUB_DISABLE_TELEMETRY": "1",  # huggingface_hub's own unauthenticated telemetry fetch
        "HF_TOKEN": token or "",
    }
    return env


def push(registered: Registered, hub: HubStandIn, *args: str, token: str | None = TOKEN):
    result = run_cli(
        "-p", str(registered.root), "--json", "push", *args, env=hub_env(hub, registered.hf_home, token)
    )
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1, (result.stdout, result.stderr[-3000:])
    return result, json.loads(lines[0])


def push_runs(registered: Registered) -> list:
    client = registered.client()
    exp = client.get_experiment_by_name("small")
    return client.search_runs([exp.experiment_id], "tags.`forge.kind` = 'push'")


@dataclass
class Pushed:
    result: subprocess.CompletedProcess
    envelope: dict
    hub: HubStandIn
    version_tags: dict


@pytest.fixture(scope="module")
def pushed(registered) -> Pushed:
    """`forge-ml push` with every default: the champion, to <whoami user>/small, private."""
    with HubStandIn(TOKEN) as hub:
        result, envelope = push(registered, hub)
    tags = registered.client().get_model_version("small", "1").tags
    return Pushed(result, envelope, hub, tags)


@pytest.fixture
def hub():
    with HubStandIn(TOKEN) as stand_in:
        yield stand_in


# ---- the push itself ----


@pytest.mark.slow
def test_push_uploads_adapter_tokenizer_and_card_in_one_private_commit(registered, pushed):
    result, env, hub = pushed.result, pushed.envelope, pushed.hub
    assert result.returncode == 0, result.stderr[-3000:]
    assert list(env) == [*COMMON, *KEYS, "error"]
    assert env["success"] is True and env["error"] is None and len(env["config_hash"]) == 12
    assert env["repo"] == "forge-tester/small" and env["model"] == "small" and env["version"] == "1"
    assert env["aliases"] == ["challenger", "champion"] and env["private"] is True
    assert env["url"] == f"{hub.base_url}/forge-tester/small"

    repo = hub.repos["forge-tester/small"]
    assert repo.private is True
    create = next(r for r in hub.requests if r.path == "/api/repos/create")
    assert json.loads(create.body) == {
        "name": "small",
        "organization": "forge-tester",
        "visibility": "private",
    }
    assert [c.message for c in repo.commits] == ["forge-ml: small v1"]
    assert env["commit"] == repo.commits[0].oid and env["commit_url"].endswith(f"/commit/{repo.sha}")
    assert set(repo.files) == ADAPTER_FILES | TOKENIZER_FILES | {"README.md"}
    assert env["files"] == sorted(repo.files)

    adapter_dir = registered.root / "output" / "adapters" / registered.run_id
    for name in ADAPTER_FILES - {"adapter_config.json"} | TOKENIZER_FILES:  # byte for byte the version's
        assert repo.files[name] == (adapter_dir / name).read_bytes(), name
    # the adapter config as trained, but for the base: named by its directory, not the local path
    trained = json.loads((adapter_dir / "adapter_config.json").read_text())
    published = json.loads(repo.files["adapter_config.json"])
    assert Path(trained["base_model_name_or_path"]).is_absolute() and published["peft_type"] == "LORA"
    assert published == trained | {
        "base_model_name_or_path": Path(trained["base_model_name_or_path"]).name,
        "revision": None,
    }
    local = [str(registered.root), str(registered.root.parent)]  # no local path reaches the Hub
    assert not [(name, p) for name, data in repo.files.items() for p in local if p.encode() in data]
    # every request carried the token; the sequence is whoami, create, read, validate, preupload, commit
    assert all(r.headers["authorization"] == f"Bearer {TOKEN}" and r.status in (200,) for r in hub.requests)
    assert [r.path.rsplit("/", 1)[-1] for r in hub.requests] == [
        "whoami-v2",
        "create",
        "small",
        "validate-yaml",
        "main",
        "main",
    ]
    assert "forge-tester/small" in result.stderr or "forge-tester/small" in result.stdout


@pytest.mark.slow
def test_the_card_carries_the_lineage(registered, pushed):
    card = pushed.hub.repos["forge-tester/small"].files["README.md"].decode()
    meta = yaml.safe_load(re.match(r"^---\n(.*?)\n---\n", card, re.DOTALL).group(1))
    assert meta == {
        "library_name": "peft",
        "tags": ["forge-ml", "lora", "peft"],
    }  # a local base: no base_model
    assert "built locally by forge-ml (`model=tiny`" in card
    assert f"| source run | `{registered.run_id}` |" in card
    assert f"| round run | `{registered.round_run_id}` |" in card
    assert "| registered model | `small` |" in card and "| registry version | `1` |" in card
    assert "| aliases | @challenger, @champion |" in card
    assert "| gate | promoted: first version (gold accuracy" in card
    tags = registered.data_tags
    for name in ("train", "dev", "gold"):
        assert f"| {name}_hash | `{tags[f'forge.data.{name}_hash']}` |" in card
    assert f"| canonical_hash | `{'c' * 64}` |" in card and "| writer | `generator` |" in card
    assert "| gold_size | `27` |" in card
    gold = registered.gold
    assert f"- gold accuracy: {gold.accuracy:.4f} on 27 examples (gold hash `{gold.gold_hash}`)" in card
    assert len(gold.per_category) >= 3
    for category, accuracy in gold.per_category.items():
        assert f"| {category} | {accuracy:.4f} |" in card
    assert "| lora.r | `8` |" in card and "| training.epochs | `2` |" in card
    assert "| model.tiny.hidden_size | `64` |" in card and "tracking." not in card  # relevant groups only
    assert "## System prompt" in card
    assert str(registered.root) not in card  # no local path of the project reaches a public card


def usage_code(card: str) -> str:
    """The card's Python usage snippet."""
    return re.search(r"## Usage\n\n```python\n(.*?)```", card, re.DOTALL).group(1)


@pytest.mark.slow
def test_the_cards_usage_answers_as_the_registered_version_does(registered, pushed, tmp_path):
    """The card's snippet, run as a user would (the repo's files, the base it names), prompts with the
    system prompt and chat template the version trained with: it answers what the registry version answers."""
    from forge_ml.registry import Registry

    repo = pushed.hub.repos["forge-tester/small"]
    download = tmp_path / "small"
    download.mkdir()
    for name, data in repo.files.items():
        (download / name).write_bytes(data)
    card = repo.files["README.md"].decode()
    base_name = json.loads(repo.files["adapter_config.json"])["base_model_name_or_path"]
    base_dir = registered.root / "output" / "models" / base_name
    assert base_dir.is_dir() and f'from_pretrained("path/to/{base_name}")' in card
    prompt = "take off to 30 m, then hover"
    code = usage_code(card)
    for placeholder, value in [
        (f'"path/to/{base_name}"', str(base_dir)),
        ('"forge-tester/small"', str(download)),
        ('"your input"', prompt),
    ]:
        assert placeholder in code, placeholder
        code = code.replace(placeholder, json.dumps(value))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONWARNINGS": "ignore"}
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert ran.returncode == 0, ran.stderr[-3000:]
    registry = Registry.for_project(registered.cfg, registered.project)
    (answer,) = registry.load(registry.version("1")).predict([prompt])
    assert ran.stdout.strip() == answer and answer


@pytest.mark.slow
def test_the_push_is_recorded_in_mlflow_and_on_the_version(registered, pushed):
    env = pushed.envelope
    run = registered.client().get_run(env["run_id"])
    assert run.info.status == "FINISHED" and run.info.run_name == "push"
    tags, params = run.data.tags, run.data.params
    assert tags["forge.kind"] == "push" and tags["forge.hub.repo"] == "forge-tester/small"
    assert tags["forge.hub.commit"] == env["commit"] and tags["forge.version"] == "1"
    assert tags["forge.source_run_id"] == registered.run_id and tags["forge.hub.private"] == "True"
    assert params["hub.repo"] == "forge-tester/small" and params["registry.version"] == "1"
    assert params["registry.alias"] == "champion" and params["hub.endpoint"] == pushed.hub.base_url
    assert [a.path for a in registered.client().list_artifacts(run.info.run_id, "hub")] == ["hub/README.md"]
    assert pushed.version_tags["forge.hub.repo"] == "forge-tester/small"
    assert pushed.version_tags["forge.hub.commit"] == env["commit"]


@pytest.mark.slow
def test_the_token_goes_nowhere_but_the_authorization_header(registered, pushed, tmp_path):
    hub = pushed.hub
    for path, content in hub.repos["forge-tester/small"].files.items():
        assert TOKEN.encode() not in content, path
    assert TOKEN not in json.dumps(pushed.envelope)
    assert TOKEN not in pushed.result.stdout + pushed.result.stderr
    assert all(TOKEN.encode() not in r.body for r in hub.requests)  # only in headers
    client = registered.client()
    for run in client.search_runs([client.get_experiment_by_name("small").experiment_id]):
        assert TOKEN not in json.dumps({**run.data.params, **run.data.tags}), run.info.run_name
        for artifact in client.list_artifacts(run.info.run_id, "hub"):
            local = client.download_artifacts(run.info.run_id, artifact.path, str(tmp_path))
            assert TOKEN not in Path(local).read_text()
    for version in client.search_model_versions("name = 'small'"):
        assert TOKEN not in json.dumps(version.tags)


@pytest.mark.slow
def test_push_a_version_by_number_to_a_named_public_repo(registered, pushed, hub):
    result, env = push(registered, hub, "--version", "1", "--repo", "team-org/router-v1", "--public")
    assert result.returncode == 0, result.stderr[-3000:]
    assert env["repo"] == "team-org/router-v1" and env["private"] is False and env["version"] == "1"
    assert hub.count("whoami") == 0  # --repo given: no need to ask who the token is
    create = next(r for r in hub.requests if r.path == "/api/repos/create")
    assert json.loads(create.body) == {
        "name": "router-v1",
        "organization": "team-org",
        "visibility": "public",
    }
    assert (
        hub.repos["team-org/router-v1"].private is False
        and "README.md" in hub.repos["team-org/router-v1"].files
    )
    run = registered.client().get_run(env["run_id"])
    assert run.data.params["hub.private_requested"] == "False" and "registry.alias" not in run.data.params
    tags = registered.client().get_model_version("small", "1").tags  # the latest push wins
    assert tags["forge.hub.repo"] == "team-org/router-v1" and tags["forge.hub.commit"] == env["commit"]


@pytest.mark.slow
def test_an_existing_public_repo_is_refused_without_public(registered, hub):
    hub.seed_repo("forge-tester/small", private=False)
    before = len(push_runs(registered))
    result, env = push(registered, hub)
    assert result.returncode == 1 and env["error"]["class"] == "InputError"
    assert (
        "forge-tester/small already exists" in env["error"]["message"]
        and "--public" in env["error"]["message"]
    )
    assert hub.repos["forge-tester/small"].commits == [] and hub.count("/commit/") == 0
    assert len(push_runs(registered)) == before + 1
    failed = registered.client().get_run(env["run_id"])
    assert failed.info.status == "FAILED" and "already exists" in failed.data.tags["forge.error"]


# ---- nothing reaches the Hub unless it must ----


@pytest.mark.slow
def test_without_hf_token_push_exits_1_and_sends_nothing(registered, hub):
    before = len(push_runs(registered))
    result, env = push(registered, hub, token=None)
    assert result.returncode == 1 and env["error"]["class"] == "InputError"
    assert "HF_TOKEN is not set" in env["error"]["message"] and "HF_TOKEN is not set" in result.stderr
    assert hub.requests == [] and len(push_runs(registered)) == before


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--version", "99"], "has no version 99"),
        (["--alias", "nightly"], "has no alias @nightly"),
        (["--repo", "not a repo"], "--repo 'not a repo'"),
        (["--repo", "a/b/c"], "--repo 'a/b/c'"),
    ],
)
def test_unknown_version_alias_or_bad_repo_exits_1_and_sends_nothing(registered, hub, args, named):
    before = len(push_runs(registered))
    result, env = push(registered, hub, *args)
    assert result.returncode == 1 and env["error"]["class"] == "InputError"
    assert named in env["error"]["message"]
    assert hub.requests == [] and len(push_runs(registered)) == before


@pytest.mark.slow
def test_a_refused_token_exits_1_and_uploads_nothing(registered, hub):
    result, env = push(registered, hub, "--repo", "forge-tester/small", token="hf_WRONGtoken000000000000001")
    assert result.returncode == 1 and env["error"]["class"] == "TokenRefused"
    assert f"the Hub at {hub.base_url} refused HF_TOKEN" in env["error"]["message"]
    # create_repo(exist_ok=True) reads the repo after a 401 (it may exist); both are refused
    assert [(r.path, r.status) for r in hub.requests] == [
        ("/api/repos/create", 401),
        ("/api/models/forge-tester/small", 401),
    ]
    assert hub.repos == {}


@pytest.mark.slow
def test_an_unreachable_hub_exits_2_and_the_push_run_failed(registered, tmp_path):
    env = {"HF_ENDPOINT": "http://127.0.0.1:9", "HF_HOME": str(tmp_path), "HF_TOKEN": TOKEN}
    result = run_cli("-p", str(registered.root), "--json", "push", "--repo", "me/x", env=env)
    data = json.loads(result.stdout)
    assert result.returncode == 2 and data["error"]["class"] == "RuntimeFault"
    assert "the Hub at http://127.0.0.1:9 is unreachable while creating me/x" in data["error"]["message"]
    assert registered.client().get_run(data["run_id"]).info.status == "FAILED"


@pytest.mark.slow
def test_whoami_unavailable_is_a_runtime_fault_that_names_the_way_around_it(registered, hub):
    hub.whoami_status = (
        503  # the Hub is down for a moment: a retry may help, so exit 2 (not the user's input)
    )
    result, env = push(registered, hub)
    assert result.returncode == 2 and env["error"]["class"] == "RuntimeFault"
    message = env["error"]["message"]
    assert "whoami" in message and "try again, or pass --repo namespace/name" in message
    assert [r.path for r in hub.requests] == ["/api/whoami-v2"] and hub.repos == {}


def test_push_before_anything_is_registered_exits_1_and_writes_nothing(small_project, hub, tmp_path):
    result = run_cli("-p", str(small_project.root), "--json", "push", env=hub_env(hub, tmp_path / "hf-home"))
    assert (
        result.returncode == 1
        and "nothing is registered yet" in json.loads(result.stdout)["error"]["message"]
    )
    assert not (small_project.root / "mlflow.db").exists() and hub.requests == []


def test_status_and_importing_the_hub_module_send_nothing(small_project, hub, tmp_path):
    """A command that does not need the Hub never calls it, even with HF_ENDPOINT and HF_TOKEN set."""
    env = hub_env(hub, tmp_path / "hf-home") | {"HF_HUB_DISABLE_TELEMETRY": "0"}
    status = run_cli("-p", str(small_project.root), "status", env=env)
    assert status.returncode == 0, status.stderr[-2000:]
    code = "import forge_ml.hub, forge_ml.commands.hub, forge_ml.cli; forge_ml.hub.HubClient"
    imported = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True, check=False
    )
    assert imported.returncode == 0, imported.stderr
    helped = run_cli("push", "--help", env=env)
    assert helped.returncode == 0 and "--public" in helped.stdout
    assert hub.requests == []


def test_the_stand_in_refuses_requests_without_the_token(hub):
    from urllib.error import HTTPError
    from urllib.request import Request, urlopen

    for headers in ({}, {"Authorization": "Bearer hf_other"}):
        with pytest.raises(HTTPError) as refused:
            urlopen(Request(f"{hub.base_url}/api/whoami-v2", headers=headers), timeout=10)
        assert refused.value.code == 401
    with urlopen(
        Request(f"{hub.base_url}/api/whoami-v2", headers={"Authorization": f"Bearer {TOKEN}"})
    ) as ok:
        assert json.loads(ok.read())["name"] == "forge-tester"
    assert [r.status for r in hub.requests] == [401, 401, 200]


# ---- repo names, without the Hub ----


@pytest.mark.parametrize(
    ("name", "repo"),
    [
        ("drone-router", "drone-router"),
        ("my task v2", "my-task-v2"),
        ("--x..y--", "x.y"),
        ("!!", "model"),
        ("voyages-été", "voyages-ete"),
        ("Año ñandú", "Ano-nandu"),
        ("予約", "model"),
    ],
)
def test_project_names_become_valid_repo_names(name, repo):
    assert repo_name(name) == repo
    assert check_repo_id(f"user/{repo_name(name)}")


@pytest.mark.parametrize("bad", ["noslash", "a/b/c", "a/-b", "a/b--c", "a/b..c", "a/" + "x" * 97, "a b/c"])
def test_bad_repo_ids_are_refused_naming_them(bad):
    from forge_ml.errors import InputError

    with pytest.raises(InputError, match=re.escape(repr(bad))):
        check_repo_id(bad)
