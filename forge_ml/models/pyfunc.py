"""The MLflow pyfunc model of an adapter: what a registry version's source is.

`mlflow.pyfunc.load_model(...).predict(["..."])` loads the base model and the LoRA adapter and
answers like evaluation (same prompt rendering, greedy batched generation). The model is
self-contained: this file and `generation.py` travel with it (`code_paths`, as the package
`forge_adapter_model`), they import nothing else of forge_ml, and its requirements are the
libraries they use, so `mlflow models serve` and any environment built from the model's own
requirements load it. A base that is a local directory travels as an artifact; a Hub base is named
by id and revision. The signature is one unnamed string column (so `predict(["..."])` passes MLflow's
schema check; a DataFrame's `prompt` column is read when it has one); the answers are strings.

Versions saved before the code travelled import `AdapterModel` from `forge_ml.models.pyfunc` or
`forge_ml.registry` (which re-exports it): they still load where forge-ml is installed.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.metadata import version as installed_version
from pathlib import Path
from typing import TYPE_CHECKING, Any

import mlflow.pyfunc

from . import generation  # relative: the same line imports the copy inside a saved model

if TYPE_CHECKING:
    from forge_ml.models.loader import BaseModelRef

SETTINGS_FILE = "forge_model.json"
SHIPPED_PACKAGE = "forge_adapter_model"  # the name this file and generation.py travel under
SHIPPED_FILES = ("pyfunc.py", "generation.py")
EXAMPLE_PROMPT = "take off to 30 m"
PROMPT_COLUMN = "prompt"  # the column read from a DataFrame (else its first column)
# models-from-code: the saved model re-creates AdapterModel by import instead of unpickling an object
MODEL_CODE = f"import mlflow\nfrom {SHIPPED_PACKAGE}.pyfunc import AdapterModel\n\nmlflow.models.set_model(AdapterModel())\n"
REQUIREMENTS = ("torch", "transformers", "peft", "accelerate", "pandas")


def _pip_requirements() -> list[str]:
    """Pinned requirements of the model's code (local version labels like +cpu dropped), so MLflow infers none."""
    return [f"{name}=={installed_version(name).split('+')[0]}" for name in REQUIREMENTS]


def _prompts(model_input: Any) -> list[str]:
    """Return the prompts of a string, a list, an array, a Series, a mapping or a DataFrame (prompt/input/first column).

    These are every form MLflow's scoring server hands over (`inputs`, `instances`,
    `dataframe_split`, `dataframe_records`) and what a caller of `predict` passes by hand.
    """
    import numpy as np
    import pandas as pd

    if isinstance(model_input, str):
        return [model_input]
    if isinstance(model_input, dict):
        model_input = pd.DataFrame(
            model_input if not isinstance(model_input.get(PROMPT_COLUMN), str) else [model_input]
        )
    if isinstance(model_input, np.ndarray):
        model_input = pd.DataFrame(model_input) if model_input.ndim == 2 else model_input.reshape(-1).tolist()
    if isinstance(model_input, pd.DataFrame):
        if model_input.shape[1] == 0:
            raise ValueError("predict: the DataFrame has no columns")
        column = next(
            (c for c in (PROMPT_COLUMN, "input") if c in model_input.columns), model_input.columns[0]
        )
        model_input = model_input[column]
    if isinstance(model_input, (list, tuple, pd.Series)):
        return [str(x) for x in model_input]
    raise TypeError(
        f"predict: expected a string, a list of strings or a DataFrame with a '{PROMPT_COLUMN}' column, "
        f"got {type(model_input).__name__}"
    )


# predict takes a str, a list or a DataFrame on purpose (MLflow's type-hint validation would reject a
# str), so defining it warns "Add type hints"; record=True swallows that one warning (a plain filter
# cannot: MLflow resets the filters around its check).
with warnings.catch_warnings(record=True):

    class AdapterModel(mlflow.pyfunc.PythonModel):
        """A LoRA adapter on its base model; predict(prompts) returns greedy answers, rendered as in eval."""

        def load_context(self, context: Any) -> None:
            import torch
            from peft import PeftModel
            from transformers import AutoModelForCausalLM, AutoTokenizer

            self.settings = json.loads(Path(context.artifacts["settings"]).read_text(encoding="utf-8"))
            base = self.settings["base"]
            local_base = context.artifacts.get("base")
            adapter = Path(context.artifacts["adapter"])
            kwargs: dict[str, Any] = {
                "dtype": generation.auto_dtype(),
                "trust_remote_code": self.settings["trust_remote_code"],
                **generation.NO_HUB_KERNELS,
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
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", **generation.PEFT_ALIAS_WARNING)
                self.model = PeftModel.from_pretrained(model, str(adapter), is_trainable=False)

        def predict(self, context, model_input, params=None):
            s = self.settings
            prompts = [
                generation.render_prompt(self.tokenizer, s["system_prompt"], p, system_role=s["system_role"])
                for p in _prompts(model_input)
            ]
            return generation.generate_batched(
                self.model,
                self.tokenizer,
                prompts,
                batch_size=s["batch_size"],
                max_new_tokens=s["max_new_tokens"],
            )


@contextmanager
def _importable(folder: Path, package: str) -> Iterator[None]:
    """Make `package` in `folder` importable for the block; forget its modules afterwards."""
    sys.path.insert(0, str(folder))
    try:
        yield
    finally:
        sys.path.remove(str(folder))
        for name in [m for m in sys.modules if m == package or m.startswith(package + ".")]:
            del sys.modules[name]


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
    """Write the self-contained MLflow pyfunc model of an adapter to `path` (which must not exist); return `path`.

    A base in a local directory (the tiny model, a converted or pretrained copy) is copied in; a Hub
    base is recorded by id and revision and loaded from the Hub (or the HF cache) at load time.
    """
    from mlflow.models import ModelSignature
    from mlflow.types.schema import ColSpec, Schema

    settings = {
        "system_prompt": system_prompt,
        "system_role": system_role,
        "max_new_tokens": max_new_tokens,
        "batch_size": batch_size,
        "trust_remote_code": trust_remote_code,
        "base": base.to_dict(),
    }
    with tempfile.TemporaryDirectory(prefix="forge-model-") as tmp:
        work = Path(tmp)
        (work / SETTINGS_FILE).write_text(json.dumps(settings, indent=2), encoding="utf-8")
        (work / "model_code.py").write_text(MODEL_CODE, encoding="utf-8")
        shipped = work / SHIPPED_PACKAGE
        shipped.mkdir()
        (shipped / "__init__.py").write_text(
            '"""forge-ml\'s adapter model, as saved with this MLflow model."""\n'
        )
        for name in SHIPPED_FILES:
            shutil.copy(Path(__file__).with_name(name), shipped / name)
        artifacts = {"adapter": str(adapter_dir), "settings": str(work / SETTINGS_FILE)}
        if Path(base.source).is_dir():
            artifacts["base"] = base.source
        with _importable(work, SHIPPED_PACKAGE):  # MLflow runs model_code.py while saving
            mlflow.pyfunc.save_model(
                str(path),
                python_model=str(work / "model_code.py"),
                artifacts=artifacts,
                code_paths=[str(shipped)],
                pip_requirements=_pip_requirements(),
                signature=ModelSignature(
                    inputs=Schema([ColSpec("string")]), outputs=Schema([ColSpec("string")])
                ),
                input_example=[EXAMPLE_PROMPT],
            )
    return Path(path)
