"""Whether `eval.max_new_tokens` leaves room for the answers the outputs are scored against.

Generation stops after `max_new_tokens`: an expected answer longer than that can never be given
whole, and the built-in scorers (which compare whole answers, or need a JSON document to close)
score its output 0 whatever the model learned. Checked on the tokenizer the model answers with.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from forge_ml.config import EvalConfig
from forge_ml.data.examples import Example
from forge_ml.errors import ConfigError

log = logging.getLogger(__name__)

ROUND_UP = 16  # a suggested limit is a multiple of this
MARGIN = 1.25  # and this much above the longest answer, for answers longer than gold's


@dataclass(frozen=True)
class AnswerRoom:
    """The token lengths of the expected answers against `eval.max_new_tokens`."""

    limit: int
    lengths: tuple[int, ...]

    @property
    def over(self) -> int:
        """Answers longer than the limit: their outputs are cut before they end."""
        return sum(1 for n in self.lengths if n > self.limit)

    @property
    def longest(self) -> int:
        return max(self.lengths, default=0)

    @property
    def ceiling(self) -> float:
        """The best accuracy a whole-answer scorer can give: the share of answers that fit."""
        return 1.0 - self.over / len(self.lengths) if self.lengths else 1.0

    @property
    def suggested(self) -> int:
        """A limit with room for every answer, and a margin."""
        wanted = int(self.longest * MARGIN) + 1
        return -(-wanted // ROUND_UP) * ROUND_UP

    def describe(self, label: str) -> str:
        return (
            f"eval.max_new_tokens={self.limit} is shorter than {self.over} of the {len(self.lengths)} {label} "
            f"answers (up to {self.longest} tokens with this model's tokenizer): generation stops before "
            f"they end, so {label} accuracy cannot pass {self.ceiling:.2f}"
        )


def answer_room(tokenizer: Any, examples: Sequence[Example], limit: int) -> AnswerRoom:
    """The token length of each example's expected answer (as the model would write it), against `limit`."""
    answers = [ex.assistant.strip() for ex in examples]
    encoded = tokenizer(answers, add_special_tokens=False)["input_ids"] if answers else []
    return AnswerRoom(limit, tuple(len(ids) for ids in encoded))


def check_answer_room(
    tokenizer: Any, gold: Sequence[Example], cfg: EvalConfig, *, refuse: bool
) -> AnswerRoom:
    """Warn when gold answers are longer than `eval.max_new_tokens`. With `refuse` (a round, a
    flywheel: hours of trials gated on gold), raise ConfigError instead when so many are that
    `eval.target_accuracy` is out of reach, unless a custom scorer (which may give a cut answer
    credit) scores them."""
    room = answer_room(tokenizer, gold, cfg.max_new_tokens)
    if not room.over:
        return room
    fix = f"set eval.max_new_tokens={room.suggested} (under eval: in forge.yaml, or on the command line)"
    if refuse and cfg.scorer != "custom" and room.ceiling < cfg.target_accuracy:
        raise ConfigError(
            f"{room.describe('gold')} (eval.target_accuracy={cfg.target_accuracy:g}; eval.scorer={cfg.scorer} "
            f"scores a cut answer 0); {fix}"
        )
    warning = f"{room.describe('gold')}; {fix}"
    if warning not in _warned:  # a flywheel checks before its first round and in every round
        _warned.add(warning)
        log.warning("%s", warning)
    return room


_warned: set[str] = set()  # the warnings this process has given: each once
