"""Assemble a project's datasets: seed merged into canonical, dedup, gold guard, dev split."""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from pathlib import Path

from forge_ml.config import TaskConfig
from forge_ml.data.examples import Example, dataset_hash, read_examples
from forge_ml.errors import InputError
from forge_ml.fileio import atomic_write_jsonl
from forge_ml.project import Project, ProjectLock, read_utf8

log = logging.getLogger(__name__)
MAX_OFFENDERS_SHOWN = 5


@dataclass
class ProjectData:
    system_prompt: str
    train: list[Example]
    dev: list[Example]
    gold: list[Example]
    duplicates_dropped: int
    seed_merged: int  # seed examples new to canonical (written by the load, or by merge_seed)
    unwritten_seed: list[Example] = field(default_factory=list)  # load_project_data(write_seed=False)

    @property
    def hashes(self) -> dict[str, str]:
        return {
            "train": dataset_hash(self.train),
            "dev": dataset_hash(self.dev),
            "gold": dataset_hash(self.gold),
        }

    def training_text(self) -> list[str]:
        """Text a locally built tokenizer may learn from: never gold."""
        texts = [self.system_prompt]
        for ex in self.train + self.dev:
            texts.extend((ex.user, ex.assistant))
        return texts


def read_system_prompt(project: Project, task: TaskConfig) -> str:
    path = project.resolve(task.system_prompt)
    if not path.is_file():
        raise InputError(f"{path}: system prompt file not found (task.system_prompt)")
    text = read_utf8(path).strip()
    if not text:
        raise InputError(f"{path}: system prompt is empty")
    return text


def read_gold(project: Project, task: TaskConfig) -> list[Example]:
    path = project.resolve(task.gold_path)
    gold = read_examples(path)
    if not gold:
        raise InputError(f"{path}: the gold set is empty; add held-out examples to evaluate on")
    return gold


def check_gold_overlap(examples: list[Example], gold: list[Example]) -> None:
    """Refuse training data whose user text matches a gold input."""
    gold_keys = {ex.key for ex in gold}
    offenders = [ex for ex in examples if ex.key in gold_keys]
    if offenders:
        shown = "\n  ".join(f"{ex.origin}: {ex.user[:80]!r}" for ex in offenders[:MAX_OFFENDERS_SHOWN])
        raise InputError(
            f"{len(offenders)} training example(s) match gold inputs; gold never enters training. "
            f"Remove them or move them out of gold:\n  {shown}"
        )


def dedup(examples: list[Example]) -> tuple[list[Example], int]:
    """Return examples with the first of each normalised user text kept, and the count dropped."""
    seen: set[str] = set()
    kept = []
    for ex in examples:
        if ex.key not in seen:
            seen.add(ex.key)
            kept.append(ex)
    return kept, len(examples) - len(kept)


def split_dev(
    examples: list[Example], *, fraction: float, dev_min: int, dev_max: int, seed: int
) -> tuple[list[Example], list[Example]]:
    """Return (train, dev): dev holds the examples ranked lowest by a seeded hash of their user text.

    The rank of an example never changes as canonical grows, so the dev split is stable
    across rounds; both lists keep the file order.
    """
    if len(examples) < 2:
        raise InputError(
            f"{len(examples)} training example(s): at least 2 are needed (one for the dev split)"
        )
    size = min(max(round(len(examples) * fraction), dev_min), dev_max, len(examples) - 1)

    def rank(ex: Example) -> str:
        return hashlib.sha256(f"{seed}\x00{ex.key}".encode()).hexdigest()

    dev_keys = {ex.key for ex in sorted(examples, key=rank)[:size]}
    train = [ex for ex in examples if ex.key not in dev_keys]
    dev = [ex for ex in examples if ex.key in dev_keys]
    return train, dev


def load_project_data(project: Project, task: TaskConfig, *, write_seed: bool = True) -> ProjectData:
    """Return the project's train/dev/gold data, merging seed into canonical on first use.

    With `write_seed=False` the seed's new examples are in the data but not yet in canonical's file:
    a caller that checks more before it commits to a run (the tokenised lengths) then calls
    `merge_seed`, so a refused run leaves the project as it was.
    """
    system_prompt = read_system_prompt(project, task)
    gold = read_gold(project, task)
    canonical_path = project.resolve(task.canonical_path)
    canonical = read_examples(canonical_path, required=False)
    seed = read_examples(project.resolve(task.seed_path), required=False)
    check_gold_overlap(canonical + seed, gold)

    known = {ex.key for ex in canonical}
    new_seed = [ex for ex in seed if ex.key not in known]
    for ex in new_seed:
        ex.meta.setdefault("source", "seed")
    merged = canonical + new_seed

    examples, dropped = dedup(merged)
    if dropped:
        log.warning(
            "%s: dropped %d duplicate example(s) (same normalised user text)", canonical_path, dropped
        )
    if not examples:
        raise InputError(f"{canonical_path}: no training examples; add lines to the seed or canonical set")
    if len(examples) < 2:
        raise InputError(
            f"{canonical_path}: {len(examples)} training example(s) with seed merged; "
            "at least 2 are needed (one for the dev split)"
        )
    train, dev = split_dev(
        examples, fraction=task.dev_fraction, dev_min=task.dev_min, dev_max=task.dev_max, seed=task.split_seed
    )
    data = ProjectData(
        system_prompt=system_prompt,
        train=train,
        dev=dev,
        gold=gold,
        duplicates_dropped=dropped,
        seed_merged=len(new_seed),
        unwritten_seed=new_seed,
    )
    if write_seed:  # written only once the data is known to be usable: a refused run changes nothing
        merge_seed(project, task, data)
    return data


def merge_seed(project: Project, task: TaskConfig, data: ProjectData) -> None:
    """Write the seed's new examples of `data` into canonical (once; a no-op when there are none)."""
    if data.unwritten_seed:
        _merge_seed(project, project.resolve(task.canonical_path), data.unwritten_seed)
        data.unwritten_seed = []


def _merge_seed(project: Project, canonical_path: Path, new_seed: list[Example]) -> None:
    """Append the seed's new examples to canonical under the project lock, re-reading canonical there
    (a `generate` may have grown it since it was read)."""
    with ProjectLock(project, "seed merge"):
        current = read_examples(canonical_path, required=False)
        known = {ex.key for ex in current}
        missing = [ex for ex in new_seed if ex.key not in known]
        if missing:
            atomic_write_jsonl(canonical_path, (ex.to_record() for ex in current + missing))
            log.info("merged %d seed example(s) into %s", len(missing), canonical_path)
