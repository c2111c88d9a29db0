"""The MLflow pyfunc model of an adapter: what a registry version's source is.

`mlflow.pyfunc.load_model(...).predict(["..."])` loads the base model and the LoRA adapter and
answers like evaluation (same prompt rendering, greedy batched generation). The saved model is
models-from-code: its `model_code.py` imports `AdapterModel` (`MODEL_CODE`), so nothing is pickled.
Versions saved before this module existed import it from `forge_ml.registry`, which re-exports it.
"""

from __future__ import annotations

import json
import tempfile
import warnings
from importlib.metadata import version as installed_version
from pathlib import Path
from typing import TYPE_CHECKING, Any

import mlflow.pyfunc

if TYPE_CHECKING:
    from forge_ml.models.loader import BaseModelRef

SETTINGS_FILE = "forge_model.json"
# models-from-code: the saved model re-creates AdapterModel by import instead of unpickling an object
MODEL_CODE = (
    "import mlflow\nfrom forge_ml.models.pyfunc import AdapterModel\n\n"
    "mlflow.models.set_model(AdapterModel())\n"
)


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
