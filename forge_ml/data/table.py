"""Canonical's examples as a cached Arrow table: parsed once, appended to as the file grows.

The first read of `canonical.jsonl` streams it line by line (errors name file:line, as
`read_examples` does), drops repeated user texts (the first is kept), and writes what is left
to an Arrow IPC file under `output/cache/examples/`, a batch at a time, so memory follows the
batch size and a few fixed-size digests per example, not the file. Later reads map that file
instead of parsing: when canonical is unchanged they hash it and are done; when it has grown
by appended lines (what `generate` and the seed merge do), only the new lines are parsed.
Any other change (an edit, a rewrite by `audit`/`clean`) is a cold read.

Besides the texts the table keeps per row: `key` (digest of the normalised user text: dedup,
gold overlap), `rank` (the seeded digest the dev split sorts by), `content` (digest of the user
and assistant text: what tokenisation depends on) and `record` (digest of the whole record,
meta included: the split's content hash).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from forge_ml.data.examples import BLANK, Example, decode_line, parse_record, record_digest
from forge_ml.fileio import atomic_write_json, file_hasher, remove_orphans, writer_gone, writer_tag
from forge_ml.progress import Stage

log = logging.getLogger(__name__)

TABLE_FORMAT = 1  # bump when the columns or their digests change
BATCH_ROWS = 8192
MANIFEST = "manifest.json"
KEY_BYTES, CONTENT_BYTES = 16, 16


def schema() -> Any:
    import pyarrow as pa

    return pa.schema(
        [
            ("user", pa.string()),
            ("assistant", pa.string()),
            ("meta", pa.string()),  # JSON with sorted keys; "" when the line has none
            ("category", pa.string()),  # meta.category, null without one
            ("source", pa.string()),  # meta.source (generate, augment, seed, ...), null without one
            ("line", pa.int64()),
            ("key", pa.binary(KEY_BYTES)),
            ("rank", pa.binary(32)),
            ("content", pa.binary(CONTENT_BYTES)),
            ("record", pa.binary(32)),
        ]
    )


@dataclass(frozen=True)
class TableManifest:
    """What the cached table `file` holds: the first `size` bytes of `path` (`lines` lines), hashing to `sha256`."""

    format: int
    file: str
    path: str
    size: int
    sha256: str
    lines: int
    rows: int
    dropped: int  # repeated user texts left out
    split_seed: int


def key_digest(key: str) -> bytes:
    return hashlib.blake2b(key.encode("utf-8"), digest_size=KEY_BYTES).digest()


def rank_digest(split_seed: int, key: str) -> bytes:
    """The dev split's sort key: the same seeded sha256 of the normalised user text it has always used."""
    return hashlib.sha256(f"{split_seed}\x00{key}".encode()).digest()


def content_digest(user: str, assistant: str) -> bytes:
    return hashlib.blake2b(f"{user}\x00{assistant}".encode(), digest_size=CONTENT_BYTES).digest()


def meta_json(meta: dict[str, Any]) -> str:
    return json.dumps(meta, sort_keys=True, ensure_ascii=False) if meta else ""


@dataclass
class Rows:
    """Column buffers for one Arrow batch."""

    user: list[str]
    assistant: list[str]
    meta: list[str]
    category: list[str | None]
    source: list[str | None]
    line: list[int]
    key: list[bytes]
    rank: list[bytes]
    content: list[bytes]
    record: list[bytes]

    @classmethod
    def empty(cls) -> Rows:
        return cls([], [], [], [], [], [], [], [], [], [])

    def add(self, example: Example, line: int, key: bytes, split_seed: int) -> None:
        self.user.append(example.user)
        self.assistant.append(example.assistant)
        self.meta.append(meta_json(example.meta))
        self.category.append(example.category)
        source = example.meta.get("source")
        self.source.append(None if source is None else str(source))
        self.line.append(line)
        self.key.append(key)
        self.rank.append(rank_digest(split_seed, example.key))
        self.content.append(content_digest(example.user, example.assistant))
        self.record.append(record_digest(example))

    def __len__(self) -> int:
        return len(self.user)

    def batch(self) -> Any:
        import pyarrow as pa

        return pa.record_batch([getattr(self, name) for name in schema().names], schema=schema())


def ends_a_line(path: Path, size: int) -> bool:
    """Whether byte `size` of `path` starts a line: lines appended after it leave the first `size` bytes whole."""
    if size == 0:
        return True
    with path.open("rb") as fh:
        fh.seek(size - 1)
        return fh.read(1) == b"\n"


class ExampleTable:
    """Canonical's deduplicated examples, memory-mapped from the project's cache."""

    def __init__(self, table: Any, manifest: TableManifest, source: Path) -> None:
        self.table = table
        self.manifest = manifest
        self.source = source

    def __len__(self) -> int:
        return self.table.num_rows

    def column(self, name: str) -> Any:
        return self.table.column(name)

    def examples(self, rows: Any = None) -> list[Example]:
        return table_examples(self.table, self.source, rows)

    def digest(self) -> str:
        """The version hash of the file (`examples.version_hash`), from the cached record digests."""
        import numpy as np

        return rows_hash(self.table, np.arange(self.table.num_rows))


def rows_hash(rows: Any, indices: Any) -> str:
    """sha256 over the record digests of `rows` at `indices`, in that order."""
    import numpy as np

    return hashlib.sha256(digests(rows, "record")[np.asarray(indices, dtype=np.int64)].tobytes()).hexdigest()


def digests(rows: Any, name: str) -> Any:
    """A fixed-size binary column (`key`, `rank`, `content`, `record`) as a numpy array of bytes, without copies."""
    import numpy as np

    column = rows.column(name).combine_chunks()
    width = column.type.byte_width
    return np.frombuffer(
        column.buffers()[1], dtype=f"S{width}", count=len(column), offset=column.offset * width
    )


def table_examples(table: Any, source: Path, rows: Any = None) -> list[Example]:
    """A table's rows (all, or those at the given indices) as Examples; rows read from `source` name their line."""
    if rows is not None:
        import numpy as np

        table = table.take(np.asarray(rows, dtype=np.int64))  # typed: an empty list alone reads as nulls
    users, answers = table.column("user").to_pylist(), table.column("assistant").to_pylist()
    metas, lines = table.column("meta").to_pylist(), table.column("line").to_pylist()
    return [
        Example(u, a, json.loads(m) if m else {}, origin=f"{source}:{n}" if n else "")
        for u, a, m, n in zip(users, answers, metas, lines)
    ]


class KnownKeys:
    """Normalised user texts, held as their 16-byte key digests (a table's `key` column and what is added)."""

    def __init__(self, digests: list[bytes]) -> None:
        self._digests = set(digests)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key_digest(key) in self._digests

    def add(self, key: str) -> None:
        self._digests.add(key_digest(key))

    def __len__(self) -> int:
        return len(self._digests)


def cache_dir(output: Path, path: Path) -> Path:
    """Where the table of the JSONL file `path` is cached: one folder per file."""
    tag = hashlib.sha256(str(path).encode()).hexdigest()[:12]
    return output / "cache" / "examples" / f"{path.stem}-{tag}"


def load_table(canonical: Path, output: Path, *, split_seed: int) -> ExampleTable:
    """Return canonical's examples, parsing only the lines the cache does not hold yet."""
    folder = cache_dir(output, canonical)
    if not canonical.is_file():
        empty = TableManifest(
            TABLE_FORMAT, "", str(canonical), 0, hashlib.sha256().hexdigest(), 0, 0, 0, split_seed
        )
        return ExampleTable(schema().empty_table(), empty, canonical)
    size = canonical.stat().st_size
    cached = _read_cached(folder)
    if cached is not None:
        table, manifest = cached
        usable = (
            manifest.path == str(canonical) and manifest.split_seed == split_seed and manifest.size <= size
        )
        prefix = (
            file_hasher(canonical, manifest.size)
            if usable and ends_a_line(canonical, manifest.size)
            else None
        )
        if prefix is not None and prefix.hexdigest() == manifest.sha256:
            if manifest.size == size:
                return ExampleTable(table, manifest, canonical)
            return _write(canonical, folder, size, split_seed, prefix, base=(table, manifest))
        log.info("%s changed other than by appended lines: reading it whole", canonical)
    return _write(canonical, folder, size, split_seed, hashlib.sha256(), base=None)


def _read_cached(folder: Path) -> tuple[Any, TableManifest] | None:
    """The cached table and its manifest, or None when there is none or it cannot be used."""
    import pyarrow as pa

    try:
        manifest = TableManifest(**json.loads((folder / MANIFEST).read_text(encoding="utf-8")))
        if manifest.format != TABLE_FORMAT:
            return None
        table = _open(folder / manifest.file)
    except (OSError, TypeError, ValueError, pa.ArrowException):
        return None
    if table.schema != schema() or table.num_rows != manifest.rows:
        return None
    return table, manifest


def _open(path: Path) -> Any:
    """The table in an Arrow IPC file, memory-mapped."""
    import pyarrow as pa

    # the map is not closed here: the table's buffers point into it, and it lives as long as they do
    table = pa.ipc.open_file(pa.memory_map(str(path))).read_all()
    if table.num_rows == 0:  # no batches at all: compute kernels want at least an empty one
        table = schema().empty_table()
    return table


def _write(
    canonical: Path,
    folder: Path,
    size: int,
    split_seed: int,
    hasher: Any,
    *,
    base: tuple[Any, TableManifest] | None,
) -> ExampleTable:
    """Write a new table file (`base`'s rows, then those parsed from canonical after them) and point the
    manifest at it. `hasher` holds the sha256 of the bytes `base` was read from; the parse feeds it the rest."""
    import pyarrow as pa

    folder.mkdir(parents=True, exist_ok=True)
    name = f"canonical.{writer_tag()}.{os.urandom(4).hex()}.arrow"
    start, last_line, rows, dropped, known = 0, 0, 0, 0, set()
    try:
        with pa.ipc.new_file(str(folder / name), schema()) as sink:
            if base is not None:
                table, old = base
                for batch in table.to_batches(max_chunksize=BATCH_ROWS):
                    sink.write_batch(batch)
                known = set(table.column("key").to_pylist())
                start, last_line, rows, dropped = old.size, old.lines, old.rows, old.dropped
            what = f"reading {canonical.name}" + (" (appended lines)" if base is not None else "")
            with Stage(what, unit="lines") as stage:
                parsed = _parse(canonical, start, last_line, size, known, split_seed, stage, hasher)
                for batch, last_line, batch_dropped in parsed:  # noqa: B007 - the last batch's is the file's
                    if batch.num_rows:
                        sink.write_batch(batch)
                    rows, dropped = rows + batch.num_rows, dropped + batch_dropped
        manifest = TableManifest(
            TABLE_FORMAT,
            name,
            str(canonical),
            size,
            hasher.hexdigest(),
            last_line,
            rows,
            dropped,
            split_seed,
        )
        atomic_write_json(folder / MANIFEST, asdict(manifest))
    except BaseException:
        (folder / name).unlink(missing_ok=True)
        raise
    _remove_stale(folder, keep=name)
    return ExampleTable(_open(folder / name), manifest, canonical)


def _remove_stale(folder: Path, keep: str) -> None:
    """Delete the table files the manifest no longer names: this process's own, and those of writers that are gone.

    A reader that has a deleted file mapped keeps reading it (POSIX); one that has not opened it
    yet finds it missing and reads canonical again. A live writer's file is left alone.
    """
    remove_orphans(folder / MANIFEST)
    mine = writer_tag()
    for path in folder.glob("canonical.*.arrow"):
        tag = path.name.split(".")[1]
        if path.name != keep and (tag == mine or writer_gone(tag)):
            path.unlink(missing_ok=True)


def _parse(
    path: Path, start: int, line: int, end: int, known: set[bytes], split_seed: int, stage: Stage, hasher: Any
) -> Iterator[tuple[Any, int, int]]:
    """Yield (batch, last line number read, repeats dropped in it) over the lines of `path` in bytes
    [start, end), feeding every byte read to `hasher` (the file is read once)."""
    rows, dropped, done = Rows.empty(), 0, start
    with path.open("rb") as fh:
        fh.seek(start)
        for raw in fh:
            if done >= end:
                break
            done += len(raw)
            hasher.update(raw)
            line += 1
            where = f"{path}:{line}"
            record = decode_line(raw, where, first=line == 1)
            if record is BLANK:
                continue
            example = parse_record(record, where)
            key = key_digest(example.key)
            if key in known:
                dropped += 1
                continue
            known.add(key)
            rows.add(example, line, key, split_seed)
            if len(rows) >= BATCH_ROWS:
                stage.advance(len(rows) + dropped)
                yield rows.batch(), line, dropped
                rows, dropped = Rows.empty(), 0
    stage.advance(len(rows) + dropped)
    yield rows.batch(), line, dropped
