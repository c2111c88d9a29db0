"""Shared by the data-command tests (test_data_commands, test_data_claude): the project they start
from, the CLI with --json, the fake Claude writer, and MLflow lookups."""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from pathlib import Path

from conftest import run_cli, shrink_jsonl, write_jsonl
from fake_anthropic import DEFAULT_USAGE, FakeAnthropic
from mlflow import MlflowClient

from forge_ml.data.examples import read_examples

COMMON = ["command", "success", "exit_code", "run_id", "config_hash"]
DATA_KEYS = [
    "writer",
    "requested",
    "added",
    "dropped",
    "mended",
    "by_category",
    "focus",
    "output",
    "dataset_size",
    "dataset_hash",
    "requests",
    "input_tokens",
    "output_tokens",
    "cost_usd",
    "batch_id",
    "dry_run",
]
KEYS = {
    "generate": DATA_KEYS,
    "patch": DATA_KEYS,
    "augment": DATA_KEYS,
    "clean": ["removed", "kept", "path"],
    "promote": ["model", "version", "decision", "reasons", "p_value", "compared_to", "champion"],
}
KEY = "sk-ant-test-datacommands0000000001"
OFFLINE = {"ANTHROPIC_API_KEY": ""}
START = 40  # canonical examples the tests start from
# What one fake request costs at the default prices ($/Mtok: input 3, output 15, cache read 0.30).
REQUEST_COST = (
    DEFAULT_USAGE["input_tokens"] * 3.0
    + DEFAULT_USAGE["output_tokens"] * 15.0
    + DEFAULT_USAGE["cache_read_input_tokens"] * 0.30
) / 1e6


def start_project(example_project):
    """drone-router with START canonical examples."""
    shrink_jsonl(example_project.root / "dataset" / "canonical.jsonl", START)
    return example_project


def canonical(project) -> Path:
    return project.root / "dataset" / "canonical.jsonl"


def cli(project, *args: str, env: dict | None = None):
    """Run a command with --json; return (CompletedProcess, envelope)."""
    result = run_cli("-p", str(project.root), "--json", *args, env=env)
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1, result.stdout + result.stderr
    envelope = json.loads(lines[0])
    assert list(envelope) == [*COMMON, *KEYS[args[0]], "error"]
    return result, envelope


def claude_env(fake: FakeAnthropic) -> dict:
    return {"ANTHROPIC_API_KEY": KEY, "ANTHROPIC_BASE_URL": fake.base_url}


class Writer:
    """A `write_examples` handler: as many new ascend examples as each request asks for.

    `extra` rows go into the first answer; `delay_s` holds each answer so `most_in_flight` shows
    how many requests the client had open at once.
    """

    def __init__(self, extra: list[dict] | None = None, delay_s: float = 0.0) -> None:
        self.extra = extra or []
        self.delay_s = delay_s
        self.count = self.in_flight = self.most_in_flight = 0
        self.lock = threading.Lock()

    def __call__(self, body: dict) -> dict:
        size = int(re.search(r"Write (\d+) new examples", body["messages"][0]["content"])[1])
        with self.lock:
            start, self.count = self.count, self.count + size
            extra, self.extra = self.extra, []
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        time.sleep(self.delay_s)
        with self.lock:
            self.in_flight -= 1
        rows = [
            {
                "user": f"climb {n} metres for survey leg {n}",
                "assistant": json.dumps({"cmd": "ascend", "args": {"meters": n}}),
                "category": "ascend",
            }
            for n in range(start, start + size)
        ]
        return {"examples": extra + rows}


def mlflow_client(project) -> tuple[MlflowClient, str]:
    client = MlflowClient(tracking_uri=f"sqlite:///{project.root / 'mlflow.db'}")
    return client, client.get_experiment_by_name(project.root.name).experiment_id


def the_run(project, kind: str):
    client, exp = mlflow_client(project)
    runs = client.search_runs([exp], filter_string=f"tags.`forge.kind` = '{kind}'")
    assert len(runs) == 1
    return runs[0]


def version_hash(examples) -> str:
    """The version hash, computed here the plain way: sha256 over each distinct example's record sha256."""
    seen, h = set(), hashlib.sha256()
    for ex in examples:
        if ex.key not in seen:
            seen.add(ex.key)
            h.update(
                hashlib.sha256(
                    json.dumps(ex.to_record(), sort_keys=True, ensure_ascii=False).encode()
                ).digest()
            )
    return h.hexdigest()


def assert_dataset_input(run, name: str, path: Path) -> str:
    """The run's one dataset input is `name`, with the content hash of `path` as digest; return it."""
    digest = version_hash(read_examples(path, required=False))
    (dataset,) = [d.dataset for d in run.inputs.dataset_inputs]
    assert (dataset.name, dataset.digest) == (name, digest[:36])
    assert run.data.tags["forge.data.hash"] == digest
    return digest


def gold_inputs(project) -> set[str]:
    return {e.key for e in read_examples(project.root / "dataset" / "gold.jsonl")}


def write_failures(project, categories: list[str]) -> None:
    write_jsonl(
        project.root / "output" / "eval_failures.jsonl",
        [
            {"input": f"x{i}", "expected": "{}", "actual": "", "category": c, "score": 0.0}
            for i, c in enumerate(categories)
        ],
    )
