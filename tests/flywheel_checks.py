"""What every flywheel test checks in the project's MLflow store and files."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from mlflow import MlflowClient


def client_for(root: Path) -> tuple[MlflowClient, str]:
    uri = f"sqlite:///{root / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)  # never a registry URI another test exported
    return client, client.get_experiment_by_name(root.name).experiment_id


def runs_of(root: Path, kind: str | None = None) -> list:
    client, exp = client_for(root)
    query = f"tags.`forge.kind` = '{kind}'" if kind else ""
    return client.search_runs([exp], filter_string=query, max_results=1000)


def assert_consistent(root: Path, rounds: int) -> None:
    """One FINISHED round run per round, one run per trial, nothing RUNNING, one version per round."""
    client, exp = client_for(root)
    everything = client.search_runs([exp], max_results=1000)
    assert [r.info.run_name for r in everything if r.info.status == "RUNNING"] == []
    finished = sorted(r.info.run_name for r in runs_of(root, "round") if r.info.status == "FINISHED")
    assert finished == [f"round-{n:03d}" for n in range(1, rounds + 1)]
    trial_ids = [r.data.tags["forge.trial_id"] for r in runs_of(root, "trial")]
    assert len(trial_ids) == len(set(trial_ids)), "a trial has more than one MLflow run"
    versions = client.search_model_versions(f"name = '{root.name}'")
    assert len(versions) == rounds
    assert len({v.run_id for v in versions}) == rounds
    records = [json.loads(line) for line in (root / "output" / "experiments.jsonl").read_text().splitlines()]
    assert [r["round"] for r in records] == list(range(1, rounds + 1))


def assert_trials_ran_their_rounds_config(root: Path) -> int:
    """Each round run's params are its plan applied, and each trial ran exactly them but for the searched keys.

    Returns how many trial runs were checked.
    """
    client, exp = client_for(root)
    records = {
        json.loads(line)["round"]: json.loads(line)
        for line in (root / "output" / "experiments.jsonl").read_text().splitlines()
    }
    checked = 0
    for run in runs_of(root, "round"):
        plan = records[int(run.info.run_name.rsplit("-", 1)[1])]["plan"]
        params = run.data.params
        assert params["tune.num_samples"] == str(plan["num_samples"]), run.info.run_name
        for key, expression in plan["search_space"].items():
            assert params[f"tune.space.{key}"] == expression
        for key, value in plan["fixed_overrides"].items():
            assert params[key] == str(value), (run.info.run_name, key)
        trials = client.search_runs(
            [exp], f"tags.`mlflow.parentRunId` = '{run.info.run_id}'", max_results=100
        )
        assert len(trials) == plan["num_samples"], run.info.run_name
        config = {k: v for k, v in params.items() if not k.startswith("data.")}  # augmentation's own params
        for trial in trials:
            differ = {
                k
                for k in config.keys() | trial.data.params.keys()
                if config.get(k) != trial.data.params.get(k)
            }
            assert differ <= set(plan["search_space"]), (run.info.run_name, differ)
            checked += 1
        ran = [{k: t.data.params[k] for k in plan["search_space"]} for t in trials]
        for point in plan.get("first_points", []):  # each planned first point was trained as it was given
            assert {k: str(v) for k, v in point.items()} in ran, (run.info.run_name, point, ran)
    return checked


# -- files the flywheel rewrites: each change must be a new file renamed over the old one ---------
REWRITTEN = (
    "dataset/canonical.jsonl",
    "forge.yaml",
    "BACKGROUND.md",
    "PLAN.md",
    "AGENT_CONTEXT.md",
    "output/flywheel_heartbeat.json",
    "output/flywheel_state.json",
    "output/experiments.jsonl",
)


class RewriteWatch:
    """Tells a replacement (a new file renamed over the old: atomic) from a write into the old file.

    Each look keeps a hard link to every watched file, so its inode cannot be freed and reused;
    if that inode's content later changes, the file was written in place.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.store = root.parent / f".{root.name}-rewrite-watch"
        self.store.mkdir(exist_ok=True)
        self.renamed: dict[str, int] = {}
        self.in_place: list[str] = []
        self.looks = 0
        self.seen = self._look()

    def _look(self) -> dict[str, tuple[Path, bytes]]:
        self.looks += 1
        found = {}
        for rel in REWRITTEN:
            path = self.root / rel
            if path.is_file():
                link = self.store / f"{self.looks}-{rel.replace('/', '__')}"
                os.link(path, link)
                found[rel] = (link, hashlib.sha256(link.read_bytes()).digest())
        return found

    def check(self) -> None:
        for rel, (link, digest) in self.seen.items():
            if hashlib.sha256(link.read_bytes()).digest() != digest:
                self.in_place.append(rel)  # the old file itself changed
            else:
                path = self.root / rel
                if path.is_file() and not path.samefile(link):
                    self.renamed[rel] = self.renamed.get(rel, 0) + 1
            link.unlink()
        self.seen = self._look()


# -- secrets: sentinel values in the environment must not be written anywhere ---------------------
def secret_hits(secrets: list[str], folders: list[Path], texts: list[str]) -> tuple[list[str], int, int]:
    """Return (where a secret was found, files scanned, bytes scanned) over every file under `folders` and `texts`."""
    needles = [s.encode() for s in secrets]
    hits, files, size = [], 0, 0
    for folder in folders:
        for path in folder.rglob("*"):
            if not path.is_file() or path.is_symlink():
                continue
            try:
                data = path.read_bytes()
            except OSError:
                continue
            files, size = files + 1, size + len(data)
            hits += [f"{path}: {n.decode()[:12]}…" for n in needles if n in data]
    for i, text in enumerate(texts):
        size += len(text)
        hits += [f"output #{i}: {s[:12]}…" for s in secrets if s in text]
    return hits, files, size


def ray_session_logs() -> Path | None:
    """The newest Ray session's directory (logs and worker output) on this machine."""
    import tempfile

    latest = Path(os.environ.get("RAY_TMPDIR", tempfile.gettempdir())) / "ray" / "session_latest"
    return latest.resolve() if latest.exists() else None
