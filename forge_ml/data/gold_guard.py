"""Keep gold text out of what a data writer reads.

The planner reads gold failures (inputs, expected and actual answers) to decide where data is
missing, and what it learnt goes into BACKGROUND.md, which the writer of examples (Claude's
`write_examples`, its reviewer) reads in full. A note that quotes a gold input would carry the
locked gold set into the training data by way of the writer's prompt, where the exact-match check
on written examples cannot see a paraphrase. `GoldGuard.withhold` cuts such quotes out of a text.

A quote is matched on words (case, punctuation and spacing aside): a gold text of at least
`WHOLE_MIN_WORDS` words quoted whole, or any `RUN_WORDS` consecutive words of a longer one.
Gold answers count as well, except those a seed example also answers (a label, a common form),
which are no secret.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from forge_ml.data.examples import Example

WHOLE_MIN_WORDS = 3  # a shorter gold text ("hello", "fix") is too common to withhold
RUN_WORDS = 8  # consecutive words of a longer gold text that make a quote
WITHHELD = "[gold text withheld]"

_WORD = re.compile(r"\w+")


def _words(text: str) -> tuple[str, ...]:
    return tuple(w.casefold() for w in _WORD.findall(text))


@dataclass(frozen=True)
class GoldGuard:
    """The word sequences of the gold set that a writer's prompt must not contain."""

    whole: frozenset[tuple[str, ...]]  # gold texts of WHOLE_MIN_WORDS..RUN_WORDS-1 words
    # the hash of every RUN_WORDS-word run of the longer ones: long answers make many runs, and a
    # hash takes a fraction of a tuple's memory (a guard is used in the process that built it)
    runs: frozenset[int]

    @classmethod
    def of(cls, gold: Iterable[Example], seed: Iterable[Example] = ()) -> GoldGuard:
        public = {_words(e.assistant) for e in seed}
        texts = []
        for example in gold:
            texts.append(_words(example.user))
            answer = _words(example.assistant)
            if answer not in public:
                texts.append(answer)
        whole = {t for t in texts if WHOLE_MIN_WORDS <= len(t) < RUN_WORDS}
        runs = {
            hash(t[i : i + RUN_WORDS])
            for t in texts
            if len(t) >= RUN_WORDS
            for i in range(len(t) - RUN_WORDS + 1)
        }
        return cls(frozenset(whole), frozenset(runs))

    def withhold(self, text: str) -> tuple[str, int]:
        """`text` with every gold quote replaced by WITHHELD, and how many quotes there were."""
        if not self.whole and not self.runs:
            return text, 0
        matches = list(_WORD.finditer(text))
        words = [m.group().casefold() for m in matches]
        lengths = [*sorted({len(t) for t in self.whole}), RUN_WORDS]
        spans: list[tuple[int, int]] = []  # word index ranges [start, end)
        for start in range(len(words)):
            for length in lengths:
                piece = tuple(words[start : start + length])
                if len(piece) == length and (piece in self.whole or hash(piece) in self.runs):
                    spans.append((start, start + length))
        if not spans:
            return text, 0
        merged: list[list[int]] = []
        for start, end in sorted(spans):
            if merged and start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])
        out, at = [], 0
        for start, end in merged:
            out.append(text[at : matches[start].start()])
            out.append(WITHHELD)
            at = matches[end - 1].end()
        out.append(text[at:])
        return "".join(out), len(merged)
