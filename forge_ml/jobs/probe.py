"""`forge-ml probe`: a domain-knowledge probe on `dataset/probe.jsonl`, before and after (pre)training.

Each line is `{"question": ..., "ideal": ...}`. The model answers every question greedily
(rendered with the project's system prompt and chat template, as in evaluation). Claude scores
each answer against the ideal one through the shared judge (forge_ml/evaluation/judge.py: forced
tool `judge_answers`, 0..1 per item, `planner.augment_batch` items per request, concurrent), or,
offline, the token F1 of answer and ideal does. One MLflow run per probe (`forge.kind=probe`,
`forge.probe_tag=pre|post`) holds `probe/score`, `probe/score/<i>` and the per-item table
`probe/items.json`; `compare_probes` reads the latest pre and post runs back.
"""

from __future__ import annotations

import hashlib
import json
import re
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forge_ml.config import ForgeConfig
from forge_ml.data.examples import Example, read_jsonl
from forge_ml.errors import InputError
from forge_ml.evaluation.report import EvalReport
from forge_ml.models.loader import BaseModelRef
from forge_ml.project import PROBE_FILE, Project
from forge_ml.tracking import Tracker, client_for, experiment_name

TAGS = ("pre", "post")
ITEMS_ARTIFACT = "probe/items.json"
CLAUDE, TOKEN_F1 = "claude", "token_f1"


@dataclass
class ProbeItem:
    question: str
    ideal: str


@dataclass
class ProbeTarget:
    """What is probed: a base model, optionally with an adapter, and where its tokenizer lies."""

    label: str
    base: BaseModelRef
    adapter: Path | None
    tokenizer: BaseModelRef


@dataclass
class ProbeSummary:
    run_id: str
    tag: str
    target: str
    judge: str
    score: float
    items: list[dict[str, Any]]
    cost_usd: float | None = None  # what the judge cost (None offline)


@dataclass
class ProbeRun:
    """A finished probe run read back from MLflow."""

    run_id: str
    tag: str
    target: str
    judge: str
    score: float
    items: list[dict[str, Any]]


@dataclass
class ProbeComparison:
    pre: ProbeRun
    post: ProbeRun
    rows: list[dict[str, Any]]  # {question, pre, post, delta}: None where one run lacks the question

    @property
    def delta(self) -> float:
        return self.post.score - self.pre.score


def read_probe(project: Project) -> tuple[Path, list[ProbeItem]]:
    """Return the probe file and its items; InputError (file:line) when missing, empty or malformed."""
    path = project.resolve(PROBE_FILE)
    if not path.is_file():
        raise InputError(
            f'{path}: probe file not found; write one {{"question": ..., "ideal": ...}} per line'
        )
    items = []
    for where, record in read_jsonl(path):
        if not isinstance(record, dict):
            raise InputError(f"{where}: expected an object with 'question' and 'ideal'")
        for key in ("question", "ideal"):
            if not isinstance(record.get(key), str) or not record[key].strip():
                raise InputError(f"{where}: '{key}' must be a non-empty string")
        items.append(ProbeItem(record["question"].strip(), record["ideal"].strip()))
    if not items:
        raise InputError(f'{path}: the probe is empty; write one {{"question": ..., "ideal": ...}} per line')
    return path, items


def probe_hash(items: list[ProbeItem]) -> str:
    h = hashlib.sha256()
    for item in items:
        h.update(json.dumps([item.question, item.ideal], ensure_ascii=False).encode("utf-8") + b"\n")
    return h.hexdigest()


_WORD = re.compile(r"\w+")


def tokens(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def token_f1(ideal: str, answer: str) -> float:
    """The F1 of the word tokens shared by `ideal` and `answer` (lower-cased, punctuation ignored)."""
    want, got = tokens(ideal), tokens(answer)
    if not want or not got:
        return float(want == got)
    common = sum((Counter(want) & Counter(got)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(got), common / len(want)
    return 2 * precision * recall / (precision + recall)


# ---- what to probe ----------------------------------------------------------------------------------

_REGISTRY_REF = re.compile(r"^models:/(?P<name>[^/@]+)(?:@(?P<alias>[\w-]+)|/(?P<number>\d+))$")


def _registry_target(cfg: ForgeConfig, project: Project, ref: str, workdir: Path) -> ProbeTarget:
    from forge_ml.registry import Registry

    match = _REGISTRY_REF.match(ref)
    if match is None:
        raise InputError(f"--model {ref!r}: expected models:/<name>@<alias> or models:/<name>/<version>")
    registry = Registry.for_project(cfg, project)
    if match["name"] != registry.name:
        raise InputError(f"--model {ref!r}: this project's registered model is {registry.name!r}")
    version = registry.version(match["number"], alias=match["alias"])
    files = registry.download(version, workdir)
    return ProbeTarget(
        f"{ref} (v{version.version})",
        files.base_ref(),
        files.adapter,
        BaseModelRef(str(files.adapter), None, False),
    )


def resolve_probe_target(cfg: ForgeConfig, project: Project, model: str | None, workdir: Path) -> ProbeTarget:
    """Return the model `--model` names: a registry version, an adapter or model directory, or the base."""
    from forge_ml.jobs.evaluate import resolve_target
    from forge_ml.jobs.pretrain import configured_base
    from forge_ml.models.adapters import is_adapter_dir

    if model is None:
        base = configured_base(cfg, project)
        return ProbeTarget(f"base model {base.source}", base, None, base)
    if model.startswith("models:/"):
        return _registry_target(cfg, project, model, workdir)
    path = project.resolve(model)
    if not (is_adapter_dir(path) or (path / "config.json").is_file()):
        raise InputError(
            f"--model {model}: {path} is neither a PEFT adapter nor a model directory "
            "(or use models:/<name>@<alias>, models:/<name>/<version>)"
        )
    base, adapter = resolve_target(cfg, project, str(path))
    own_tokenizer = adapter is not None and (adapter / "tokenizer_config.json").is_file()
    tokenizer = BaseModelRef(str(adapter), None, False) if own_tokenizer else base
    return ProbeTarget(str(path), base, adapter, tokenizer)


def generate_answers(
    cfg: ForgeConfig, project: Project, target: ProbeTarget, items: list[ProbeItem], system_prompt: str
) -> list[str]:
    """Answer every question greedily, rendered with the project's system prompt and chat template."""
    from forge_ml.models.adapters import load_adapter
    from forge_ml.models.generation import generate_batched, render_prompt
    from forge_ml.models.loader import load_base_model, load_tokenizer
    from forge_ml.progress import Stage

    tokenizer = load_tokenizer(target.tokenizer, cfg.model, project)
    model = load_base_model(target.base, cfg)
    if target.adapter is not None:
        model = load_adapter(model, target.adapter)
    role = cfg.model.system_role
    prompts = [render_prompt(tokenizer, system_prompt, item.question, system_role=role) for item in items]
    with Stage("generating (probe)", unit="examples", total=len(prompts)) as stage:
        return generate_batched(
            model,
            tokenizer,
            prompts,
            batch_size=cfg.eval.batch_size,
            max_new_tokens=cfg.eval.max_new_tokens,
            on_batch=stage.advance,
        )


# ---- scoring and the probe run ------------------------------------------------------------------------


def score_answers(
    cfg: ForgeConfig, items: list[ProbeItem], answers: list[str], *, claude: bool, system_prompt: str
) -> tuple[EvalReport, Any]:
    """Return the scored report (token F1, or Claude's scores) and the judge's result (None offline).

    Answers matching `eval.forbidden_outputs` score 0 either way, as in every eval.
    """
    from forge_ml.evaluation.report import score_outputs

    examples = [Example(user=item.question, assistant=item.ideal) for item in items]
    report = score_outputs(examples, answers, token_f1, cfg.eval)
    if not claude:
        return report, None
    from forge_ml.evaluation.judge import judge_answers
    from forge_ml.llm import make_client

    judged = judge_answers(
        make_client(cfg.planner),
        cfg.planner,
        examples,
        report,
        system_prompt=system_prompt,
        eval_cfg=cfg.eval,
        items_per_request=cfg.planner.augment_batch,
    )
    return judged.report, judged


def run_probe(cfg: ForgeConfig, tag: str, model: str | None, *, claude: bool) -> ProbeSummary:
    """Probe one model, score the answers (Claude's `judge_answers` when `claude`, else token F1), record it."""
    from forge_ml.data.project_data import read_system_prompt

    project = Project(Path(cfg.project_dir))
    path, items = read_probe(project)
    system_prompt = read_system_prompt(project, cfg.task)
    with tempfile.TemporaryDirectory(prefix="forge-probe-") as tmp:
        target = resolve_probe_target(cfg, project, model, Path(tmp))
        tags = {
            "forge.kind": "probe",
            "forge.probe_tag": tag,
            "forge.probe.target": target.label,
            "forge.probe.judge": CLAUDE if claude else TOKEN_F1,
            "forge.probe.hash": probe_hash(items),
        }
        with Tracker(cfg, project).start_run(f"probe-{tag}", tags) as run:
            run.log_params({"probe.size": len(items), "probe.path": str(path), "probe.target": target.label})
            answers = generate_answers(cfg, project, target, items, system_prompt)
            report, judged = score_answers(cfg, items, answers, claude=claude, system_prompt=system_prompt)
            reasons = {j.index: j.reason for j in judged.judgements} if judged else {}
            rows = [
                {
                    "index": i,
                    "question": item.question,
                    "ideal": item.ideal,
                    "answer": answer,
                    "score": scored.score,
                    "reason": reasons.get(i, ""),
                }
                for i, (item, answer, scored) in enumerate(zip(items, answers, report.items))
            ]
            summary = ProbeSummary(
                run.run_id, tag, target.label, tags["forge.probe.judge"], report.accuracy, rows
            )
            metrics = {"probe/score": summary.score} | {f"probe/score/{r['index']}": r["score"] for r in rows}
            if judged is not None:
                summary.cost_usd = judged.cost_usd
                metrics |= judged.usage.metrics(cfg.planner, prefix="judge") | {
                    "judge/cost_usd": judged.cost_usd
                }
            run.log_metrics(metrics)
            table = Path(tmp) / "items.json"
            table.write_text(json.dumps(rows, indent=1, ensure_ascii=False), encoding="utf-8")
            run.log_artifact(table, "probe")
    return summary


# ---- compare ------------------------------------------------------------------------------------------


def latest_probe(client: Any, experiment_id: str | None, tag: str, experiment: str) -> ProbeRun:
    """Return the latest FINISHED probe run tagged `tag`; InputError when there is none."""
    runs = []
    if experiment_id is not None:
        runs = client.search_runs(
            [experiment_id],
            filter_string=f"tags.`forge.kind` = 'probe' and tags.`forge.probe_tag` = '{tag}' "
            "and attributes.status = 'FINISHED'",
            order_by=["attributes.start_time DESC"],
            max_results=1,
        )
    if not runs:
        raise InputError(
            f"no finished probe run tagged '{tag}' in experiment {experiment!r}; run `forge-ml probe --tag {tag}` first"
        )
    run = runs[0]
    with tempfile.TemporaryDirectory(prefix="forge-probe-") as tmp:
        items = json.loads(Path(client.download_artifacts(run.info.run_id, ITEMS_ARTIFACT, tmp)).read_text())
    return ProbeRun(
        run.info.run_id,
        tag,
        run.data.tags.get("forge.probe.target", ""),
        run.data.tags.get("forge.probe.judge", ""),
        float(run.data.metrics["probe/score"]),
        items,
    )


def compare_probes(cfg: ForgeConfig) -> ProbeComparison:
    """Return the latest pre and post probe runs and the per-question deltas (matched by question text);
    InputError when the two were scored by different judges."""
    project = Project(Path(cfg.project_dir))
    client = client_for(cfg, project)
    name = experiment_name(cfg)
    experiment = client.get_experiment_by_name(name)
    exp_id = experiment.experiment_id if experiment is not None else None
    pre, post = (latest_probe(client, exp_id, tag, name) for tag in TAGS)
    if pre.judge != post.judge:  # token F1 and Claude's 0..1 are different scales: no delta between them
        raise InputError(
            f"the latest pre probe (run {pre.run_id[:8]}) was scored by {pre.judge}, the latest post probe "
            f"(run {post.run_id[:8]}) by {post.judge}: scores of different judges do not compare; probe the "
            f"{'pre' if post.judge == CLAUDE else 'post'} side again with the other's judge (Claude when "
            "ANTHROPIC_API_KEY is set, token F1 with planner=offline)"
        )
    before = {row["question"]: row["score"] for row in pre.items}
    after = {row["question"]: row["score"] for row in post.items}
    questions = list(before) + [q for q in after if q not in before]
    rows = []
    for question in questions:
        a, b = before.get(question), after.get(question)
        rows.append(
            {"question": question, "pre": a, "post": b, "delta": None if a is None or b is None else b - a}
        )
    return ProbeComparison(pre, post, rows)
