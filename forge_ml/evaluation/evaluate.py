"""Evaluate a model on a list of examples: generate in batches, score, report."""

from __future__ import annotations

from typing import Any

from forge_ml.config import EvalConfig
from forge_ml.data.examples import Example
from forge_ml.evaluation.report import EvalReport, score_outputs
from forge_ml.evaluation.scorers import Scorer
from forge_ml.models.generation import complete_batched, render_prompt
from forge_ml.progress import Stage


def evaluate_examples(
    model: Any,
    tokenizer: Any,
    examples: list[Example],
    *,
    system_prompt: str,
    system_role: bool,
    cfg: EvalConfig,
    scorer: Scorer,
    label: str,
) -> EvalReport:
    """Return the eval report of `model` on `examples` (greedy decoding, left-padded batches)."""
    prompts = [render_prompt(tokenizer, system_prompt, ex.user, system_role=system_role) for ex in examples]
    with Stage(f"generating ({label})", unit="examples", total=len(prompts)) as stage:
        completions = complete_batched(
            model,
            tokenizer,
            prompts,
            batch_size=cfg.batch_size,
            max_new_tokens=cfg.max_new_tokens,
            on_batch=stage.advance,
        )
    outputs = [c.text for c in completions]
    return score_outputs(examples, outputs, scorer, cfg, ended=[c.ended for c in completions])
