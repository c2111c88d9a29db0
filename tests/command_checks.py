"""Helpers of the CLI command tests (audit, probe, pretrain): --json envelopes, the project's MLflow runs, records."""

from __future__ import annotations

import json
import re
from pathlib import Path

from conftest import run_cli
from mlflow import MlflowClient

COMMON = ["command", "success", "exit_code", "run_id", "config_hash"]
KEYS = {
    "audit": [
        "reviewer",
        "examples",
        "counts",
        "findings",
        "fixed",
        "dropped",
        "refused",
        "canonical",
        "previous_hash",
        "dataset_hash",
        "cost_usd",
    ],
    "probe": ["tag", "target", "judge", "score", "items", "pre", "post", "delta", "per_question", "cost_usd"],
    "pretrain": [
        "merged_dir",
        "base_model",
        "method",
        "epochs",
        "optimizer_steps",
        "learning_rate",
        "corpus_hash",
        "files",
        "documents",
        "tokens",
        "ignored",
        "train_loss",
        "kept_base_of_versions",
    ],
}


def envelope(result, command: str) -> dict:
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1, result.stdout + result.stderr[-3000:]
    data = json.loads(lines[0])
    assert list(data) == [*COMMON, *KEYS[command], "error"]
    return data


def cli(root: Path, *args: str, env: dict | None = None) -> tuple[object, dict]:
    result = run_cli("-p", str(root), "--json", *args, env=env)
    return result, envelope(result, args[0])


def client_of(root: Path) -> tuple[MlflowClient, str | None]:
    client = MlflowClient(tracking_uri=f"sqlite:///{root / 'mlflow.db'}")
    experiment = client.get_experiment_by_name(root.name)
    return client, experiment.experiment_id if experiment else None


def runs_of(root: Path, kind: str) -> list:
    client, exp = client_of(root)
    if exp is None:
        return []
    return client.search_runs([exp], filter_string=f"tags.`forge.kind` = '{kind}'", max_results=100)


def record(user: str, assistant: str, category: str = "x") -> dict:
    return {
        "messages": [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}],
        "meta": {"category": category, "source": "seed"},
    }


def answer(cmd: str, **args) -> str:
    return json.dumps({"cmd": cmd, "args": args})


def judge_handler(seen: list[list[int]], drop_once: set[int]):
    """Score index i 1.0 when i % 3 == 0, else 0.0; leave out an index of `drop_once` the first time."""

    def handle(request: dict) -> dict:
        text = request["messages"][0]["content"]
        body = re.search(r'<data name="answers">\n(.*)\n</data>', text, re.S)[1]
        indices = [item["index"] for item in json.loads(body)]
        seen.append(indices)
        dropped = drop_once & set(indices)
        drop_once.difference_update(dropped)
        return {
            "scores": [
                {"index": i, "score": 1.0 if i % 3 == 0 else 0.0, "reason": f"reason {i}"}
                for i in indices
                if i not in dropped
            ]
        }

    return handle
