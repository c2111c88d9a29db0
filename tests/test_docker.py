"""docker/: the compose file and the Dockerfiles hold together (read as files; no Docker needed)."""

from __future__ import annotations

import re
from importlib.metadata import requires
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCKER = ROOT / "docker"


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def compose() -> dict:
    return yaml.safe_load((DOCKER / "compose.yaml").read_text())


def test_every_service_has_an_image_or_a_build_context_that_exists():
    services = compose()["services"]
    assert set(services) == {"postgres", "mlflow", "ray-head", "ray-worker"}
    for name, service in services.items():
        assert service.get("image") or service.get("build"), name
        if "build" in service:
            context = (DOCKER / service["build"]["context"]).resolve()
            assert context == ROOT and (context / service["build"]["dockerfile"]).is_file(), name


def test_ports_are_bound_to_localhost_and_no_password_has_a_default():
    services = compose()["services"]
    for name, service in services.items():
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), (name, port)
    text = (DOCKER / "compose.yaml").read_text()
    for secret in ("POSTGRES_PASSWORD", "MLFLOW_ADMIN_PASSWORD", "RAY_AUTH_TOKEN"):
        uses = re.findall(r"\$\{" + secret + r"([^}]*)\}", text)
        assert uses and all(u.startswith(":?") for u in uses), secret  # required, never defaulted
    entrypoint = (DOCKER / "mlflow-entrypoint.sh").read_text()
    assert "--app-name basic-auth" in entrypoint and "password1234" in entrypoint  # the default is refused
    assert all(
        not line.split("=", 1)[1]
        for line in (DOCKER / "env.example").read_text().splitlines()
        if line.split("=", 1)[0] in ("POSTGRES_PASSWORD", "MLFLOW_ADMIN_PASSWORD", "RAY_AUTH_TOKEN")
    )


def test_gpu_workers_reserve_gpus_and_share_checkpoint_storage():
    worker = compose()["services"]["ray-worker"]
    devices = worker["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["driver"] == "nvidia" and devices[0]["capabilities"] == ["gpu"]
    assert "checkpoints:/data/checkpoints" in worker["volumes"]
    assert worker["environment"]["RAY_AUTH_MODE"] == "token"


def test_the_dockerfile_installs_the_package_this_repository_builds_with_pinned_versions():
    dockerfile = (DOCKER / "Dockerfile").read_text()
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    wheel = tomllib.loads((DOCKER.parent / "pyproject.toml").read_text())["tool"]["hatch"]["build"][
        "targets"
    ]["wheel"]
    sources = ["pyproject.toml", *wheel["packages"], *wheel["force-include"]]  # all the wheel is built from
    assert {"forge_ml", "trainables", "hydra_plugins", "conf", "examples"} <= set(sources)
    for source in sources:
        assert re.search(rf"^COPY {source}\b", dockerfile, re.MULTILINE), source
    assert 'pip install -c /opt/forge/constraints.txt ".[qlora]"' in dockerfile
    pins = dict(
        (canonical(line.split("==")[0]), line.split("==")[1])
        for line in (DOCKER / "constraints.txt").read_text().splitlines()
        if line and not line.startswith("#")
    )
    needed = [
        r for r in requires("forge-ml") if "extra ==" not in r or "qlora" in r
    ]  # as built from pyproject
    assert any("bitsandbytes" in r for r in needed)
    for requirement in needed:
        name = canonical(re.split(r"[\[<>=; ]", requirement)[0])
        assert name in pins, f"{name} is not pinned in docker/constraints.txt"
    dockerignore = (ROOT / ".dockerignore").read_text().splitlines()
    assert {".venv", ".git", "docker/.env", "docker/projects"} <= set(dockerignore)


def test_the_head_runs_the_drivers_where_they_see_a_gpu_but_ray_places_no_trial_there():
    """A job's forge-ml command runs on the head: a flywheel's gold evaluation and `train` compute there
    (with lora=qlora they need CUDA). The head sees a GPU; Ray is told it has none, so trials go to the
    workers. Jobs run in the project itself, mounted on every node at the path the README submits."""
    services = compose()["services"]
    head, worker = services["ray-head"], services["ray-worker"]
    devices = head["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["driver"] == "nvidia" and devices[0]["capabilities"] == ["gpu"]
    assert "--num-gpus 0" in head["command"] and "--num-gpus" not in worker["command"]
    mount = "${FORGE_PROJECTS_DIR:-./projects}:/data/projects"
    assert mount in head["volumes"] and mount in worker["volumes"]
    readme = (DOCKER / "README.md").read_text()
    assert "--remote-project /data/projects/my-router" in readme and "--dir docker/projects" in readme
    assert "working-dir" not in readme  # a flywheel in an uploaded copy loses what it writes
    env = dict(
        line.split("=", 1) for line in (DOCKER / "env.example").read_text().splitlines() if "=" in line
    )
    assert {"HEAD_GPUS", "FORGE_PROJECTS_DIR"} <= set(env)
