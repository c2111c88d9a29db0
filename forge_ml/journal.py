"""What the flywheel keeps in the project directory for people and for the next plan.

`output/experiments.jsonl` (one line per round), AGENT_CONTEXT.md (history the planner reads,
newest part kept), PLAN.md (the current strategy), a plot of accuracy per round, and a git
commit per round. Every file is rewritten atomically. The heartbeat is heartbeat.py's.
"""

from __future__ import annotations

import json
import logging
import subprocess
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from forge_ml.errors import describe
from forge_ml.fileio import atomic_write_text
from forge_ml.planner.plan import ExperimentPlan
from forge_ml.project import Project

log = logging.getLogger(__name__)
EXPERIMENTS = "experiments.jsonl"
CONTEXT = "AGENT_CONTEXT.md"
PLAN = "PLAN.md"
BACKGROUND = "BACKGROUND.md"


@dataclass
class RoundRecord:
    """One line of experiments.jsonl (earlier versions named the round `iteration`; such lines are still read)."""

    round: int
    hypothesis: str
    plan: ExperimentPlan
    planner: str
    dev_accuracy: float | None
    gold_accuracy: float | None
    gold_per_category: dict[str, float]
    promoted: bool
    gate_reasons: list[str]
    champion_accuracy: float | None
    dataset_hash: str
    dataset_size: int
    examples_added: int
    round_run_id: str
    best_run_id: str | None
    version: str | None
    wall_s: float
    failures_by_category: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, row: dict[str, Any]) -> RoundRecord:
        """Return the record of one experiments.jsonl line (KeyError/TypeError when it is not one)."""
        if "round" not in row and "iteration" in row:
            row = {**row, "round": row["iteration"]}
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in row.items() if k in known} | {"plan": ExperimentPlan(**row["plan"])})


def read_records(project: Project) -> list[RoundRecord]:
    """Return the rounds recorded in experiments.jsonl, oldest first (an unreadable line is skipped, with a warning)."""
    path = project.output / EXPERIMENTS
    if not path.is_file():
        return []
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        try:
            rows.append(RoundRecord.from_dict(json.loads(line)))
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError):
            log.warning("%s:%d: skipping an unreadable line", path, number)
    return sorted(rows, key=lambda r: r.round)


def append_record(project: Project, record: RoundRecord) -> None:
    """Add the round's line; a round already recorded (a resumed run) is replaced, not repeated."""
    rows = [r for r in read_records(project) if r.round != record.round]
    rows = sorted([*rows, record], key=lambda r: r.round)
    atomic_write_text(
        project.output / EXPERIMENTS,
        "".join(json.dumps(asdict(r), ensure_ascii=False) + "\n" for r in rows),
    )


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 100:.1f}%"


def write_context(project: Project, records: list[RoundRecord], target: float, max_chars: int) -> None:
    """Rewrite AGENT_CONTEXT.md from the records: scores, failure taxonomy, what worked; newest part kept."""
    head = "\n".join(
        [
            "# Agent context (written by forge-ml after each round)",
            "",
            f"Target gold accuracy: {_pct(target)}. One section per round, newest last.",
            "",
        ]
    )
    sections: list[str] = []
    best: float | None = None
    for r in records:
        gold = r.gold_accuracy
        improved = gold is not None and (best is None or gold > best)
        lines = [
            f"## Round {r.round}: gold {_pct(gold)}"
            + (" — promoted" if r.promoted else "")
            + (" — new best" if improved else ""),
            f"- hypothesis: {r.hypothesis}",
            f"- planner: {r.planner}; data: {r.dataset_size} examples (+{r.examples_added})",
            f"- search space: {json.dumps(r.plan.search_space)}",
        ]
        if r.gold_per_category:
            weakest = sorted(r.gold_per_category.items(), key=lambda kv: kv[1])[:4]
            lines.append("- weakest categories: " + ", ".join(f"{k} {_pct(v)}" for k, v in weakest))
        if r.failures_by_category:
            lines.append(
                "- gold failures by category: "
                + ", ".join(f"{k} {v}" for k, v in r.failures_by_category.items())
            )
        if r.gate_reasons:
            lines.append("- gate: " + "; ".join(r.gate_reasons))
        sections.append("\n".join(lines) + "\n")
        if improved:
            best = gold
    dropped = 0
    while len(sections) > 1 and len(head) + sum(len(x) + 1 for x in sections) > max_chars:
        sections.pop(0)
        dropped += 1
    note = f"({dropped} older round(s) truncated; see output/experiments.jsonl)\n\n" if dropped else ""
    text = head + "\n" + note + "\n".join(sections)
    atomic_write_text(project.root / CONTEXT, text)


def write_plan(project: Project, records: list[RoundRecord], target: float) -> None:
    """Rewrite PLAN.md: what comes next (the latest plan's queue), what was tried and how it went
    (every round, newest first), and the latest round's plan in full. The planner reads it next round."""
    if not records:
        return
    latest = records[-1]
    plan = latest.plan
    queue = [f"{n}. {h}" for n, h in enumerate(plan.next_hypotheses, 1)] or ["(the planner queued none)"]
    tried = [
        f"| {r.round} | {r.planner} | {_cell(r.hypothesis)} | {_pct(r.gold_accuracy)} | "
        f"{_pct(r.champion_accuracy)} | {_cell(_worked(r))} |"
        for r in reversed(records)
    ]
    text = "\n".join(
        [
            "# Plan: what was tried, and what comes next (rewritten by forge-ml after every round)",
            "",
            f"Rounds done: {len(records)}. Champion gold accuracy: {_pct(latest.champion_accuracy)} "
            f"(target {_pct(target)}).",
            "",
            f"## Next: the queue after round {latest.round}",
            "",
            *queue,
            "",
            "## Tried",
            "",
            "| round | planner | hypothesis | gold accuracy | champion after | worked |",
            "|---|---|---|---|---|---|",
            *tried,
            "",
            f"## Round {latest.round} in full",
            "",
            f"Round {latest.round}, planned by the {latest.planner} planner.",
            "",
            f"**Hypothesis.** {plan.hypothesis}",
            "",
            "**Search space.**",
            "",
            *(f"- `{k}`: `{v}`" for k, v in plan.search_space.items()),
            "",
            f"**Trials.** {plan.num_samples}; fixed: `{json.dumps(plan.fixed_overrides)}`",
            "",
            f"**Data.** {plan.augment_n} new examples"
            + (f" for {', '.join(plan.augment_focus)}" if plan.augment_focus else "")
            + ".",
            "",
        ]
    )
    atomic_write_text(project.root / PLAN, text)


def _worked(record: RoundRecord) -> str:
    if record.version is None:
        return "not gated (no trials, or none finished)"
    if record.promoted:
        return f"yes: v{record.version} promoted to champion"
    reason = record.gate_reasons[0] if record.gate_reasons else "refused"
    return f"no: v{record.version} refused ({reason[:160]})"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def append_background(project: Project, round_number: int, text: str) -> None:
    if not text.strip():
        return
    path = project.root / BACKGROUND
    old = path.read_text(encoding="utf-8") if path.is_file() else ""
    heading = f"## Learned in round {round_number}"
    if f"\n{heading}\n" in old:  # a resumed round planned again
        return
    atomic_write_text(path, old.rstrip("\n") + f"\n\n{heading}\n\n{text.strip()}\n")


def plot_rounds(records: list[RoundRecord], path: Path) -> Path | None:
    """Plot gold accuracy per round, overall and per category; return the PNG (None without matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    rows = [r for r in records if r.gold_accuracy is not None]
    if not rows:
        return None
    rounds = [r.round for r in rows]
    fig, ax = plt.subplots(figsize=(8, 5))
    categories = sorted({c for r in rows for c in r.gold_per_category})
    for name in categories:
        ax.plot(rounds, [r.gold_per_category.get(name) for r in rows], alpha=0.45, linewidth=1, label=name)
    ax.plot(
        rounds, [r.gold_accuracy for r in rows], color="black", linewidth=2.5, marker="o", label="overall"
    )
    ax.set(xlabel="round", ylabel="gold accuracy", ylim=(0, 1.02), title="gold accuracy per round")
    ax.set_xticks(rounds)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def round_files(project: Project, canonical: Path) -> list[Path]:
    """The project files a flywheel round may write: the ones its git commit takes, and nothing else."""
    return [
        project.config_file,
        project.root / BACKGROUND,
        project.root / CONTEXT,
        project.root / PLAN,
        canonical,
    ]


def git_commit(project: Project, message: str, paths: list[Path]) -> bool:
    """Commit `paths` (those that exist) when the project is in a git work tree; return whether it did.

    Only these paths are added and committed (`git commit --only`): an untracked `.env` in the
    project, or changes someone staged elsewhere in an enclosing repository, are left alone.
    """

    present = [str(p.resolve()) for p in paths if p.exists()]
    try:
        inside = _git(project.root, "rev-parse", "--is-inside-work-tree")
        if inside.returncode != 0 or inside.stdout.strip() != "true" or not present:
            return False
        # what git ignores stays out (a project made inside a repository that ignores it, before
        # `init` checked for that): `git add` of an ignored path fails, and the commit with it
        listed = _git(project.root, "check-ignore", "--stdin", "-z", stdin="\0".join(present) + "\0")
        ignored = set(listed.stdout.split("\0")) - {""}
        if ignored:
            log.info("not committed: git ignores %s", ", ".join(sorted(ignored)))
            present = [p for p in present if p not in ignored]
            if not present:
                return False
        _git(project.root, "add", "--", *present)
        done = _git(project.root, "commit", "-q", "--only", "-m", message, "--", *present)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("git commit skipped: %s", exc)
        return False
    if done.returncode != 0 and "nothing to commit" not in done.stdout + done.stderr:
        log.warning("git commit failed: %s", (done.stderr or done.stdout).strip()[:300])
        return False
    return done.returncode == 0


def git_init(root: Path) -> str:
    """Make `root` a git repository with a first commit of what is in it; return what happened.

    A directory already inside a work tree is left alone (its rounds commit there), unless that
    repository ignores it (`make demo`'s project inside a checkout of forge-ml): then it gets a
    repository of its own. A missing `git`, or no committer identity, leaves a repository without
    a first commit, and says so.
    """

    enclosing = ""
    try:
        inside = _git(root, "rev-parse", "--show-toplevel")
        if inside.returncode == 0:
            top = inside.stdout.strip()
            if _git(root, "check-ignore", "-q", "--", str(root.resolve())).returncode != 0:
                return f"inside the git repository {top}: rounds commit there"
            enclosing = f" of its own ({top} ignores this directory)"
        made = _git(root, "init", "-q")
        if made.returncode != 0:
            return f"not a git repository: git init failed ({(made.stderr or made.stdout).strip()[:200]})"
        _git(root, "add", "-A")
        first = _git(root, "commit", "-q", "-m", "forge-ml init")
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"not a git repository: {describe(exc)}"
    if first.returncode != 0:
        return (
            f"a git repository{enclosing} without a first commit (set git's user.name and user.email "
            f"so that rounds can commit): {(first.stderr or first.stdout).strip()[:200]}"
        )
    return f"a git repository{enclosing}: each flywheel round commits forge.yaml, the dataset and the notes"


def _git(root: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    """Run `git -C root ARGS`, capturing its output (a non-zero exit is the caller's to read)."""
    return subprocess.run(
        ["git", "-C", str(root), *args], input=stdin, capture_output=True, text=True, timeout=60, check=False
    )
