"""Assemble a project's datasets: seed merged into canonical, dedup, gold guard, dev split."""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from forge_ml.config import TaskConfig
from forge_ml.data.examples import Example, dataset_hash, read_examples
from forge_ml.data.gold_guard import GoldGuard
from forge_ml.data.table import (
    KEY_BYTES,
    ExampleTable,
    Rows,
    key_digest,
    load_table,
    rows_hash,
    table_examples,
)
from forge_ml.errors import InputError
from forge_ml.fileio import atomic_write_jsonl
from forge_ml.project import PLACEHOLDER_SYSTEM_PROMPT, Project, ProjectLock, read_utf8

log = logging.getLogger(__name__)
MAX_OFFENDERS_SHOWN = 5
_warned: set[tuple[Path, int]] = set()  # (canonical, duplicates) already reported by this process
_placeholder_warned: set[Path] = set()  # system prompts reported as init's placeholder
TOKENIZER_TEXT_EXAMPLES = 20_000  # training examples the tiny model's tokenizer learns from, at most


@dataclass
class ProjectData:
    """The project's data for one run: canonical (+ seed) as an Arrow table, its dev split, and gold.

    `rows` is canonical's cached table with the seed's new examples after it; `train_rows` and
    `dev_rows` index it in file order. `train` and `dev` give the rows as Examples (dev is
    bounded by `task.dev_max`; `train` materialises the whole set, so the training path reads
    `rows` instead).
    """

    system_prompt: str
    rows: Any  # pyarrow.Table with table.schema()
    train_rows: Any  # numpy int64 indices into rows
    dev_rows: Any
    gold: list[Example]
    duplicates_dropped: int
    seed_merged: int  # seed examples new to canonical (written by the load, or by merge_seed)
    source: Path = Path()
    unwritten_seed: list[Example] = field(default_factory=list)  # load_project_data(write_seed=False)

    @property
    def train_size(self) -> int:
        return len(self.train_rows)

    @functools.cached_property
    def train(self) -> list[Example]:
        return self._examples(self.train_rows)

    @functools.cached_property
    def dev(self) -> list[Example]:
        return self._examples(self.dev_rows)

    def _examples(self, indices: Any) -> list[Example]:
        return table_examples(self.rows, self.source, indices)

    @functools.cached_property
    def hashes(self) -> dict[str, str]:
        """Content hashes: train and dev over their rows' record digests (order-sensitive, meta
        included), gold with `dataset_hash` (the registry compares it across versions)."""
        return {
            "train": rows_hash(self.rows, self.train_rows),
            "dev": rows_hash(self.rows, self.dev_rows),
            "gold": dataset_hash(self.gold),
        }

    def frame(self, split: Literal["train", "dev", "all"]) -> Any:
        """The split as a pandas DataFrame (user, assistant, category), for MLflow's dataset inputs."""
        rows = {"train": self.train_rows, "dev": self.dev_rows, "all": None}[split]
        table = self.rows if rows is None else self.rows.take(rows)
        return table.select(["user", "assistant", "category"]).to_pandas()

    def training_text(self, *, limit: int | None = TOKENIZER_TEXT_EXAMPLES) -> list[str]:
        """Text a locally built tokenizer may learn from, never gold: the system prompt and the first
        `limit` examples of canonical in file order (train and dev; all of them with None).

        Appending examples never changes the first `limit`, so past that size the tiny model, its
        tokenizer and the token cache stay as they are while canonical grows.
        """
        table = self.rows if limit is None else self.rows.slice(0, limit)
        texts = [self.system_prompt]
        for user, answer in zip(table.column("user").to_pylist(), table.column("assistant").to_pylist()):
            texts.extend((user, answer))
        return texts


def read_system_prompt(project: Project, task: TaskConfig) -> str:
    path = project.resolve(task.system_prompt)
    if not path.is_file():
        raise InputError(f"{path}: system prompt file not found (task.system_prompt)")
    text = read_utf8(path).strip()
    if not text:
        raise InputError(f"{path}: system prompt is empty")
    if text == PLACEHOLDER_SYSTEM_PROMPT and path not in _placeholder_warned:
        _placeholder_warned.add(path)
        log.warning(
            "%s is still `forge-ml init`'s placeholder: the model is trained and served without being"
            " told the task: write in a sentence or two what it must do and what it answers with",
            path,
        )
    return text


def read_gold(project: Project, task: TaskConfig) -> list[Example]:
    path = project.resolve(task.gold_path)
    gold = read_examples(path)
    if not gold:
        raise InputError(f"{path}: the gold set is empty; add held-out examples to evaluate on")
    return gold


def writer_guard(project: Project, task: TaskConfig) -> GoldGuard:
    """What a data writer's prompt must not quote: the gold set (answers a seed example shares aside)."""
    seed = read_examples(project.resolve(task.seed_path), required=False)
    return GoldGuard.of(read_gold(project, task), seed)


def check_gold_overlap(examples: list[Example], gold: list[Example]) -> None:
    """Refuse training data whose user text matches a gold input."""
    gold_keys = {ex.key for ex in gold}
    refuse_gold_matches([ex for ex in examples if ex.key in gold_keys])


def check_rows_against_gold(rows: Any, source: Path, seed: list[Example], gold: list[Example]) -> None:
    """`check_gold_overlap` for canonical's cached rows (by their key digests, in Arrow) and the seed."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    gold_keys = {key_digest(ex.key) for ex in gold}
    hits = pc.is_in(rows.column("key"), value_set=pa.array(list(gold_keys), type=pa.binary(KEY_BYTES)))
    # (numpy: pyarrow 25's indices_nonzero crashes on a chunked array with no chunks)
    offenders = table_examples(rows, source, np.flatnonzero(hits.to_numpy(zero_copy_only=False)))
    refuse_gold_matches(offenders + [ex for ex in seed if key_digest(ex.key) in gold_keys])


def refuse_gold_matches(offenders: list[Example]) -> None:
    if offenders:
        shown = "\n  ".join(f"{ex.origin}: {ex.user[:80]!r}" for ex in offenders[:MAX_OFFENDERS_SHOWN])
        raise InputError(
            f"{len(offenders)} training example(s) match gold inputs; gold never enters training. "
            f"Remove them or move them out of gold:\n  {shown}"
        )


def dev_size(n: int, *, fraction: float, dev_min: int, dev_max: int) -> int:
    """Rows of the dev split for `n` rows (at least 2, which `load_project_data` checks first)."""
    return min(max(round(n * fraction), dev_min), dev_max, n - 1)


def split_rows(rows: Any, task: TaskConfig) -> tuple[Any, Any]:
    """Return (train, dev) row indices in file order: dev holds the rows ranked lowest by a seeded
    hash of their user text, so an example's side never changes as canonical grows (only the dev
    set's size, by `task.dev_fraction`, can move one)."""
    import numpy as np
    import pyarrow.compute as pc

    n = rows.num_rows
    size = dev_size(n, fraction=task.dev_fraction, dev_min=task.dev_min, dev_max=task.dev_max)
    dev = np.sort(pc.bottom_k_unstable(rows.column("rank"), k=size).to_numpy())
    train = np.setdiff1d(np.arange(n, dtype=np.int64), dev, assume_unique=True)
    return train, dev


def load_project_data(project: Project, task: TaskConfig, *, write_seed: bool = True) -> ProjectData:
    """Return the project's train/dev/gold data, merging seed into canonical on first use.

    Canonical comes from its Arrow cache (`table.load_table`: parsed once, then only what is
    appended). With `write_seed=False` the seed's new examples are in the data but not yet in
    canonical's file: a caller that checks more before it commits to a run (the tokenised
    lengths) then calls `merge_seed`, so a refused run leaves the project as it was.
    """
    import pyarrow as pa

    system_prompt = read_system_prompt(project, task)
    gold = read_gold(project, task)
    canonical_path = project.resolve(task.canonical_path)
    canonical = load_table(canonical_path, project.output, split_seed=task.split_seed)
    seed = read_examples(project.resolve(task.seed_path), required=False)
    check_rows_against_gold(canonical.table, canonical_path, seed, gold)

    new_seed, seed_rows, seed_dropped = _new_seed(canonical, seed, task.split_seed)
    rows = pa.concat_tables([canonical.table, pa.Table.from_batches([seed_rows.batch()])])
    dropped = canonical.manifest.dropped + seed_dropped
    if dropped and (canonical_path, dropped) not in _warned:  # once per process, not at every load
        _warned.add((canonical_path, dropped))
        log.warning(
            "%s: dropped %d duplicate example(s) (same normalised user text)", canonical_path, dropped
        )
    if rows.num_rows == 0:
        raise InputError(f"{canonical_path}: no training examples; add lines to the seed or canonical set")
    if rows.num_rows < 2:
        raise InputError(
            f"{canonical_path}: {rows.num_rows} training example(s) with seed merged; "
            "at least 2 are needed (one for the dev split)"
        )
    train, dev = split_rows(rows, task)
    data = ProjectData(
        system_prompt=system_prompt,
        rows=rows,
        train_rows=train,
        dev_rows=dev,
        gold=gold,
        duplicates_dropped=dropped,
        seed_merged=len(new_seed),
        source=canonical_path,
        unwritten_seed=new_seed,
    )
    if write_seed:  # written only once the data is known to be usable: a refused run changes nothing
        merge_seed(project, task, data)
    return data


def _new_seed(
    canonical: ExampleTable, seed: list[Example], split_seed: int
) -> tuple[list[Example], Rows, int]:
    """The seed's examples new to canonical (first of each user text), as Examples and rows; and the repeats left out."""
    import pyarrow as pa
    import pyarrow.compute as pc

    keys = [key_digest(ex.key) for ex in seed]
    in_canonical = pc.is_in(
        pa.array(keys, type=pa.binary(KEY_BYTES)), value_set=canonical.column("key").combine_chunks()
    ).to_pylist()
    new_seed, rows, seen, dropped = [], Rows.empty(), set(), 0
    for ex, key, known in zip(seed, keys, in_canonical):
        if known:
            continue
        if key in seen:
            dropped += 1
            continue
        seen.add(key)
        ex.meta.setdefault("source", "seed")
        new_seed.append(ex)
        rows.add(ex, 0, key, split_seed)
    return new_seed, rows, dropped


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
