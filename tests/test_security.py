"""Security: what a plan or a generated example may not do, trust_remote_code, the compose MLflow server's auth.

Secrets in the environment never reaching MLflow, Ray's files, Hydra's saved config, logs or the
heartbeat is proved on real runs in test_flywheel.py and test_train_e2e.py.
"""

from __future__ import annotations

import base64
import os
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from conftest import edit_config
from mlflow_server import BIN, free_port, stop, wait_for

from forge_ml.augment.validate import admit
from forge_ml.compose import compose_config
from forge_ml.evaluation.scorers import make_scorer
from forge_ml.planner import validate_plan
from forge_ml.planner.plan import PlanError

pytestmark = pytest.mark.reliability
ROOT = Path(__file__).resolve().parents[1]
PLAN = {
    "hypothesis": "A mid learning rate.",
    "search_space": {"training.learning_rate": "tag(log, interval(2e-3, 8e-3))"},
    "num_samples": 2,
    "fixed_overrides": {},
    "forge_yaml_patches": {},
    "background_additions": "",
    "augment_focus": [],
    "augment_n": 10,
}
HOSTILE_PLANS = [
    ("fixed_overrides", {"model.trust_remote_code": True}),
    ("forge_yaml_patches", {"model.trust_remote_code": True}),
    ("search_space", {"model.trust_remote_code": "choice(true,false)"}),
    ("forge_yaml_patches", {"task.canonical_path": "../../etc/passwd"}),
    ("fixed_overrides", {"task.gold_path": "/etc/shadow"}),
    ("fixed_overrides", {"tune.storage_path": "/tmp/elsewhere"}),
    ("forge_yaml_patches", {"tracking.uri": "http://attacker.example"}),
    ("fixed_overrides", {"model.name_or_path": "someone/unvetted-model"}),
    ("forge_yaml_patches", {"hydra.run.dir": "../../outside"}),
    ("augment_focus", ["../../mlartifacts/escape"]),
    ("augment_focus", ["hover/../../x"]),
]


@pytest.mark.parametrize(("field", "value"), HOSTILE_PLANS, ids=[f"{f}:{v}" for f, v in HOSTILE_PLANS])
def test_a_plan_that_reaches_outside_what_is_plannable_is_rejected(example_project, proof, field, value):
    cfg = compose_config(example_project, [])
    with pytest.raises(PlanError) as info:
        validate_plan({**PLAN, field: value}, cfg)
    named = next(iter(value)) if isinstance(value, dict) else value[0]
    assert named in str(info.value) and info.value.exit_code == 1
    proof(
        "Security",
        f"a plan sets {field} {value}",
        f"refused by the plan check before anything uses it, naming {named!r}; in a flywheel, Claude gets one "
        "repair turn, then the round runs the offline plan (the command still exits 0)",
    )


def test_generated_examples_with_unsafe_categories_are_dropped(example_project, proof):
    cfg = compose_config(example_project, [])
    scorer = make_scorer(cfg.eval, example_project.root)
    answer = '{"cmd": "land", "args": {}}'
    rows = [
        {"user": "land now please", "assistant": answer, "category": "../../mlartifacts/escape"},
        {"user": "come down and land", "assistant": answer, "category": "/etc/passwd"},
        {"user": "set it down here", "assistant": answer, "category": "land\nforge.kind=round"},
        {"user": "touch down", "assistant": answer, "category": "land"},
    ]
    result = admit(rows, scorer=scorer, known=set(), gold=set(), meta={"source": "augment"})
    assert [e.category for e in result.kept] == ["land"]
    assert result.dropped == {"unsafe category name": 3}
    proof(
        "Security",
        "generated examples whose category is a path ('../..', absolute) or holds a newline",
        f"{result.dropped['unsafe category name']} of 3 dropped before anything is written; the safe one kept",
    )


def test_trust_remote_code_is_false_unless_the_users_own_config_sets_it(example_project, proof):
    assert compose_config(example_project, []).model.trust_remote_code is False
    edit_config(example_project, "model", "trust_remote_code", True)
    assert compose_config(example_project, []).model.trust_remote_code is True
    proof(
        "Security",
        "model.trust_remote_code",
        "false by default; true only from the project's own forge.yaml; never from a plan (rows above)",
    )


def _get(url: str, auth: tuple[str, str] | None = None) -> int:
    request = urllib.request.Request(url)
    if auth:
        request.add_header("Authorization", "Basic " + base64.b64encode(":".join(auth).encode()).decode())
    try:
        return urllib.request.urlopen(request, timeout=5).status
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.mark.slow
def test_the_compose_mlflow_server_refuses_default_credentials_and_anonymous_requests(tmp_path, proof):
    entrypoint = ROOT / "docker" / "mlflow-entrypoint.sh"
    base = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",  # the mlflow of this environment, as in the image
        "MLFLOW_BACKEND_STORE_URI": f"sqlite:///{tmp_path / 'mlflow.db'}",
        "MLFLOW_AUTH_DIR": str(tmp_path),
        "MLFLOW_ARTIFACTS_DIR": str(tmp_path / "artifacts"),
        "MLFLOW_HOST": "127.0.0.1",
        "MLFLOW_ADMIN_USER": "forge-admin",
    }
    refused = {}
    for label, password in (("MLflow's default", "password1234"), ("a short one", "hunter2"), ("none", None)):
        env = {**base, "MLFLOW_PORT": str(free_port())}
        env.pop("MLFLOW_ADMIN_PASSWORD", None)
        if password is not None:
            env["MLFLOW_ADMIN_PASSWORD"] = password
        done = subprocess.run(["sh", str(entrypoint)], env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode != 0 and "MLFLOW_ADMIN_PASSWORD" in done.stderr, done.stderr
        refused[label] = done.returncode

    port = free_port()
    password = "SENTINEL-admin-password-0003"
    env = {**base, "MLFLOW_PORT": str(port), "MLFLOW_ADMIN_PASSWORD": password}
    log = (tmp_path / "server.log").open("w")
    server = subprocess.Popen(["sh", str(entrypoint)], env=env, stdout=log, stderr=subprocess.STDOUT)
    uri = f"http://127.0.0.1:{port}"
    api = f"{uri}/api/2.0/mlflow/experiments/search?max_results=1"
    try:
        wait_for(
            lambda: server.poll() is None and _get(api, ("forge-admin", password)) == 200,
            "mlflow auth server",
        )
        codes = {
            "anonymous": _get(api),
            "wrong password": _get(api, ("forge-admin", "not-the-password")),
            "MLflow's default admin": _get(api, ("admin", "password1234")),
            "the admin": _get(api, ("forge-admin", password)),
        }
    finally:
        stop(server)
        log.close()
    assert password not in (tmp_path / "server.log").read_text()  # the server's log never shows it
    assert codes == {"anonymous": 401, "wrong password": 401, "MLflow's default admin": 401, "the admin": 200}
    for private in ("basic_auth.ini", "flask_secret_key"):  # the password, the CSRF key: owner only
        assert (tmp_path / private).stat().st_mode & 0o077 == 0, private
    proof(
        "Security",
        "docker/mlflow-entrypoint.sh (the compose MLflow service) with the default, a short or no admin password",
        "refused to start: " + ", ".join(f"{k} → exit {v}" for k, v in refused.items()),
    )
    proof(
        "Security",
        "the compose MLflow service's basic auth, started from its entrypoint",
        "HTTP "
        + ", ".join(f"{k} {v}" for k, v in codes.items())
        + "; basic_auth.ini and the generated CSRF key readable by their owner only",
    )
