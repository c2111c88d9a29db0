"""Scorers: each returns a score in [0, 1] for (expected, actual)."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from forge_ml.config import EvalConfig
from forge_ml.errors import InputError, describe
from forge_ml.project import load_project_function

Scorer = Callable[[str, str], float]


def parse_json(text: str) -> Any:
    """Return the JSON value in `text` (first object if there is trailing text), or raise ValueError."""
    text = text.strip()
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        start = text.find("{")
        if start < 0:
            raise ValueError("no JSON object") from None
        value, _ = json.JSONDecoder().raw_decode(text[start:])
        return value


def exact(expected: str, actual: str) -> float:
    return float(expected.strip() == actual.strip())


def json_match(expected: str, actual: str) -> float:
    try:
        return float(parse_json(expected) == parse_json(actual))
    except ValueError:
        return 0.0


def json_field(field: str) -> Scorer:
    def score(expected: str, actual: str) -> float:
        try:
            want, got = parse_json(expected), parse_json(actual)
        except ValueError:
            return 0.0
        if not isinstance(want, dict) or not isinstance(got, dict):
            return 0.0
        return float(field in got and got.get(field) == want.get(field))

    return score


def load_custom_scorer(path: Path) -> Scorer:
    """Return `score` from the project's scorer.py, checked to be callable."""
    if not path.is_file():
        raise InputError(
            f"{path}: eval.scorer=custom needs this file defining score(expected, actual) -> float"
        )
    fn = load_project_function(path, "score", "score(expected, actual) -> float")

    def score(expected: str, actual: str) -> float:
        try:
            value = float(fn(expected, actual))
        except Exception as exc:
            raise InputError(f"{path}: score() raised {describe(exc)}") from exc
        if math.isnan(value) or not 0.0 <= value <= 1.0:
            raise InputError(f"{path}: score() returned {value!r}; scores must lie in [0, 1]")
        return value

    return score


def make_scorer(cfg: EvalConfig, project_root: Path, *, probe: list[Any] | None = None) -> Scorer:
    """Return the scorer that `eval.scorer` names.

    With `probe` (examples, e.g. gold), a custom scorer is first tried on the first one's answer
    against itself: a scorer.py that raises or scores outside [0, 1] is the user's code to fix
    (InputError, exit 1) and fails here, naming the file, before any training or writing.
    """
    if cfg.scorer == "exact":
        return exact
    if cfg.scorer == "json_match":
        return json_match
    if cfg.scorer == "json_cmd":
        return json_field(cfg.json_field)
    path = Path(cfg.scorer_path)
    scorer = load_custom_scorer(path if path.is_absolute() else project_root / path)
    if probe:
        scorer(probe[0].assistant, probe[0].assistant)
    return scorer


def scoring_rule(cfg: EvalConfig, project_root: Path) -> str:
    """What a gold score means, in one line: the scorer (a json_cmd's field, a custom scorer.py's
    sha256) and the forbidden-output patterns. Two gold outcomes compare only under the same rule:
    a partial-credit scorer.py scores the same answers higher than `exact` does."""
    if cfg.scorer == "json_cmd":
        rule = f"json_cmd (field {cfg.json_field})"
    elif cfg.scorer == "custom":
        path = Path(cfg.scorer_path)
        path = path if path.is_absolute() else project_root / path
        digest = hashlib.sha256(path.read_bytes()).hexdigest()[:12] if path.is_file() else "missing"
        rule = f"custom ({path.name} sha256 {digest})"
    else:
        rule = cfg.scorer
    if cfg.forbidden_outputs:
        patterns = json.dumps(sorted(cfg.forbidden_outputs)).encode("utf-8")
        rule += f", forbidden outputs {hashlib.sha256(patterns).hexdigest()[:12]}"
    return rule


def category_of(example_meta: dict[str, Any], expected: str, cfg: EvalConfig) -> str:
    """Return an example's category: meta.category, else the json_field of the expected output."""
    if example_meta.get("category") is not None:
        return str(example_meta["category"])
    try:
        value = parse_json(expected)
    except ValueError:
        return "uncategorized"
    if isinstance(value, dict) and cfg.json_field in value:
        return str(value[cfg.json_field])
    return "uncategorized"
