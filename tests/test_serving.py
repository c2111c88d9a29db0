"""The champion deploys the MLflow way: `mlflow models serve` answers every payload form, and a version loads in
an environment that has only its own logged requirements (forge-ml absent)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import FAST, run_cli, shrink_jsonl

from forge_ml.models.pyfunc import PROMPT_COLUMN
from forge_ml.project import init_project

pytestmark = pytest.mark.slow
PROMPTS = ["take off to 30 m", "land now"]


@pytest.fixture(scope="module")
def champion(tmp_path_factory) -> Iterator[dict]:
    """A project whose one offline flywheel round promoted a champion; its model URI and local copy."""
    import mlflow

    project = init_project(tmp_path_factory.mktemp("serve") / "router", example="drone-router")
    shrink_jsonl(project.root / "dataset" / "canonical.jsonl", 120)
    shrink_jsonl(project.root / "dataset" / "gold.jsonl", 9)
    # its 9 gold answers run to 25 tiny-model tokens: room for them all, or the flywheel refuses
    args = [*FAST, "eval.max_new_tokens=32", "planner=offline", "planner.augment_n=0", "tune.num_samples=1"]
    args.append("training.epochs=1")
    result = run_cli("-p", str(project.root), "flywheel", "--rounds", "1", *args)
    assert result.returncode == 0, result.stderr[-3000:]
    uri = f"sqlite:///{project.root / 'mlflow.db'}"
    # mlflow.set_*_uri also export MLFLOW_*_URI: put both back after this module, or every later
    # MlflowClient (and forge-ml subprocess) of the session would read this project's registry
    saved = {name: os.environ.get(name) for name in ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI")}
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    try:
        model_uri = f"models:/{project.root.name}@champion"
        local = Path(
            mlflow.artifacts.download_artifacts(model_uri, dst_path=str(tmp_path_factory.mktemp("model")))
        )
        expected = mlflow.pyfunc.load_model(model_uri).predict(PROMPTS)
        yield {
            "tracking_uri": uri,
            "model_uri": model_uri,
            "local": local,
            "expected": expected,
            "printed": result.stdout + result.stderr,
        }
    finally:
        mlflow.set_tracking_uri(None)
        mlflow.set_registry_uri(None)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _post(port: int, payload: dict) -> dict:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/invocations",
        data=json.dumps(payload).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.loads(response.read())


# What the libraries print on their own at INFO, or warn about where forge-ml already chose
LIBRARY_CHATTER = (
    "Token authentication is enabled for this Ray cluster",  # Ray: every new local runtime
    "A new study created in memory",  # Optuna: every round's searcher
    "Validating input example against model signature",  # MLflow: every registered version
)


def test_a_round_prints_forge_mls_own_lines_not_the_libraries_chatter(champion):
    said = champion["printed"].replace("\n", " ")
    assert "round-001: best trial" in said and "promoted to champion" in said
    assert [line for line in LIBRARY_CHATTER if line in said] == []


def test_the_champion_carries_a_signature_an_example_and_its_code(champion):
    from mlflow.models import Model

    model = Model.load(str(champion["local"]))
    assert [c.type.name for c in model.signature.inputs.inputs] == ["string"]  # one string column
    assert [c.type.name for c in model.signature.outputs.inputs] == ["string"]
    assert model.saved_input_example_info is not None
    shipped = {p.name for p in (champion["local"] / "code" / "forge_adapter_model").iterdir()}
    assert {"pyfunc.py", "generation.py"} <= shipped
    requirements = (champion["local"] / "requirements.txt").read_text().split()
    assert not any(r.startswith("forge") for r in requirements), requirements
    packed = [d for d in (champion["local"] / "artifacts").iterdir() if (d / "config.json").is_file()]
    assert len(packed) == 1  # the local base travels with the adapter


def test_mlflow_models_serve_answers_every_payload_form(champion):
    port = _free_port()
    mlflow_cli = Path(sys.executable).with_name("mlflow")
    path = f"{mlflow_cli.parent}{os.pathsep}{os.environ.get('PATH', '')}"  # the server execs uvicorn from it
    env = {**os.environ, "MLFLOW_TRACKING_URI": champion["tracking_uri"], "PATH": path}
    command = ["models", "serve", "-m", champion["model_uri"], "--env-manager", "local"]
    server = subprocess.Popen(
        [str(mlflow_cli), *command, "-h", "127.0.0.1", "-p", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=2).close()
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                assert server.poll() is None, server.stderr.read()[-3000:]
                assert time.monotonic() < deadline, "mlflow models serve did not come up in 180 s"
                time.sleep(1)
        payloads = {
            "inputs": {"inputs": PROMPTS},
            "instances": {"instances": PROMPTS},
            "dataframe_split": {
                "dataframe_split": {"columns": [PROMPT_COLUMN], "data": [[p] for p in PROMPTS]}
            },
            "dataframe_records": {"dataframe_records": [{PROMPT_COLUMN: p} for p in PROMPTS]},
        }
        for form, payload in payloads.items():
            assert _post(port, payload)["predictions"] == champion["expected"], form
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_the_input_example_is_answered(champion):
    import mlflow
    from mlflow.models import Model

    example = Model.load(str(champion["local"])).load_input_example(str(champion["local"]))
    assert mlflow.pyfunc.load_model(str(champion["local"])).predict(example) == champion["expected"][:1]
    assert json.loads((champion["local"] / "serving_input_example.json").read_text()) == {
        "inputs": PROMPTS[:1]
    }


def test_a_version_loads_with_only_its_own_requirements(champion, tmp_path):
    """A fresh environment whose packages are the model's requirements (reused from this one), without forge-ml."""
    import importlib.metadata as metadata

    requirements = (champion["local"] / "requirements.txt").read_text().split()
    for line in requirements:  # every pin is what this environment has, so reusing it builds that environment
        name, _, pinned = line.partition("==")
        assert pinned and metadata.version(name).split("+")[0] == pinned, line
    env = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True, timeout=120)
    site = next(env.glob("lib/python*/site-packages"))
    # the libraries as a plain path entry: .pth files in it (forge-ml's editable install) are not run
    (site / "reuse.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    script = (
        "import json, sys\n"
        "try:\n    import forge_ml.models.pyfunc\nexcept ImportError:\n    pass\nelse:\n    sys.exit('forge_ml is importable')\n"
        "import mlflow.pyfunc\n"
        f"model = mlflow.pyfunc.load_model({str(champion['local'])!r})\n"
        f"print(json.dumps(model.predict({PROMPTS!r})))\n"
    )
    result = subprocess.run(
        [str(env / "bin" / "python"), "-c", script],
        cwd=tmp_path,
        env={"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == champion["expected"]
