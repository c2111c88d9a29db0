"""A round submitted as a Ray Job to a real two-node Ray cluster with token authentication,
recording to a real `mlflow server` on loopback. The test stops everything it started, and only
that: other tests (pytest-xdist workers) run their own Ray runtimes on the same machine, which
`ray stop` would kill too."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import FAST, run_cli
from mlflow import MlflowClient
from mlflow_server import BIN, free_port, server_up, start_mlflow_server, wait_for
from object_store import s3_server


def processes_marked(marker: bytes) -> list[int]:
    """The pids whose environment holds `marker` (Ray's daemons and workers inherit the env of
    `ray start`)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if marker in (entry / "environ").read_bytes().split(b"\0"):
                pids.append(int(entry.name))
        except OSError:  # gone, or not ours
            continue
    return pids


def with_descendants(pids: list[int]) -> set[int]:
    """`pids` and every process below them. Ray's agents retitle themselves (setproctitle), which
    overwrites the environment /proc shows, so they are found as the raylet's children instead."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):  # gone, or not a process
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(), list(pids)
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, []))
    return found


def alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def stop_marked(marker: bytes, grace_s: float = 5.0) -> None:
    """SIGTERM every process carrying `marker` and those they started, then SIGKILL what is left after
    `grace_s`. The whole family is listed before anything is signalled: a child whose parent dies first
    is re-parented and could no longer be told apart. Ray's GCS server and its monitor outlast a SIGTERM
    by more than 20 s here, so they get a short grace: this is a test cluster's teardown."""
    family = with_descendants(processes_marked(marker))
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        family |= with_descendants(processes_marked(marker))
        for pid in family:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait
        while any(alive(pid) for pid in family) and time.monotonic() < deadline:
            time.sleep(0.2)
    assert not [pid for pid in family if alive(pid)], "processes of the test cluster outlived SIGKILL"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[dict]:
    """An mlflow server (sqlite), an S3 API (the trials' shared storage) and a two-node Ray cluster
    (head + one worker), token-protected."""
    root = tmp_path_factory.mktemp("cluster")
    with s3_server(root) as store:
        yield from _cluster(root, store)


def _cluster(root: Path, store) -> Iterator[dict]:
    mlflow_port, ray_port, dashboard_port = free_port(), free_port(), free_port()
    server_uri = f"http://127.0.0.1:{mlflow_port}"
    marker = f"FORGE_TEST_CLUSTER={secrets.token_hex(8)}"
    env = {
        **os.environ,
        marker.split("=")[0]: marker.split("=")[1],  # how teardown finds what this cluster started
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": secrets.token_hex(16),
        "MLFLOW_TRACKING_URI": server_uri,  # what the job's driver records to
        "RAY_USAGE_STATS_ENABLED": "0",
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",  # forge-ml on the nodes' PATH, as in an image
        **store.env,  # the nodes' credentials for the shared storage, as an instance role gives them
    }
    started: list[subprocess.Popen] = []
    ray = [str(BIN / "ray")]
    worker_tmp = tempfile.mkdtemp(prefix="ray-w-", dir="/tmp")  # short: Ray's socket paths live under it
    try:
        started.append(start_mlflow_server(root, mlflow_port, env))
        subprocess.run(
            [*ray, "start", "--head", "--port", str(ray_port), "--num-cpus", "1", "--num-gpus", "0",
             "--dashboard-host", "127.0.0.1", "--dashboard-port", str(dashboard_port), "--disable-usage-stats"],
            env=env, check=True, capture_output=True, timeout=180,
        )  # fmt: skip
        # The worker node gets a temp dir of its own, as a second machine has: nodes sharing one
        # unpack a job's working dir into the same path, and Ray re-extracts it (rmtree first) when
        # the second node first sets the job up, under the feet of a driver running in it.
        subprocess.run(
            [*ray, "start", "--address", f"127.0.0.1:{ray_port}", "--num-cpus", "1", "--num-gpus", "0",
             "--temp-dir", worker_tmp],
            env=env, check=True, capture_output=True, timeout=180,
        )  # fmt: skip
        wait_for(lambda: server_up(server_uri), "mlflow server")

        def alive_nodes() -> int:
            out = subprocess.run(
                [*ray, "status", "--address", f"127.0.0.1:{ray_port}"], env=env, capture_output=True
            )
            return out.stdout.decode().count(" node_")

        wait_for(lambda: alive_nodes() >= 2, "the second Ray node")
        yield {
            "env": env,
            "dashboard": f"http://127.0.0.1:{dashboard_port}",
            "server": server_uri,
            "root": root,
            "store": store,
        }
    finally:
        stop_marked(marker.encode())
        shutil.rmtree(worker_tmp, ignore_errors=True)
        for process in started:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()


ROUND = [
    "tune",
    *FAST,
    "lora.r=choice(4,8)",
    "training.learning_rate=tag(log, interval(1e-3, 1e-2))",
    "tune.num_samples=2",  # one trial per node, at once
    "tune.max_concurrent_trials=2",
    "tune.address=auto",
    "tune.resources.cpu=1",
    "tune.scheduler=fifo",
    "tracking=server",
]


@pytest.mark.slow
def test_a_local_storage_path_on_two_nodes_is_refused_before_trials_start(cluster, small_project):
    result = run_cli(
        "-p", str(small_project.root), "submit", "--address", cluster["dashboard"], *ROUND,
        f"tune.storage_path={cluster['root'] / 'local-only'}", env=cluster["env"], timeout=600,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr[-3000:]
    assert "is local to this machine but the cluster has 2 nodes" in result.stderr.replace("\n", " ")
    assert not (cluster["root"] / "local-only").exists()


@pytest.mark.slow
def test_a_round_as_a_ray_job_runs_on_both_nodes_and_records_to_the_server(cluster, small_project):
    without_token = {k: v for k, v in cluster["env"].items() if k != "RAY_AUTH_TOKEN"}
    refused = run_cli(
        "-p", str(small_project.root), "submit", "--address", cluster["dashboard"], *ROUND, env=without_token
    )
    said = refused.stderr.replace("\n", " ")
    assert (
        refused.returncode == 1 and "the cluster wants a token" in said and "RAY_AUTH_MODE=token" in said
    ), said

    store = cluster["store"]
    result = run_cli(
        "-p", str(small_project.root), "--json", "submit", "--address", cluster["dashboard"], *ROUND,
        f"tune.storage_path='{store.uri('shared')}'", env=cluster["env"], timeout=900,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-5000:]
    assert '"status": "SUCCEEDED"' in result.stdout

    client = MlflowClient(tracking_uri=cluster["server"])
    experiment = client.get_experiment_by_name("small")
    runs = client.search_runs([experiment.experiment_id], max_results=100)
    rounds = [r for r in runs if r.data.tags.get("forge.kind") == "round"]
    trials = [r for r in runs if r.data.tags.get("forge.kind") == "trial"]
    assert len(rounds) == 1 and rounds[0].info.status == "FINISHED"
    assert len(trials) == 2 and all(t.info.status == "FINISHED" for t in trials)
    assert all(t.data.tags["mlflow.parentRunId"] == rounds[0].info.run_id for t in trials)
    assert len({t.data.tags["forge.node_id"] for t in trials}) == 2  # both nodes trained
    # the tiny base, built on the head, went through the store; so did every checkpoint
    keys = store.keys("shared")
    assert any(k.startswith("bases/tiny-") and k.endswith("/config.json") for k in keys), keys
    recorded = json.loads(
        Path(
            client.download_artifacts(rounds[0].info.run_id, "round/trials.json", str(cluster["root"]))
        ).read_text()
    )
    for trial in recorded:  # named where they are, not downloaded to the driver's temp directory
        assert trial["checkpoint"].startswith("s3://forge/shared/small-tune-001-"), trial["checkpoint"]
        assert trial["checkpoint"].endswith(f"?endpoint_override={store.endpoint}&scheme=http")
    best = rounds[0].data.tags["forge.best_run_id"]
    local = Path(client.download_artifacts(best, "adapter", str(cluster["root"] / "download")))
    assert sorted(p.name for p in local.iterdir() if p.name.startswith("adapter_")) == [
        "adapter_config.json",
        "adapter_model.safetensors",
    ]
    assert not (local / "optimizer.pt").exists()
    assert not (small_project.root / "mlflow.db").exists()  # nothing recorded locally


@pytest.mark.slow
def test_ctrl_c_on_submit_stops_the_job_whose_run_ends_killed(cluster, small_project, tmp_path):
    """Ctrl-C at the submitting terminal stops the job; the job's forge-ml ends its run KILLED, and the
    lines it writes while stopping reach the terminal before submit exits."""
    client = MlflowClient(tracking_uri=cluster["server"])
    started = int(time.time() * 1000)
    log = (tmp_path / "submit.err").open("w")
    submitting = subprocess.Popen(
        [str(BIN / "forge-ml"), "-p", str(small_project.root), "submit", "--address", cluster["dashboard"],
         "train", *FAST, "training.epochs=200", "tracking=server"],
        env={**cluster["env"], "NO_COLOR": "1", "COLUMNS": "200"}, stdout=subprocess.DEVNULL, stderr=log,
    )  # fmt: skip

    def training_run():
        experiment = client.get_experiment_by_name("small")
        if experiment is None:
            return None
        runs = client.search_runs(
            [experiment.experiment_id],
            f"attributes.start_time >= {started} and attributes.status = 'RUNNING'",
        )
        return runs[0] if runs else None

    try:
        wait_for(lambda: training_run() is not None, "the job's training run", timeout=300)
        run_id = training_run().info.run_id
        submitting.send_signal(signal.SIGINT)
        assert submitting.wait(timeout=120) == 130
    finally:
        submitting.kill()
        log.close()
    said = (tmp_path / "submit.err").read_text()
    assert "on the cluster" in said and "stopped by SIGTERM" in said, said[-3000:]  # the job's own last line
    assert client.get_run(run_id).info.status == "KILLED"


@pytest.mark.slow
def test_a_round_stopped_on_the_cluster_ends_its_runs_killed_and_submit_exits_143(
    cluster, small_project, tmp_path
):
    """`ray job stop` while a round's trials run on both nodes: Ray sends the command SIGTERM and waits
    RAY_JOB_STOP_WAIT_TIME_S before SIGKILL, which submit sets to 60 s (Ray's default is 3 s, short of
    what a round may need to end its runs on a remote MLflow server and save its state to S3). The
    round run and its trials end KILLED with the reason, the job's own last line reaches the terminal,
    and submit exits 143, as a stopped command does (it said `STOPPED (exit 2)`, a runtime fault)."""
    client = MlflowClient(tracking_uri=cluster["server"])
    started = int(time.time() * 1000)
    err = tmp_path / "submit.err"
    log = err.open("w")
    submitting = subprocess.Popen(
        [str(BIN / "forge-ml"), "-p", str(small_project.root), "submit", "--address", cluster["dashboard"],
         *ROUND, "training.epochs=200", f"tune.storage_path='{cluster['store'].uri('stopped')}'"],
        env={**cluster["env"], "NO_COLOR": "1", "COLUMNS": "200"}, stdout=subprocess.DEVNULL, stderr=log,
    )  # fmt: skip

    def runs(kind: str) -> list:
        experiment = client.get_experiment_by_name("small")
        if experiment is None:
            return []
        return client.search_runs(
            [experiment.experiment_id],
            f"attributes.start_time >= {started} and tags.`forge.kind` = '{kind}'",
        )

    try:
        wait_for(lambda: len(runs("trial")) == 2, "both trials of the job's round running", timeout=300)
        job_id = err.read_text().split("submitted ", 1)[1].split(" ", 1)[0]
        stop = subprocess.run(
            [str(BIN / "ray"), "job", "stop", "--address", cluster["dashboard"], job_id],
            env=cluster["env"], capture_output=True, text=True, timeout=180, check=False,
        )  # fmt: skip
        assert stop.returncode == 0, stop.stderr[-3000:]
        assert submitting.wait(timeout=180) == 143
    finally:
        submitting.kill()
        log.close()
    said = " ".join(err.read_text().split())
    assert "stopped by SIGTERM" in said, said[-3000:]  # the job's own last line
    assert f"job {job_id}: STOPPED (exit 143)" in said and "was sent SIGTERM" in said, said[-3000:]
    assert job_info(cluster, job_id)["env_vars"]["RAY_JOB_STOP_WAIT_TIME_S"] == "60"
    (round_run,) = runs("round")
    assert round_run.info.status == "KILLED" and round_run.data.tags["forge.error"] == "stopped by SIGTERM"
    assert sorted(t.info.status for t in runs("trial")) == ["KILLED", "KILLED"]


@pytest.mark.slow
def test_the_drivers_own_resources_reach_ray_and_a_job_waiting_for_them_says_so(
    cluster, small_project, tmp_path
):
    """--entrypoint-num-gpus/-cpus place the command's own process: on this CPU-only cluster a driver
    that wants a GPU stays pending (the same `status` job without it runs in seconds), submit says so
    once and Ctrl-C stops it before it starts; a driver that wants one CPU finds it and runs."""
    root = str(small_project.root)
    err = tmp_path / "submit.err"
    log = err.open("w")
    submitting = subprocess.Popen(
        [str(BIN / "forge-ml"), "-p", root, "submit", "--address", cluster["dashboard"],
         "--entrypoint-num-gpus", "1", "--remote-project", root, "status"],
        env={**cluster["env"], "NO_COLOR": "1", "COLUMNS": "200"}, stdout=subprocess.DEVNULL, stderr=log,
    )  # fmt: skip
    try:
        wait_for(lambda: "is pending" in err.read_text(), "submit saying the job is pending", timeout=120)
        time.sleep(3)  # a few more polls: the reason is said once, not at every poll
        submitting.send_signal(signal.SIGINT)
        stopped_at = time.monotonic()
        assert submitting.wait(timeout=120) == 130
        assert time.monotonic() - stopped_at < 20  # no wait for the last lines of a job that never ran
    finally:
        submitting.kill()
        log.close()
    said = err.read_text()
    assert said.count("is pending") == 1 and "waiting for resources" in said, said[-3000:]
    assert "had not started. Ray ends it when a node can take it" in said, said[-3000:]
    job_id = said.split("submitted ", 1)[1].split(" ", 1)[0]

    waited = job_info(cluster, job_id)  # Ray queues the stop for a supervisor that is itself still pending
    assert waited["status"] in ("PENDING", "STOPPED") and waited["driver_exit_code"] is None, waited

    ran = run_cli(
        "-p", root, "--json", "submit", "--address", cluster["dashboard"], "--entrypoint-num-cpus", "1",
        "--remote-project", root, "status", env=cluster["env"], timeout=300,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-3000:]
    envelope = json.loads(ran.stdout)
    assert envelope["status"] == "SUCCEEDED" and "datasets" in ran.stderr  # status ran: its tables came back


def job_info(cluster: dict, job_id: str) -> dict:
    """A job as Ray's Jobs API tells it, asked by a client of the cluster's own (token) environment:
    Ray reads RAY_AUTH_MODE once per process, so not from this one."""
    code = (
        "import json, sys; from ray.job_submission import JobSubmissionClient as C; "
        "i = C(sys.argv[1]).get_job_info(sys.argv[2]); "
        "print(json.dumps({'status': str(i.status), 'driver_exit_code': i.driver_exit_code, "
        "'env_vars': (i.runtime_env or {}).get('env_vars') or {}}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, cluster["dashboard"], job_id],
        env=cluster["env"], capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])
