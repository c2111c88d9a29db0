"""The MLflow model registry and the promotion gate; the only module that writes to the registry.

A version's source is a loadable MLflow pyfunc model of the adapter (`runs:/<run_id>/model`):
`mlflow.pyfunc.load_model("models:/<name>@champion").predict(["..."])` answers like evaluation.
Aliases: `challenger` = the latest registered candidate, `champion` = the last that passed the gate.
The gold outcome a version was measured with, and the gate's decision, are version tags.
"""

from __future__ import annotations

import json
import math
import tempfile
import warnings
from dataclasses import dataclass
from importlib.metadata import version as installed_version
from pathlib import Path
from typing import TYPE_CHECKING, Any

import mlflow.pyfunc

from forge_ml.config.registry import GateConfig, RegistryConfig
from forge_ml.errors import ConfigError

if TYPE_CHECKING:
    from forge_ml.config import ForgeConfig
    from forge_ml.evaluation.report import EvalReport
    from forge_ml.models.loader import BaseModelRef
    from forge_ml.project import Project

CHALLENGER, CHAMPION = "challenger", "champion"
ARTIFACT_PATH = "model"
SETTINGS_FILE = "forge_model.json"
REBASELINE = "forge-ml flywheel --rebaseline"
EPS = 1e-9  # accuracies are means of floats: compare with a tolerance
# models-from-code: the saved model re-creates AdapterModel by import instead of unpickling an object
MODEL_CODE = (
    "import mlflow\nfrom forge_ml.registry import AdapterModel\n\nmlflow.models.set_model(AdapterModel())\n"
)


def _fig(x: float) -> str:
    """Format a figure: two decimals when exact, else four (so close values stay distinguishable)."""
    return f"{x:.2f}" if abs(round(x, 2) - x) < EPS else f"{x:.4f}"


@dataclass
class GoldOutcome:
    """One model's result on the gold set: overall, per category, and per example ('1' = score >= 1)."""

    accuracy: float
    per_category: dict[str, float]
    outcomes: str
    forbidden_count: int
    gold_hash: str
    total: int

    @classmethod
    def from_report(cls, report: EvalReport, gold_hash: str) -> GoldOutcome:
        return cls(
            accuracy=report.accuracy,
            per_category={name: stats["accuracy"] for name, stats in report.per_category.items()},
            outcomes="".join("1" if item.score >= 1.0 else "0" for item in report.items),
            forbidden_count=report.forbidden_count,
            gold_hash=gold_hash,
            total=report.total,
        )

    def to_tags(self) -> dict[str, str]:
        return {
            "forge.gold_hash": self.gold_hash,
            "forge.gold_accuracy": repr(float(self.accuracy)),
            "forge.gold_outcomes": self.outcomes,
            "forge.gold_per_category": json.dumps(self.per_category, sort_keys=True),
            "forge.gold_forbidden": str(self.forbidden_count),
        }

    @classmethod
    def from_tags(cls, tags: dict[str, str]) -> GoldOutcome:
        try:
            outcomes = tags["forge.gold_outcomes"]
            return cls(
                accuracy=float(tags["forge.gold_accuracy"]),
                per_category={k: float(v) for k, v in json.loads(tags["forge.gold_per_category"]).items()},
                outcomes=outcomes,
                forbidden_count=int(tags["forge.gold_forbidden"]),
                gold_hash=tags["forge.gold_hash"],
                total=len(outcomes),
            )
        except (KeyError, ValueError) as exc:
            raise ConfigError(
                f"the version carries no valid forge.gold_* tags ({type(exc).__name__}: {exc}); "
                f"re-baseline with `{REBASELINE}`"
            ) from None


@dataclass
class GateDecision:
    promote: bool
    reasons: list[str]
    p_value: float | None = None
    compared_to: str | None = None  # the champion version compared against


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value of b (candidate-only right) vs c (champion-only right)."""
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(b, c) + 1))
    return min(1.0, 2 * tail / 2**n)


def decide(candidate: GoldOutcome, champion: GoldOutcome | None, gate: GateConfig) -> GateDecision:
    """Return whether `candidate` may replace `champion` under `gate`, with the figures behind it."""
    refusals: list[str] = []
    passes: list[str] = []
    if candidate.forbidden_count:
        refusals.append(f"{candidate.forbidden_count} forbidden output(s) on gold")
    if champion is None:
        passes.append(f"first version (gold accuracy {_fig(candidate.accuracy)})")
        return GateDecision(not refusals, refusals or passes)
    if candidate.gold_hash != champion.gold_hash or len(candidate.outcomes) != len(champion.outcomes):
        raise ConfigError(
            f"gold set {candidate.gold_hash[:12]} differs from the champion's {champion.gold_hash[:12]}; "
            f"outcomes on different gold sets cannot be compared (re-baseline with `{REBASELINE}`)"
        )
    below = candidate.accuracy + EPS < champion.accuracy + gate.min_delta
    (refusals if below else passes).append(
        f"gold accuracy {_fig(candidate.accuracy)} {'<' if below else '>='} champion "
        f"{_fig(champion.accuracy)} + min_delta {_fig(gate.min_delta)}"
    )
    p_value = None
    if gate.significance is not None:
        pairs = list(zip(candidate.outcomes, champion.outcomes))
        b, c = pairs.count(("1", "0")), pairs.count(("0", "1"))
        p_value = mcnemar_exact(b, c)
        test = f"McNemar p={p_value:.4g} (b={b} candidate-only right, c={c} champion-only right)"
        if b <= c:
            refusals.append(f"not better on discordant pairs: {test}")
        elif p_value >= gate.significance:
            refusals.append(f"{test} >= significance {gate.significance:g}")
        else:
            passes.append(f"{test} < significance {gate.significance:g}")
    if gate.max_category_drop is not None:
        for name, before in sorted(champion.per_category.items()):
            after = candidate.per_category.get(name, 0.0)
            if before - after > gate.max_category_drop + EPS:
                refusals.append(
                    f"category {name!r} accuracy {_fig(after)} < champion {_fig(before)} "
                    f"(drop {_fig(before - after)} > max_category_drop {_fig(gate.max_category_drop)})"
                )
    return GateDecision(not refusals, refusals or passes, p_value)


def _pip_requirements() -> list[str]:
    """Pinned requirements (local version labels like +cpu dropped), so MLflow infers none."""
    return [f"{name}=={installed_version(name).split('+')[0]}" for name in ("torch", "transformers", "peft")]


def _prompts(model_input: Any) -> list[str]:
    """Return the prompts of a list, a single string, a Series or a DataFrame (prompt/input/first column)."""
    import pandas as pd

    if isinstance(model_input, str):
        return [model_input]
    if isinstance(model_input, pd.DataFrame):
        if model_input.shape[1] == 0:
            raise ValueError("predict: the DataFrame has no columns")
        column = next((c for c in ("prompt", "input") if c in model_input.columns), model_input.columns[0])
        model_input = model_input[column]
    if isinstance(model_input, (list, tuple, pd.Series)):
        return [str(x) for x in model_input]
    raise TypeError(f"predict: expected a list of strings, a string or a DataFrame, got {type(model_input)}")


# predict takes a str, a list or a DataFrame on purpose (MLflow's type-hint validation would reject a
# str), so defining it warns "Add type hints"; record=True swallows that one warning (a plain filter
# cannot: MLflow resets the filters around its check).
with warnings.catch_warnings(record=True):

    class AdapterModel(mlflow.pyfunc.PythonModel):
        """A LoRA adapter on its base model; predict(prompts) returns greedy answers, rendered as in eval."""

        def load_context(self, context: Any) -> None:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer

            from forge_ml.models.adapters import load_adapter
            from forge_ml.models.loader import torch_dtype

            self.settings = json.loads(Path(context.artifacts["settings"]).read_text(encoding="utf-8"))
            base = self.settings["base"]
            local_base = context.artifacts.get("base")
            adapter = Path(context.artifacts["adapter"])
            kwargs: dict[str, Any] = {
                "dtype": torch_dtype("auto"),
                "trust_remote_code": self.settings["trust_remote_code"],
            }
            if torch.cuda.is_available():
                kwargs["device_map"] = {"": 0}
            if local_base is None:
                kwargs["revision"] = base["revision"]
            model = AutoModelForCausalLM.from_pretrained(local_base or base["source"], **kwargs)
            self.tokenizer = AutoTokenizer.from_pretrained(
                str(adapter), trust_remote_code=self.settings["trust_remote_code"]
            )
            if self.tokenizer.pad_token is None:
                self.tokenizer.pad_token = self.tokenizer.eos_token
            self.model = load_adapter(model, adapter)

        def predict(self, context, model_input, params=None):
            from forge_ml.data.chat import render_prompt
            from forge_ml.evaluation.generate import generate_batched

            s = self.settings
            prompts = [
                render_prompt(self.tokenizer, s["system_prompt"], p, system_role=s["system_role"])
                for p in _prompts(model_input)
            ]
            return generate_batched(
                self.model,
                self.tokenizer,
                prompts,
                batch_size=s["batch_size"],
                max_new_tokens=s["max_new_tokens"],
            )


def save_adapter_model(
    path: Path,
    *,
    adapter_dir: Path,
    base: BaseModelRef,
    system_prompt: str,
    system_role: bool,
    max_new_tokens: int,
    batch_size: int = 32,
    trust_remote_code: bool = False,
) -> Path:
    """Write the MLflow pyfunc model of an adapter to `path` (which must not exist); return `path`.

    A locally built base (the tiny model) is copied in; a Hub base is recorded by id and revision
    and loaded from the Hub (or the HF cache) at load time.
    """
    settings = {
        "system_prompt": system_prompt,
        "system_role": system_role,
        "max_new_tokens": max_new_tokens,
        "batch_size": batch_size,
        "trust_remote_code": trust_remote_code,
        "base": {"source": base.source, "revision": base.revision, "built_locally": base.built_locally},
    }
    with tempfile.TemporaryDirectory(prefix="forge-model-") as tmp:
        work = Path(tmp)
        (work / SETTINGS_FILE).write_text(json.dumps(settings, indent=2), encoding="utf-8")
        (work / "model_code.py").write_text(MODEL_CODE, encoding="utf-8")
        artifacts = {"adapter": str(adapter_dir), "settings": str(work / SETTINGS_FILE)}
        if base.built_locally:
            artifacts["base"] = base.source
        mlflow.pyfunc.save_model(
            str(path),
            python_model=str(work / "model_code.py"),
            artifacts=artifacts,
            pip_requirements=_pip_requirements(),
        )
    return Path(path)


def _missing(exc: Exception) -> bool:
    return getattr(exc, "error_code", "") == "RESOURCE_DOES_NOT_EXIST"


@dataclass
class ModelFiles:
    """A downloaded registry version: the pyfunc model dir, its adapter, its base (when copied in)."""

    root: Path
    adapter: Path
    base: Path | None  # None: a Hub base, see settings["base"]
    settings: dict[str, Any]
    version: Any

    def base_ref(self) -> BaseModelRef:
        from forge_ml.models.loader import BaseModelRef

        if self.base is not None:
            return BaseModelRef(str(self.base), None, True)
        base = self.settings["base"]
        return BaseModelRef(base["source"], base.get("revision"), False)


class Registry:
    """The project's registered model: register candidates, read the champion, run the gate."""

    def __init__(self, cfg: RegistryConfig, client: Any, model_name: str) -> None:
        self.cfg = cfg
        self.client = client
        self.name = model_name

    @classmethod
    def for_project(cls, cfg: ForgeConfig, project: Project) -> Registry:
        """Return the registry of the project (`registry.model_name`, default the project name)."""
        from forge_ml.tracking import client_for

        return cls(cfg.registry, client_for(cfg, project), cfg.registry.model_name or cfg.name)

    def uri(self, alias: str = CHAMPION) -> str:
        return f"models:/{self.name}@{alias}"

    def version_of_run(self, run_id: str) -> Any | None:
        """Return the (first) version registered from run `run_id`, or None."""
        found = [v for v in self.client.search_model_versions(f"run_id = '{run_id}'") if v.name == self.name]
        return min(found, key=lambda v: int(v.version)) if found else None

    def register(
        self,
        run_id: str,
        *,
        adapter_dir: Path,
        base: BaseModelRef,
        system_prompt: str,
        system_role: bool,
        max_new_tokens: int,
        outcome: GoldOutcome,
        tags: dict[str, Any] | None = None,
        batch_size: int = 32,
    ) -> Any:
        """Register the adapter of run `run_id` as a new version (alias `challenger`); return it.

        Idempotent per run: a version already registered from `run_id` is returned untouched.
        """
        existing = self.version_of_run(run_id)
        if existing is not None:
            return existing
        if not self._logged(run_id):
            with tempfile.TemporaryDirectory(prefix="forge-register-") as tmp:
                model_dir = save_adapter_model(
                    Path(tmp) / ARTIFACT_PATH,
                    adapter_dir=adapter_dir,
                    base=base,
                    system_prompt=system_prompt,
                    system_role=system_role,
                    max_new_tokens=max_new_tokens,
                    batch_size=batch_size,
                )
                self._log_model(run_id, model_dir)
        self._ensure_registered_model()
        version_tags = {k: str(v) for k, v in (tags or {}).items() if v is not None} | outcome.to_tags()
        version = self.client.create_model_version(
            self.name, f"runs:/{run_id}/{ARTIFACT_PATH}", run_id=run_id, tags=version_tags
        )
        self.client.set_registered_model_alias(self.name, CHALLENGER, version.version)
        if self.cfg.stages:
            self._transition(version.version, "Staging")
        return self.client.get_model_version(self.name, version.version)

    def champion(self) -> tuple[Any, GoldOutcome] | None:
        """Return the champion version and its gold outcome, or None before the first promotion."""
        from mlflow.exceptions import MlflowException

        try:  # a missing alias is INVALID_PARAMETER_VALUE on some stores: read the model's aliases instead
            number = self.client.get_registered_model(self.name).aliases.get(CHAMPION)
        except MlflowException as exc:
            if _missing(exc):
                return None
            raise
        if number is None:
            return None
        version = self.client.get_model_version(self.name, str(number))
        return version, GoldOutcome.from_tags(version.tags)

    def check_gold(self, gold_hash: str) -> None:
        """Raise ConfigError when the champion was measured on another gold set than `gold_hash`."""
        current = self.champion()
        if current is not None and current[1].gold_hash != gold_hash:
            version, outcome = current
            raise ConfigError(
                f"the gold set changed: champion {self.name} v{version.version} was measured on gold "
                f"{outcome.gold_hash[:12]}, the project's gold is now {gold_hash[:12]}; its accuracy is not "
                f"comparable. Re-baseline the champion on the new gold set with `{REBASELINE}`"
            )

    def champion_number(self) -> str | None:
        """The version `champion` points at, or None (read from the aliases: its tags may be incomplete)."""
        from mlflow.exceptions import MlflowException

        try:
            number = self.client.get_registered_model(self.name).aliases.get(CHAMPION)
        except MlflowException:
            return None
        return None if number is None else str(number)

    def force_promote(self, number: str, tags: dict[str, str]) -> None:
        """Record `tags` on version `number`, then make it the champion (stage Production when `stages`)."""
        for key, value in tags.items():  # tags first: the alias never points at an undocumented version
            self.client.set_model_version_tag(self.name, number, key, value)
        if self.cfg.stages:
            self._transition(number, "Production", archive_existing=True)
        self.client.set_registered_model_alias(self.name, CHAMPION, number)

    def gate(self, version: Any, outcome: GoldOutcome, gate_cfg: GateConfig) -> GateDecision:
        """Decide on `version` against the champion, record the decision as tags, promote when it passes."""
        number = str(getattr(version, "version", version))
        current = self.champion()
        if current is not None and str(current[0].version) == number:
            return GateDecision(True, [f"v{number} is already the champion"], compared_to=number)
        decision = decide(outcome, current[1] if current else None, gate_cfg)
        decision.compared_to = str(current[0].version) if current else None
        p = decision.p_value
        record = {
            "forge.gate.decision": "promoted" if decision.promote else "refused",
            "forge.gate.reasons": "; ".join(decision.reasons),
            "forge.gate.p_value": "none" if p is None else f"{p:.6g}",
            "forge.gate.compared_to": decision.compared_to or "none",
        }
        for key, value in record.items():  # tags first: an alias never points at an undocumented version
            self.client.set_model_version_tag(self.name, number, key, value)
        if decision.promote:
            if self.cfg.stages:
                self._transition(number, "Production", archive_existing=True)
            self.client.set_registered_model_alias(self.name, CHAMPION, number)
        return decision

    def version(self, ref: str | int | None = None, *, alias: str | None = None) -> Any:
        """Return the version `ref` (a number) or the one `alias` points at; InputError (exit 1) when unknown."""
        from mlflow.exceptions import MlflowException

        from forge_ml.errors import InputError

        try:
            if ref is not None:
                return self.client.get_model_version(self.name, str(ref))
            return self.client.get_model_version_by_alias(self.name, alias or CHAMPION)
        except MlflowException:
            what = f"version {ref}" if ref is not None else f"alias @{alias or CHAMPION}"
            raise InputError(f"registered model {self.name!r} has no {what}") from None

    def download(self, version: Any, dest: Path) -> ModelFiles:
        """Download the MLflow model of `version` into `dest`; return where its parts lie."""
        found = self.client.get_model_version(self.name, str(getattr(version, "version", version)))
        import yaml

        root = Path(self.client.download_artifacts(found.run_id, ARTIFACT_PATH, str(dest)))
        meta = yaml.safe_load((root / "MLmodel").read_text(encoding="utf-8"))
        paths = {k: root / v["path"] for k, v in meta["flavors"]["python_function"]["artifacts"].items()}
        return ModelFiles(
            root=root,
            adapter=paths["adapter"],
            base=paths.get("base"),
            settings=json.loads(paths["settings"].read_text(encoding="utf-8")),
            version=found,
        )

    def load(self, version: Any) -> Any:
        """Return the pyfunc model of `version`, read through this registry's client (not the global URI)."""
        found = self.client.get_model_version(self.name, str(getattr(version, "version", version)))
        with tempfile.TemporaryDirectory(prefix="forge-load-") as tmp:  # loaded into memory: tmp can go
            return mlflow.pyfunc.load_model(self.client.download_artifacts(found.run_id, ARTIFACT_PATH, tmp))

    def rebaseline(self, version: Any, outcome: GoldOutcome, *, previous: GoldOutcome | None = None) -> None:
        """Record `outcome`, re-measured on the current gold set, as the gold outcome of `version`."""
        number = str(getattr(version, "version", version))
        tags = outcome.to_tags()
        if previous is not None:
            tags["forge.rebaseline.previous_gold_hash"] = previous.gold_hash
            tags["forge.rebaseline.previous_gold_accuracy"] = repr(float(previous.accuracy))
        gold_hash = tags.pop("forge.gold_hash")  # written last: a crash midway leaves the old hash
        for key, value in [*tags.items(), ("forge.gold_hash", gold_hash)]:
            self.client.set_model_version_tag(self.name, number, key, value)

    def _logged(self, run_id: str) -> bool:
        """Whether run `run_id` holds a complete model (MLmodel is uploaded last, see _log_model)."""
        return any(
            a.path == f"{ARTIFACT_PATH}/MLmodel" for a in self.client.list_artifacts(run_id, ARTIFACT_PATH)
        )

    def _log_model(self, run_id: str, model_dir: Path) -> None:
        for entry in sorted(model_dir.iterdir()):
            if entry.is_dir():
                self.client.log_artifacts(run_id, str(entry), f"{ARTIFACT_PATH}/{entry.name}")
            elif entry.name != "MLmodel":
                self.client.log_artifact(run_id, str(entry), ARTIFACT_PATH)
        self.client.log_artifact(run_id, str(model_dir / "MLmodel"), ARTIFACT_PATH)

    def _ensure_registered_model(self) -> None:
        from mlflow.exceptions import MlflowException

        try:
            self.client.create_registered_model(self.name)
        except MlflowException as exc:
            if getattr(exc, "error_code", "") != "RESOURCE_ALREADY_EXISTS":
                raise

    def _transition(self, number: str, stage: str, *, archive_existing: bool = False) -> None:
        with warnings.catch_warnings():  # stages are deprecated in MLflow; used only when asked for
            warnings.simplefilter("ignore", FutureWarning)
            self.client.transition_model_version_stage(
                self.name, number, stage, archive_existing_versions=archive_existing
            )
