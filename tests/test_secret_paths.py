"""Each secret flows through the code path it guards, and is written nowhere.

- The HF token authenticates the download of a Hub base from a loopback stand-in of the Hub
  (`huggingface_hub` and transformers' real download code, HF_ENDPOINT pointed at it); the
  registered version and the merged model name the commit the base resolved to.
- The MLflow password authenticates every request of a Ray Tune round to a real `mlflow server`
  with basic auth.
- The Anthropic key goes out in requests that the loopback Messages API fails, so the errors are
  logged and the flywheel falls back to the offline planner.

Then every file the run wrote (project, MLflow store, Ray results and session logs) and what the
CLI printed with -v are searched for the secret.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import FAST, run_cli
from fake_anthropic import FakeAnthropic, error_reply
from flywheel_checks import client_for, ray_session_logs, runs_of, secret_hits
from hub_stand_in import HubStandIn
from mlflow_server import BIN, free_port, server_up, stop, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.reliability]

HF_SENTINEL = "hf_SENTINELdownload000000000000001"
PASSWORD_SENTINEL = "SENTINELbasicauthpassword0009"
ANTHROPIC_SENTINEL = "sk-ant-api03-SENTINELfailing000000001"
REPO = "forge-test/tiny-base"
ENTRYPOINT = Path(__file__).resolve().parents[1] / "docker" / "mlflow-entrypoint.sh"
# One trial of one epoch: the secrets' paths are the point, not the training.
ROUND = [*FAST, "tune.num_samples=1", "planner.augment_n=10", "planner.min_samples=1", "training.epochs=1"]
ROUND_SPACE = [*FAST, "training.epochs=1", "lora.r=choice(4)", "tune.num_samples=1", "tune.scheduler=fifo"]


@pytest.fixture(scope="module")
def hub(tmp_path_factory) -> Iterator[tuple[HubStandIn, str]]:
    """The stand-in Hub holding a tiny random model as `forge-test/tiny-base`; yields (hub, commit)."""
    from forge_ml.compose import compose_config
    from forge_ml.data.project_data import load_project_data
    from forge_ml.models.loader import resolve_base
    from forge_ml.project import init_project

    project = init_project(tmp_path_factory.mktemp("hub-source") / "src", example="drone-router")
    cfg = compose_config(project, FAST)
    base = Path(resolve_base(cfg, project, load_project_data(project, cfg.task).training_text()).source)
    files = {p.relative_to(base).as_posix(): p.read_bytes() for p in base.rglob("*") if p.is_file()}
    with HubStandIn(HF_SENTINEL) as stand_in:
        commit = stand_in.seed_files(REPO, files, private=True)
        yield stand_in, commit


def scan(root: Path, texts: list[str], secret: str, extra: list[Path] = ()) -> tuple[int, float]:
    """Assert `secret` is nowhere under the project, Ray's session logs, `extra` and `texts`."""
    logged = (
        json.dumps([[r.data.params, r.data.tags] for r in runs_of(root)])
        if (root / "mlflow.db").exists()
        else ""
    )
    folders = [root, *extra, *filter(None, [ray_session_logs()])]
    hits, files, size = secret_hits([secret], folders, [*texts, logged])
    assert hits == [], hits
    return files, size / 1e6


def test_the_hf_token_fetches_the_base_and_versions_name_the_commit_it_resolved_to(
    small_project, hub, tmp_path, proof
):
    stand_in, commit = hub
    root = small_project.root
    env = {
        "HF_ENDPOINT": stand_in.base_url,
        "HF_HOME": str(tmp_path / "hf"),
        "HF_HUB_OFFLINE": "0",
        "HF_TOKEN": HF_SENTINEL,
    }
    result = run_cli(
        "-v", "-p", str(root), "flywheel", "--rounds", "1", "planner=offline", f"model.name_or_path={REPO}",
        *ROUND, env=env,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    downloads = [r for r in stand_in.requests if "/resolve/" in r.path and r.method == "GET"]
    assert downloads and all(r.headers["authorization"] == f"Bearer {HF_SENTINEL}" for r in downloads)
    assert {r.path.rsplit("/", 1)[-1] for r in downloads} >= {
        "config.json",
        "model.safetensors",
        "tokenizer.json",
    }

    client, _ = client_for(root)
    (version,) = client.search_model_versions(f"name='{small_project.root.name}'")
    assert version.tags["forge.base.kind"] == "hub" and version.tags["forge.base.name"] == REPO
    assert version.tags["forge.base.revision"] == commit  # the commit, not the configured null
    (round_run,) = runs_of(root, "round")
    assert round_run.data.tags["forge.base.revision"] == commit

    merged = tmp_path / "merged"
    merge = run_cli("-v", "-p", str(root), "merge", "--out", str(merged), env=env)
    assert merge.returncode == 0, merge.stderr[-4000:]
    record = json.loads((merged / "forge_merge.json").read_text())
    assert record["base"]["source"] == REPO and record["base"]["revision"] == commit
    assert record["base"]["provenance"] == {"kind": "hub", "name": REPO, "revision": commit}

    files, mb = scan(root, [result.stdout, result.stderr, merge.stdout, merge.stderr], HF_SENTINEL, [merged])
    proof(
        "Security",
        "sentinel HF token authenticating the download of a Hub base (loopback Hub), a flywheel round and a merge",
        f"{len(downloads)} downloads sent it; 0 hits in {files} files ({mb:.1f} MB) and the CLI's output (-v); "
        f"version and forge_merge.json name commit {commit[:8]}",
    )


# ---- MLflow basic auth ---------------------------------------------------------------------------------


@pytest.fixture
def auth_server(tmp_path) -> Iterator[str]:
    """The compose MLflow service (docker/mlflow-entrypoint.sh: basic auth, sqlite) with its admin
    `forge-admin` / PASSWORD_SENTINEL; its store in tmp_path/store."""
    store = tmp_path / "store"
    store.mkdir()
    port = free_port()
    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
        "MLFLOW_BACKEND_STORE_URI": f"sqlite:///{store / 'mlflow.db'}",
        "MLFLOW_AUTH_DIR": str(tmp_path / "auth"),  # the server's own config (it holds the password)
        "MLFLOW_ARTIFACTS_DIR": str(store / "artifacts"),
        "MLFLOW_HOST": "127.0.0.1",
        "MLFLOW_PORT": str(port),
        "MLFLOW_ADMIN_USER": "forge-admin",
        "MLFLOW_ADMIN_PASSWORD": PASSWORD_SENTINEL,
    }
    (tmp_path / "auth").mkdir()
    log = (tmp_path / "server.log").open("w")
    server = subprocess.Popen(["sh", str(ENTRYPOINT)], env=env, stdout=log, stderr=subprocess.STDOUT)
    uri = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: server.poll() is None and server_up(uri), "mlflow server with basic auth")
        yield uri
    finally:
        stop(server)
        log.close()


def test_the_mlflow_password_authenticates_a_round_and_is_written_nowhere(
    small_project, auth_server, tmp_path, proof
):
    root = small_project.root
    anonymous = run_cli(
        "-p", str(root), "tune", "tracking=server", *ROUND_SPACE, env={"MLFLOW_TRACKING_URI": auth_server}
    )
    assert anonymous.returncode != 0  # the server wants its password

    env = {
        "MLFLOW_TRACKING_URI": auth_server,
        "MLFLOW_TRACKING_USERNAME": "forge-admin",
        "MLFLOW_TRACKING_PASSWORD": PASSWORD_SENTINEL,
    }
    result = run_cli("-v", "-p", str(root), "tune", "tracking=server", *ROUND_SPACE, env=env)
    assert result.returncode == 0, result.stderr[-4000:]
    os.environ.update(env)  # this process reads the server as forge-ml did
    try:
        from mlflow import MlflowClient

        client = MlflowClient(tracking_uri=auth_server)
        experiment = client.get_experiment_by_name(root.name)
        runs = client.search_runs([experiment.experiment_id], max_results=50)
        logged = json.dumps([[r.data.params, r.data.tags] for r in runs])
    finally:
        for key in env:
            os.environ.pop(key, None)
    kinds = sorted(r.data.tags.get("forge.kind", "") for r in runs)
    assert kinds == ["round", "trial"] and all(r.info.status == "FINISHED" for r in runs)

    store = tmp_path / "store"
    files, mb = scan(root, [result.stdout, result.stderr, logged], PASSWORD_SENTINEL, [store])
    assert not (root / "mlflow.db").exists()  # nothing fell back to a local store
    proof(
        "Security",
        "sentinel MLflow basic-auth password authenticating a Ray Tune round to the compose MLflow service",
        f"anonymous: exit {anonymous.returncode}; with it: {len(runs)} runs recorded; 0 hits in {files} files "
        f"({mb:.1f} MB: the server's store and artifacts, the project, Ray's results and session logs) "
        "and the CLI's output (-v)",
    )


# ---- the Anthropic key in failing requests ------------------------------------------------------------


def test_the_anthropic_key_in_failing_requests_is_written_nowhere(small_project, proof):
    root = small_project.root
    with FakeAnthropic() as fake:
        # Every request fails, with the key echoed in the error's message (the worst an API can do):
        # the planner falls back to the offline plan and logs why; augmentation is skipped.
        failing = error_reply(500, "api_error", f"internal error serving key {ANTHROPIC_SENTINEL}")
        for tool in ("propose_experiment", "write_examples", "review_examples"):
            fake.on_tool(tool, lambda body: failing)
        env = {
            "ANTHROPIC_API_KEY": ANTHROPIC_SENTINEL,
            "ANTHROPIC_BASE_URL": fake.base_url,
            "ANTHROPIC_LOG": "debug",  # the SDK's own request logging, on
        }
        # --skip-train: planning (and its fallback) and augmentation are what send the key
        result = run_cli(
            "-v", "-p", str(root), "flywheel", "--rounds", "1", "--skip-train", "planner=claude", *ROUND, env=env
        )  # fmt: skip
        sent = [r for r in fake.requests if ANTHROPIC_SENTINEL in json.dumps(r.headers)]
    assert result.returncode == 0, result.stderr[-4000:]
    assert sent and len(sent) == len(fake.requests)
    (round_run,) = runs_of(root, "round")
    assert round_run.data.tags["forge.planner.fallback"] == "true"
    files, mb = scan(root, [result.stdout, result.stderr], ANTHROPIC_SENTINEL)
    proof(
        "Security",
        "sentinel Anthropic key sent in requests the Messages API fails with 500 (SDK debug logging on, -v)",
        f"{len(sent)} requests carried it, the flywheel fell back to the offline plan; 0 hits in {files} files "
        f"({mb:.1f} MB) and the CLI's output",
    )
