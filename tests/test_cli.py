"""The `forge-ml` console script: init, bad input (exit 1, clear message), help."""

from __future__ import annotations

import json
import subprocess
import time

import pytest
from conftest import run_cli, write_jsonl


def test_init_scaffolds_a_project_that_composes(tmp_path):
    result = run_cli("init", "my-task", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    root = tmp_path / "my-task"
    for rel in (
        "forge.yaml",
        "BACKGROUND.md",
        "mission.md",
        "system_prompt.md",
        "dataset/seed.jsonl",
        "dataset/gold.jsonl",
        "dataset/canonical.jsonl",
    ):
        assert (root / rel).exists(), rel
    assert "name: my-task" in (root / "forge.yaml").read_text()
    said = result.stderr.replace("\n", " ")
    for rel in ("mission.md", "system_prompt.md", "dataset/seed.jsonl", "dataset/gold.jsonl"):
        assert rel in said, rel  # a blank project says what to write before the first round
    assert f"cd {root} && forge-ml flywheel" in said
    assert run_cli("status", cwd=root).returncode == 0


def test_a_path_with_a_space_is_printed_as_a_shell_reads_it_and_registry_commands_say_how_to_register(
    tmp_path,
):
    result = run_cli("init", "my task", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    root = tmp_path / "my task"
    (line,) = [x for x in result.stderr.splitlines() if "&& forge-ml flywheel" in x]
    cd = line[line.index("cd ") : line.index(" && forge-ml flywheel")]
    shell = subprocess.run(["bash", "-c", f"{cd} && pwd"], capture_output=True, text=True, check=False)
    assert shell.returncode == 0 and shell.stdout.strip() == str(root), shell.stderr
    write_jsonl(root / "dataset" / "gold.jsonl", [{"prompt": "a review", "completion": "positive"}])
    for command in (["promote"], ["merge"], ["eval", "model=models:/my task@champion"]):
        result = run_cli(*command, cwd=root)
        assert result.returncode == 1, result.stderr
        said = " ".join(result.stderr.split())
        assert "has no alias @" in said and "nothing is registered yet" in said, said
        assert "forge-ml train --register" in said, said


def test_init_example_renames_and_keeps_comments(tmp_path):
    result = run_cli("-p", str(tmp_path), "init", "router", "--example", "drone-router")
    assert result.returncode == 0, result.stderr
    text = (tmp_path / "router" / "forge.yaml").read_text()
    assert "name: router" in text and "# compare the" in text
    assert "system_prompt.md" not in result.stderr  # an example is ready to run
    assert (tmp_path / "router" / "generator.py").is_file()


def test_init_refuses_a_non_empty_directory_and_unknown_examples(tmp_path):
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "file").write_text("keep me")
    result = run_cli("init", "taken", cwd=tmp_path)
    assert result.returncode == 1 and "not empty" in result.stderr
    assert (tmp_path / "taken" / "file").read_text() == "keep me"
    result = run_cli("init", "other", "--example", "nope", cwd=tmp_path)
    assert result.returncode == 1 and "unknown example" in result.stderr
    assert not (tmp_path / "other").exists()


def test_commands_outside_a_project_say_how_to_start(tmp_path):
    result = run_cli("train", cwd=tmp_path)
    assert result.returncode == 1
    assert "forge-ml init" in result.stderr


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        ("lora.rank=8", "lora.rank"),
        ("lora.r=-1", "lora.r: -1 is out of range"),
        ("training.learning_rate=10", "training.learning_rate: 10.0 is out of range"),
    ],
)
def test_bad_override_exits_1_naming_the_key(small_project, override, fragment):
    result = run_cli("train", override, cwd=small_project.root)
    assert result.returncode == 1, result.stderr
    assert fragment in result.stderr
    assert not (small_project.root / "mlflow.db").exists()  # refused before anything ran


@pytest.mark.parametrize(
    ("job", "warned"),
    [
        (["flywheel"], True),
        (["flywheel", "tune=cluster"], False),
        (["flywheel", "tune.address=auto"], False),
        (["flywheel", "--skip-train"], False),  # plans and adds data: no round of trials
        (["tune", "lora.r=choice(4,8)"], True),
        (["train", "-m", "hydra/sweeper=tune", "lora.r=choice(4,8)"], True),
        (["train"], False),
        (["status"], False),
    ],
)
def test_submit_says_when_a_jobs_rounds_would_not_use_the_cluster(small_project, job, warned):
    """tune=local in a job: each round starts a runtime of its own on the driver's node and the cluster's
    other nodes train nothing. Said before the job is sent (here to an address where nothing listens)."""
    from mlflow_server import free_port

    dead = f"http://127.0.0.1:{free_port()}"
    root = str(small_project.root)
    result = run_cli("submit", "--address", dead, "--remote-project", root, *job, cwd=small_project.root)
    said = " ".join(result.stderr.split())
    assert result.returncode == 2 and "cannot submit" in said, said
    assert ("no other node of the cluster will train; add tune=cluster" in said) == warned, said


@pytest.mark.parametrize(
    ("options", "job", "refusal"),
    [
        ([], ["train"], "uploaded copy"),  # the project's sqlite store, in a copy Ray deletes
        (
            [],
            ["train", "tracking.uri=sqlite:////shared/mlflow.db"],
            "uploaded copy",
        ),  # its artifacts: in the copy
        ([], ["train", "tracking=server"], None),
        ([], ["train", "tracking.uri=https://mlflow.example.org"], None),
        (["--remote-project", "/shared/router"], ["train"], None),  # the project itself, where the job writes
        (
            ["--remote-project", "shared/router"],
            ["train"],
            "give the project's absolute path",
        ),  # read from Ray's tmp
        # commands whose work is the project's files: a server keeps none of it
        ([], ["flywheel", "tracking=server"], "`forge-ml flywheel` changes the project itself"),
        ([], ["generate", "--n", "5", "tracking=server"], "`forge-ml generate` changes the project itself"),
        ([], ["audit", "--fix", "tracking=server"], "`forge-ml audit` changes the project itself"),
        ([], ["audit", "tracking=server"], None),  # a review without --fix reads only
        ([], ["generate", "--dry-run", "tracking=server"], None),
        (["--remote-project", "/shared/router"], ["flywheel"], None),
    ],
)
def test_submit_refuses_a_job_whose_results_would_be_lost(small_project, options, job, refusal):
    from mlflow_server import free_port

    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens: a job that is let through fails to connect
    result = run_cli("submit", "--address", dead, *options, *job, cwd=small_project.root)
    said = result.stderr.replace("\n", " ")
    if refusal is None:
        assert result.returncode == 2 and f"Ray Jobs at {dead}: cannot submit" in said, said
    else:
        assert result.returncode == 1 and refusal in said, said
        assert "cannot submit" not in said  # refused before the cluster is asked
        assert "--remote-project PATH" in said or "absolute path" in said
    if refusal == "uploaded copy":
        assert "tracking=server" in said
    assert not (small_project.root / "mlflow.db").exists()


def test_a_qlora_flywheel_where_the_gold_eval_has_no_gpu_stops_before_the_first_round(small_project):
    """Ray may run a round's trials on GPU workers, but the gate's gold evaluation loads the 4-bit base
    in the flywheel's own process: without CUDA there it would fail after the trials, so it refuses first."""
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the flywheel would start")
    root = small_project.root
    canonical = (root / "dataset" / "canonical.jsonl").read_bytes()
    started = time.monotonic()
    result = run_cli("flywheel", "model=smollm2-135m-instruct", "lora=qlora", cwd=root)
    said = result.stderr.replace("\n", " ")
    assert result.returncode == 1, said
    assert "lora.method=qlora needs a CUDA GPU" in said and "--entrypoint-num-gpus 1" in said
    assert time.monotonic() - started < 60  # before any data, model or trial
    assert (root / "dataset" / "canonical.jsonl").read_bytes() == canonical
    assert not (root / "output" / "experiments.jsonl").exists()
    assert not (root / "output" / "flywheel_heartbeat.json").exists()
    assert not (root / "output" / "flywheel_state.json").exists()
    assert result.stdout == "" and "ray" not in [p.name for p in (root / "output").iterdir()]
    skip = run_cli(  # a --skip-train flywheel loads no model: it runs
        "flywheel", "--skip-train", "--rounds", "1", "planner=offline", "planner.augment_n=2",
        "model=smollm2-135m-instruct", "lora=qlora", cwd=root,
    )  # fmt: skip
    assert skip.returncode == 0, skip.stderr[-3000:]


@pytest.mark.parametrize(
    ("args", "ray_address", "said"),
    [
        (["--address", "10.0.0.1:6379"], None, "--address: '10.0.0.1:6379' is a Ray head's GCS address"),
        ([], "127.0.0.1:6379", "RAY_ADDRESS: '127.0.0.1:6379' is a Ray head's GCS address"),
        (
            ["status", "tune.address=ray://head:10001"],
            None,
            "tune.address: 'ray://head:10001' is not a dashboard",
        ),
        (["--address", "{dead}"], "127.0.0.1:6379", "Ray Jobs at {dead}: cannot submit"),  # --address wins
    ],
)
def test_submit_names_where_a_wrong_cluster_address_came_from(small_project, args, ray_address, said):
    from mlflow_server import free_port

    dead = f"http://127.0.0.1:{free_port()}"
    args = [a.replace("{dead}", dead) for a in args]
    options, job = (args, ["status"]) if not args or args[0] == "--address" else ([], args)
    env = {"RAY_ADDRESS": ray_address} if ray_address else {}
    result = run_cli(
        "submit", *options, "--remote-project", "/shared/router", *job, cwd=small_project.root, env=env
    )
    expected = said.replace("{dead}", dead)
    assert expected in result.stderr.replace("\n", " "), result.stderr
    assert result.returncode == (2 if "cannot submit" in expected else 1)


def test_multirun_with_one_bad_value_is_refused_up_front(small_project):
    result = run_cli("train", "-m", "lora.r=4,0", cwd=small_project.root)
    assert result.returncode == 1 and "lora.r: 0 is out of range" in result.stderr
    assert not (small_project.root / "output" / "multirun").exists()


def test_malformed_jsonl_line_names_file_and_line(small_project):
    canonical = small_project.root / "dataset" / "canonical.jsonl"
    lines = canonical.read_text().splitlines()
    lines[6] = '{"messages": [ oops'
    canonical.write_text("\n".join(lines) + "\n")
    result = run_cli("train", cwd=small_project.root)
    assert result.returncode == 1
    assert f"{canonical}:7: not valid JSON" in result.stderr.replace("\n", "")


def test_gold_overlap_exits_1_with_count_and_offender(small_project):
    gold = json.loads((small_project.root / "dataset" / "gold.jsonl").read_text().splitlines()[3])
    canonical = small_project.root / "dataset" / "canonical.jsonl"
    with canonical.open("a") as fh:
        fh.write(json.dumps(gold) + "\n")
    offender = len(canonical.read_text().splitlines())  # the appended line
    result = run_cli("train", cwd=small_project.root)
    assert result.returncode == 1
    err = result.stderr.replace("\n", "")
    assert "1 training example(s) match gold inputs" in err
    assert f"canonical.jsonl:{offender}" in err


def test_missing_local_model_path_exits_1_without_a_hub_lookup(small_project):
    result = run_cli(
        "train", "model.name_or_path=./weights/my-model", cwd=small_project.root, env={"HF_HUB_OFFLINE": "0"}
    )
    assert result.returncode == 1
    assert "weights/my-model" in result.stderr and "not found" in result.stderr


@pytest.mark.parametrize(
    ("env", "code", "fragment"),
    [
        (
            {"HF_HUB_OFFLINE": "1"},
            1,
            "no snapshot of the Hub repo 'output/pretrain_merged' in the HF cache while HF_HUB_OFFLINE",
        ),
        (
            {"HF_HUB_OFFLINE": "0", "HF_ENDPOINT": "http://127.0.0.1:9"},
            2,
            "the Hub (http://127.0.0.1:9) does not answer",
        ),
    ],
)
def test_a_missing_project_path_shaped_like_a_hub_id_names_both_readings(
    small_project, tmp_path, env, code, fragment
):
    started = time.monotonic()
    result = run_cli(
        "--json", "train", "model.name_or_path=output/pretrain_merged",  # what `pretrain` tells the user to use
        cwd=small_project.root, env={**env, "HF_HOME": str(tmp_path / "hf")},
    )  # fmt: skip
    message = json.loads(result.stdout)["error"]["message"]
    assert result.returncode == code, result.stderr[-2000:]
    assert (
        f"no directory {small_project.root / 'output' / 'pretrain_merged'}, and " in message
        and fragment in message
    )
    assert time.monotonic() - started < 30  # decided before the Hub client's retries


def test_empty_training_set_is_an_input_error(small_project):
    write_jsonl(small_project.root / "dataset" / "canonical.jsonl", [])
    write_jsonl(small_project.root / "dataset" / "seed.jsonl", [])
    result = run_cli("train", cwd=small_project.root)
    assert result.returncode == 1 and "no training examples" in result.stderr


def test_eval_before_training_explains_what_to_do(small_project):
    result = run_cli("eval", cwd=small_project.root)
    assert result.returncode == 1 and "nothing trained yet" in result.stderr


@pytest.mark.parametrize(
    "args",
    [("--cfg", "job", "lora.r=16"), ("lora.r=16", "--cfg", "job"), ("lora.r=16", "--cfg=job")],
    ids=["flag-first", "flag-last", "flag-with-equals"],
)
def test_hydra_cfg_flag_prints_the_composed_job_config(small_project, args):
    result = run_cli("train", *args, cwd=small_project.root)
    assert result.returncode == 0, result.stderr
    assert "r: 16" in result.stdout and "name: small" in result.stdout
