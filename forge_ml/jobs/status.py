"""`forge-ml status`: dataset sizes and the latest scores, as rich tables."""

from __future__ import annotations

import json
import logging
from collections import Counter
from dataclasses import asdict
from datetime import datetime
from pathlib import Path

from rich.table import Table

from forge_ml.config import ForgeConfig
from forge_ml.console import titled_table
from forge_ml.data.examples import read_examples
from forge_ml.heartbeat import Liveness, liveness, read_heartbeat
from forge_ml.journal import read_records
from forge_ml.project import CORPUS_DIR, PROBE_FILE, Project
from forge_ml.tracking import client_for, experiment_name, runs_table

log = logging.getLogger(__name__)


def dataset_table(cfg: ForgeConfig, project: Project, counts: dict[str, int]) -> Table:
    """The example sets with their counts (from `status_summary`), and the probe and corpus when present."""
    table = Table(title="datasets")
    for column in ("set", "examples", "file"):
        table.add_column(column)
    for label, rel in _dataset_files(cfg):
        if label not in counts:
            continue
        path = project.resolve(rel)
        shown = str(path.relative_to(project.root)) if path.is_relative_to(project.root) else str(path)
        count = f"{counts[label]} file(s)" if label == "corpus" else str(counts[label])
        table.add_row(label, count, shown + ("/" if label == "corpus" else ""))
    return table


def _dataset_files(cfg: ForgeConfig) -> list[tuple[str, str]]:
    return [
        ("seed", cfg.task.seed_path),
        ("canonical", cfg.task.canonical_path),
        ("gold", cfg.task.gold_path),
        ("probe", PROBE_FILE),
        ("corpus", CORPUS_DIR),
    ]


def _dataset_counts(cfg: ForgeConfig, project: Project, canonical: int) -> dict[str, int]:
    """Examples per set (canonical's count given: the caller read it); questions in the probe and files
    in the corpus, only when the project has them."""
    counts: dict[str, int] = {}
    for label, rel in _dataset_files(cfg):
        path = project.resolve(rel)
        if label == "canonical":
            counts[label] = canonical
        elif label == "probe":
            if path.is_file():  # counted, not parsed: `forge-ml probe` says what is wrong with a line
                counts[label] = sum(
                    1
                    for line in path.read_text(encoding="utf-8", errors="replace").splitlines()
                    if line.strip()
                )
        elif label == "corpus":
            if path.is_dir():
                counts[label] = sum(1 for f in path.rglob("*") if f.is_file() and not f.name.startswith("."))
        else:
            counts[label] = len(read_examples(path, required=False))
    return counts


def scores_table(project: Project) -> Table | None:
    """The latest `eval`/`train` gold report per category, with Claude's judge scores when it judged."""
    path = project.output / "eval_results.json"
    if not path.is_file():
        return None
    try:
        results = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        results = {"error": str(exc)}
    if not isinstance(results, dict) or not {"accuracy", "correct", "total"} <= results.keys():
        log.warning("%s: unreadable; run `forge-ml eval` to write it again", path)
        return None
    judge = results.get("judge") if isinstance(results.get("judge"), dict) else None
    title = f"latest eval ({results.get('split', 'gold')})"
    if evaluated := _evaluated(project, results):
        title += f" of {evaluated}"
    title += f": accuracy {results['accuracy']:.3f} ({results['correct']}/{results['total']})"
    if judge:
        title += f", judge {judge['accuracy']:.3f}"
    table = titled_table(title)
    for column in ("category", "accuracy", "correct", "total", *(["judge"] if judge else [])):
        table.add_column(column)
    judged = judge.get("per_category", {}) if judge else {}
    for name, stats in results.get("per_category", {}).items():
        row = [name, f"{stats['accuracy']:.3f}", str(stats["correct"]), str(stats["total"])]
        if judge:
            row.append(f"{judged[name]:.3f}" if name in judged else "-")
        table.add_row(*row)
    return table


def _evaluated(project: Project, results: dict) -> str | None:
    """What the report scored, briefly: `v3` for a registry version, `run 962b7c02` for an adapter a
    train or trial run saved (its folder is named after the run), else its path (project-relative)."""
    if results.get("version"):
        return f"v{results['version']}"
    target = results.get("target")
    if not isinstance(target, str) or not target:
        return None
    path = Path(target)
    if path.parent == project.output / "adapters":
        return f"run {path.name[:8]}"
    return str(path.relative_to(project.root)) if path.is_relative_to(project.root) else target


def runs_summary(cfg: ForgeConfig, project: Project, limit: int = 5) -> Table | None:
    db = project.root / "mlflow.db"
    if cfg.tracking.uri is None and not db.exists():
        return None
    client = client_for(cfg, project)
    exp = client.get_experiment_by_name(experiment_name(cfg))
    if exp is None:
        return None
    metrics = ("dev/loss", "dev/accuracy", "gold/accuracy")
    table = titled_table(f"latest MLflow runs ({experiment_name(cfg)})", caption="acc: accuracy")
    # In 80 columns the run's name folds; the figures and headers stay whole.
    table.add_column("run", overflow="fold")
    for column in ("status", "dev/loss", "dev/acc", "gold/acc", "started"):
        table.add_column(column, no_wrap=True)
    for run in runs_table(client, [exp.experiment_id], limit):
        values = run.data.metrics
        started = run.info.start_time
        when = datetime.fromtimestamp(started / 1000).strftime("%Y-%m-%d %H:%M") if started else "-"
        table.add_row(
            f"{run.info.run_name} ({run.info.run_id[:8]})",
            run.info.status,
            *(f"{values[key]:.3f}" if key in values else "-" for key in metrics),
            when,
        )
    return table


def flywheel_table(summary: dict) -> Table | None:
    """The champion, the rounds done and the heartbeat, once the flywheel has run."""
    if not summary["rounds_done"] and summary["heartbeat"] is None:
        return None
    table = Table(title="flywheel", show_header=False)
    table.add_column("what", no_wrap=True)
    table.add_column("value", overflow="fold")  # a line to copy (load it) folds, never cut
    champion = summary["champion"]
    if champion:
        table.add_row(
            "champion",
            f"{champion['name']} v{champion['version']} (round {champion['round']}): "
            f"gold accuracy {champion['gold_accuracy']:.3f}"
            + (f", scored by {champion['scoring']}" if champion["scoring"] else ""),
        )
        table.add_row("load it", f'mlflow.pyfunc.load_model("{champion["uri"]}").predict(["..."])')
    else:
        table.add_row("champion", "none yet")
    done, most = summary["rounds_done"], summary["max_rounds"]
    beyond = "; `flywheel --iters` ran past it" if done > most else ""
    table.add_row("rounds", f"{done} done of flywheel.max_rounds={most}{beyond}")
    last = summary["last_round"]
    if last:
        gold = last.get("gold_accuracy")
        verdict = "promoted" if last.get("promoted") else "not promoted"
        table.add_row(
            "last round", f"{last['round']}: gold {'-' if gold is None else f'{gold:.3f}'}, {verdict}"
        )
    beat = summary["heartbeat"]
    if beat:
        table.add_row("heartbeat", heartbeat_line(beat, summary["liveness"]))
    return table


def heartbeat_line(beat: dict, alive: Liveness | None) -> str:
    """The heartbeat in words: where a running flywheel is, or that the process which wrote it is gone."""
    when = _local(beat.get("timestamp"))
    status = beat.get("status")
    if status == "completed":
        reason = f": {beat['stop_reason']}" if beat.get("stop_reason") else ""
        return f"completed at {when}{reason}"
    step = f", {beat['step']}" if beat.get("step") else ""
    if status == "error":
        return f"error at {when} (round {beat.get('round')}{step}) — {beat.get('error', '')}"
    if status == "stopped":  # a signal or Ctrl-C: the round is kept as it stood
        return (
            f"{beat.get('reason', 'stopped')} at {when} (round {beat.get('round')}{step}); "
            "`forge-ml flywheel` resumes the round"
        )
    where = f"round {beat.get('round')}"
    if beat.get("step"):
        where += f", {beat['step']}"
        if isinstance(trials := beat.get("trials"), dict):
            where += (
                f" ({trials['running']} running, {trials['finished']} finished, {trials['stopped']} stopped early, "
                f"{trials['failed']} failed of {trials['total']})"
            )
    if alive == "gone":
        return (
            f"stopped: pid {beat['pid']} is gone (last beat {when}, {where}); "
            "`forge-ml flywheel` resumes the round"
        )
    if alive == "silent":
        return (
            f"silent since {when} ({where}; host {beat.get('host')} beats every {beat.get('interval_s'):g} s): "
            "stopped, or this machine no longer sees its files"
        )
    return f"running: {where}; last beat {when}"


def _local(timestamp: object) -> str:
    seconds = timestamp if isinstance(timestamp, int | float) else 0
    return datetime.fromtimestamp(seconds).strftime("%Y-%m-%d %H:%M:%S")


def status_tables(cfg: ForgeConfig, project: Project, summary: dict) -> list[Table]:
    tables = [
        dataset_table(cfg, project, summary["datasets"]),
        flywheel_table(summary),
        scores_table(project),
        runs_summary(cfg, project),
    ]
    return [t for t in tables if t is not None]


def status_summary(cfg: ForgeConfig, project: Project) -> dict:
    """The status as plain data (the `--json` envelope of `forge-ml status`)."""
    canonical = read_examples(project.resolve(cfg.task.canonical_path), required=False)  # read once
    datasets = _dataset_counts(cfg, project, len(canonical))
    by_source = dict(sorted(Counter(str(e.meta.get("source", "unknown")) for e in canonical).items()))
    records = read_records(project)
    heartbeat = read_heartbeat(project)
    champion = None
    if records or heartbeat is not None:
        from forge_ml.registry import Registry

        registry = Registry.for_project(cfg, project)
        found = registry.champion()
        if found:
            version, outcome = found.version, found.outcome
            champion = {
                "name": registry.name,
                "version": str(version.version),
                "round": version.tags.get("forge.round"),
                "gold_accuracy": outcome.accuracy,
                "scoring": outcome.scoring or None,  # None: registered before the rule was recorded
                "uri": registry.uri(),
            }
    return {
        "project": str(project.root),
        "datasets": datasets,
        "canonical_by_source": by_source,
        "champion": champion,
        "rounds_done": len(records),
        "max_rounds": cfg.flywheel.max_rounds,
        "last_round": asdict(records[-1]) if records else None,
        "heartbeat": heartbeat,
        "liveness": liveness(heartbeat) if heartbeat and heartbeat.get("status") == "running" else None,
    }
