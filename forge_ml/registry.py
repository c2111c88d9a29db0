"""The MLflow model registry; the only module that writes to the registry.

A version's source is a loadable MLflow pyfunc model of the adapter (`runs:/<run_id>/model`, see
forge_ml/models/pyfunc.py): `mlflow.pyfunc.load_model("models:/<name>@champion").predict(["..."])`
answers like evaluation. Aliases: `challenger` = the latest registered candidate, `champion` = the
last that passed the gate (forge_ml/gate.py). The gold outcome a version was measured with, and the
gate's decision, are version tags.
"""

from __future__ import annotations

import json
import tempfile
import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import mlflow.pyfunc

from forge_ml.config.registry import GateConfig, RegistryConfig
from forge_ml.errors import ConfigError

# Re-exported: registered versions' model_code.py (saved before forge_ml/models/pyfunc.py existed)
# runs `from forge_ml.registry import AdapterModel`, and callers import the gate's names from here.
from forge_ml.gate import (
    EPS,
    REBASELINE,
    GateDecision,
    GoldOutcome,
    decide,
    describe_gate,
    mcnemar_exact,
    version_origin,
    version_summary,
)
from forge_ml.models.pyfunc import (
    MODEL_CODE,
    SETTINGS_FILE,
    AdapterModel,
    _pip_requirements,
    _prompts,
    save_adapter_model,
)

if TYPE_CHECKING:
    from forge_ml.config import ForgeConfig
    from forge_ml.models.loader import BaseModelRef
    from forge_ml.project import Project

__all__ = [
    "ARTIFACT_PATH",
    "CHALLENGER",
    "CHAMPION",
    "EPS",
    "MODEL_CODE",
    "REBASELINE",
    "SETTINGS_FILE",
    "AdapterModel",
    "GateDecision",
    "GoldOutcome",
    "ModelFiles",
    "Registry",
    "_pip_requirements",
    "_prompts",
    "decide",
    "mcnemar_exact",
    "save_adapter_model",
]

CHALLENGER, CHAMPION = "challenger", "champion"
ARTIFACT_PATH = "model"


def model_description(
    task: str, *, gold: str, gold_total: int, gold_hash: str, scorer: str, gate: str
) -> str:
    """The registered model's description: the task, the metric the gate reads, and the gate's rule."""
    return (
        f"{task.strip()}\n\n"
        f"**Gold metric:** accuracy on the locked gold set `{gold}` ({gold_total} examples, hash "
        f"{gold_hash[:12]}), scorer `{scorer}`.\n\n"
        f"**Gate:** {gate}.\n\n"
        f"**Aliases:** `{CHAMPION}` is the version that passed the gate last (serve `models:/<name>@{CHAMPION}`); "
        f"`{CHALLENGER}` is the latest candidate. Each version's description says how the gate decided."
    )


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
            recorded = BaseModelRef.from_dict(self.settings["base"])
            return BaseModelRef(str(self.base), None, True, recorded.provenance)
        return replace(BaseModelRef.from_dict(self.settings["base"]), built_locally=False)


@dataclass
class Champion:
    """The version the `champion` alias points at, and the gold outcome recorded on it."""

    version: Any  # mlflow.entities.model_registry.ModelVersion
    outcome: GoldOutcome

    @property
    def number(self) -> str:
        return str(self.version.version)

    @property
    def accuracy(self) -> float:
        return self.outcome.accuracy


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

    def versions_based_on(self, directory: Path) -> list[str]:
        """The numbers of the versions whose base is the local directory `directory`."""
        from forge_ml.models.provenance import TAG_PREFIX

        want = Path(directory).resolve()
        versions = self.client.search_model_versions(f"name = '{self.name}'")
        return sorted(
            (
                str(v.version)
                for v in versions
                if (v.tags or {}).get(TAG_PREFIX + "kind") == "local"
                and (v.tags or {}).get(TAG_PREFIX + "name")
                and Path(v.tags[TAG_PREFIX + "name"]).resolve() == want
            ),
            key=int,
        )

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
        if base.provenance is not None:
            version_tags |= base.provenance.tags()
        version = self.client.create_model_version(
            self.name, f"runs:/{run_id}/{ARTIFACT_PATH}", run_id=run_id, tags=version_tags
        )
        self.client.set_registered_model_alias(self.name, CHALLENGER, version.version)
        if self.cfg.stages:
            self._transition(version.version, "Staging")
        return self.client.get_model_version(self.name, version.version)

    def register_trained(
        self,
        cfg: ForgeConfig,
        run_id: str,
        *,
        adapter_dir: Path,
        base: BaseModelRef,
        system_prompt: str,
        outcome: GoldOutcome,
        tags: dict[str, Any],
        mission: str,
    ) -> Any:
        """`register` an adapter trained under `cfg`, served as it was evaluated: the model's system
        role, and the generation length and batch of `cfg.eval` (a flywheel round, `train --register`).
        The registered model's description says what it is for (`mission`), how gold scores it and
        the gate's rule."""
        self.describe(
            model_description(
                mission,
                gold=cfg.task.gold_path,
                gold_total=outcome.total,
                gold_hash=outcome.gold_hash,
                scorer=cfg.eval.scorer,
                gate=describe_gate(cfg.registry.gate),
            )
        )
        return self.register(
            run_id,
            adapter_dir=adapter_dir,
            base=base,
            system_prompt=system_prompt,
            system_role=cfg.model.system_role,
            max_new_tokens=cfg.eval.max_new_tokens,
            batch_size=cfg.eval.batch_size,
            outcome=outcome,
            tags=tags,
        )

    def champion(self) -> Champion | None:
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
        return Champion(version, GoldOutcome.from_tags(version.tags))

    def check_gold(self, gold_hash: str, scoring: str) -> None:
        """Raise ConfigError when the champion was measured on another gold set than `gold_hash`, or
        scored under another rule than `scoring` (evaluation.scorers.scoring_rule)."""
        current = self.champion()
        if current is None:
            return
        version, outcome = current.version, current.outcome
        if outcome.gold_hash != gold_hash:
            raise ConfigError(
                f"the gold set changed: champion {self.name} v{version.version} was measured on gold "
                f"{outcome.gold_hash[:12]}, the project's gold is now {gold_hash[:12]}; its accuracy is not "
                f"comparable. Re-baseline the champion on the new gold set with `{REBASELINE}`"
            )
        if outcome.scoring and outcome.scoring != scoring:  # "": recorded before the rule was kept
            raise ConfigError(
                f"the scoring changed: champion {self.name} v{version.version} was scored by "
                f"{outcome.scoring}, the project's eval now scores by {scoring}; its accuracy is not "
                f"comparable. Re-baseline the champion under the current scorer with `{REBASELINE}`"
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
        known = dict(self.client.get_model_version(self.name, number).tags or {})
        head = version_origin(known.get("forge.round"))
        forced = f"forced to champion by {tags.get('forge.force.user', '?')}, gate skipped: {tags.get('forge.force.reason', '')}"
        self.client.update_model_version(
            self.name,
            number,
            description=f"{head} — {forced}" + self._round_link(known.get("forge.round_run_id")),
        )
        if self.cfg.stages:
            self._transition(number, "Production", archive_existing=True)
        self.client.set_registered_model_alias(self.name, CHAMPION, number)

    def gate(self, version: Any, outcome: GoldOutcome, gate_cfg: GateConfig) -> GateDecision:
        """Decide on `version` against the champion, record the decision as tags, promote when it passes."""
        number = str(getattr(version, "version", version))
        current = self.champion()
        if current is not None and current.number == number:
            return GateDecision(True, [f"v{number} is already the champion"], compared_to=number)
        decision = decide(outcome, current.outcome if current else None, gate_cfg)
        decision.compared_to = current.number if current else None
        tags = dict(self.client.get_model_version(self.name, number).tags or {})
        summary = version_summary(
            tags.get("forge.round"),
            outcome,
            current.outcome if current else None,
            decision.compared_to,
            decision,
        )
        p = decision.p_value
        record = {
            "forge.gate.decision": "promoted" if decision.promote else "refused",
            "forge.gate.reasons": "; ".join(decision.reasons),
            "forge.gate.p_value": "none" if p is None else f"{p:.6g}",
            "forge.gate.compared_to": decision.compared_to or "none",
        }
        for key, value in record.items():  # tags first: an alias never points at an undocumented version
            self.client.set_model_version_tag(self.name, number, key, value)
        self.client.update_model_version(
            self.name, number, description=summary + self._round_link(tags.get("forge.round_run_id"))
        )
        if decision.promote:
            if self.cfg.stages:
                self._transition(number, "Production", archive_existing=True)
            self.client.set_registered_model_alias(self.name, CHAMPION, number)
        return decision

    def describe(self, text: str) -> None:
        """Set the registered model's description (its page in the MLflow UI) when it differs."""
        self._ensure_registered_model()
        if (self.client.get_registered_model(self.name).description or "") != text:
            self.client.update_registered_model(self.name, description=text)

    def _round_link(self, round_run_id: str | None) -> str:
        """A second description line linking the round's run (the version's source is its best trial)."""
        run = self.find_run(round_run_id) if round_run_id else None
        if run is None:
            return ""
        where = f"#/experiments/{run.info.experiment_id}/runs/{round_run_id}"
        return f"\n\n[round run {run.info.run_name or round_run_id}]({where}) · source run: the round's best trial"

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
            raise InputError(f"registered model {self.name!r} has no {what}{self._what_it_has()}") from None

    def _what_it_has(self) -> str:
        """For an error about a missing version or alias: the aliases there are, or how to register one."""
        from mlflow.exceptions import MlflowException

        try:
            aliases = self.client.get_registered_model(self.name).aliases
            count = len(self.client.search_model_versions(f"name = '{self.name}'"))
        except MlflowException:
            aliases, count = {}, 0
        if count == 0:
            return (
                ": nothing is registered yet (`forge-ml flywheel` registers each round's best adapter, "
                "`forge-ml train --register` one run)"
            )
        named = ", ".join(f"@{name} = v{number}" for name, number in sorted(aliases.items())) or "no aliases"
        return f" ({count} version(s); {named})"

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

    def find_run(self, run_id: str) -> Any | None:
        """Return the MLflow run `run_id`, or None when it no longer exists (deleted since)."""
        from mlflow.exceptions import MlflowException

        try:
            return self.client.get_run(run_id)
        except MlflowException:
            return None

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
            if previous.scoring:
                tags["forge.rebaseline.previous_gold_scoring"] = previous.scoring
        # the rule and the gold hash written last: a crash midway leaves the old ones, which the
        # project's gold set and scorer no longer match, so the next command asks for a re-baseline again
        gold_hash = tags.pop("forge.gold_hash")
        scoring = (
            [("forge.gold_scoring", tags.pop("forge.gold_scoring"))] if "forge.gold_scoring" in tags else []
        )
        for key, value in [*tags.items(), *scoring, ("forge.gold_hash", gold_hash)]:
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
