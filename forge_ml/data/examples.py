"""Chat examples in JSONL: reading with line-precise errors, normalising, hashing."""

from __future__ import annotations

import hashlib
import json
import re
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forge_ml.errors import InputError
from forge_ml.project import BOM, UTF16_HINT, UTF16_MARKS

ROLES = ("user", "assistant")
MAX_LINE_BYTES = 1_000_000
PROGRESS_EVERY = 4096  # lines read between progress updates
BLANK = object()  # what `decode_line` returns for a line with nothing on it


@dataclass
class Example:
    """One training or eval example: a user turn, the expected assistant turn, and metadata."""

    user: str
    assistant: str
    meta: dict[str, Any] = field(default_factory=dict)
    origin: str = field(default="", compare=False, repr=False)  # "file:line" it was read from

    @property
    def category(self) -> str | None:
        value = self.meta.get("category")
        return str(value) if value is not None else None

    @property
    def key(self) -> str:
        """The identity used for dedup and gold-overlap checks."""
        return normalize_text(self.user)

    def to_record(self) -> dict[str, Any]:
        record: dict[str, Any] = {
            "messages": [
                {"role": "user", "content": self.user},
                {"role": "assistant", "content": self.assistant},
            ]
        }
        if self.meta:
            record["meta"] = self.meta
        return record


_SPACE = re.compile(r"\s+")
_EDGE = string.punctuation + string.whitespace


def normalize_text(text: str) -> str:
    """Lower-case, collapse whitespace, strip punctuation at both ends."""
    return _SPACE.sub(" ", text.lower()).strip(_EDGE)


def _turns(messages: Any, where: str, field: str) -> dict[str, str]:
    """The user and assistant turns of a list of {role, content} objects (each at most once)."""
    if not isinstance(messages, list) or not messages:
        raise InputError(f"{where}: '{field}' must be a non-empty list of {{role, content}} objects")
    turns: dict[str, str] = {}
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("content"), str):
            raise InputError(f"{where}: {field}[{i}] must be an object with a string 'content'")
        role = message.get("role")
        if role == "system":
            raise InputError(
                f"{where}: {field}[{i}] is a system turn; the system prompt comes from system_prompt.md"
            )
        if role not in ROLES:
            raise InputError(f"{where}: {field}[{i}] has role {role!r}; expected user or assistant")
        if role in turns:
            raise InputError(f"{where}: more than one {role} turn; one user and one assistant turn per line")
        turns[role] = message["content"]
    return turns


def _prompt_completion(prompt: Any, completion: Any, where: str) -> dict[str, str]:
    """The turns of TRL's prompt-completion record: two strings, or two lists of turns."""
    if isinstance(prompt, str) and isinstance(completion, str):
        return {"user": prompt, "assistant": completion}
    if isinstance(prompt, list) and isinstance(completion, list):
        asked, answered = _turns(prompt, where, "prompt"), _turns(completion, where, "completion")
        if "assistant" in asked:
            raise InputError(f"{where}: 'prompt' holds an assistant turn; the answer goes in 'completion'")
        if "user" in answered:
            raise InputError(f"{where}: 'completion' holds a user turn; it must be the assistant's answer")
        return asked | answered
    raise InputError(
        f"{where}: 'prompt' and 'completion' must both be strings, or both lists of {{role, content}} "
        f"objects (got {type(prompt).__name__} and {type(completion).__name__})"
    )


FORMATS = (
    "expected one of the Hugging Face/TRL formats: "
    '{"messages": [{"role": "user", "content": ...}, {"role": "assistant", "content": ...}]}, '
    '{"prompt": "...", "completion": "..."}, or prompt and completion as lists of such turns'
)


def parse_record(record: Any, where: str) -> Example:
    """Return the Example in one decoded JSONL record; raise InputError naming `where`.

    A record is a conversation (`messages`: one user turn and one assistant turn) or TRL's
    prompt-completion pair: two strings (the user turn and the answer), or two lists of turns
    (the user's, then the assistant's). The system prompt is never a line's: it is system_prompt.md.
    """
    if not isinstance(record, dict):
        raise InputError(f"{where}: expected a JSON object, got {type(record).__name__}")
    shapes = [key for key in ("messages", "prompt", "completion") if key in record]
    if not shapes:
        keys = ", ".join(repr(key) for key in list(record)[:6]) or "none"
        raise InputError(f"{where}: {FORMATS}; this line has the keys {keys}")
    if "messages" in record:
        if len(shapes) > 1:
            raise InputError(f"{where}: both 'messages' and 'prompt'/'completion': use one format per line")
        turns = _turns(record["messages"], where, "messages")
    else:
        turns = _prompt_completion(record.get("prompt"), record.get("completion"), where)
    for role in ROLES:
        if role not in turns:
            raise InputError(f"{where}: no {role} turn")
        if not turns[role].strip():
            raise InputError(f"{where}: the {role} turn is empty")
    meta = record.get("meta", {})
    if not isinstance(meta, dict):
        raise InputError(f"{where}: 'meta' must be an object")
    category = meta.get("category")
    if category is not None and not (isinstance(category, str) and safe_category(category)):
        raise InputError(
            f"{where}: meta.category {category!r} cannot name a metric: use letters, digits (any script), "
            f"space and _ . : - (up to 64 characters, starting with a letter or digit), "
            f"e.g. {metric_name(str(category))!r}"
        )
    return Example(user=turns["user"], assistant=turns["assistant"], meta=meta, origin=where)


def decode_line(raw: bytes, where: str, *, first: bool = False) -> Any:
    """Return the JSON record on one raw line (`BLANK` for a blank line); InputError names `where`.

    `first`: the file's first line, where a UTF-16 byte-order mark names the file's encoding.
    """
    if len(raw) > MAX_LINE_BYTES:
        raise InputError(f"{where}: line is {len(raw)} bytes, over the {MAX_LINE_BYTES} byte limit")
    if first and raw.startswith(UTF16_MARKS):
        raise InputError(f"{where}: {UTF16_HINT}")
    try:
        line = raw.decode("utf-8").removeprefix(BOM)
    except UnicodeDecodeError as exc:
        raise InputError(f"{where}: not valid UTF-8 ({exc.reason} at byte {exc.start})") from None
    if not line.strip():
        return BLANK
    try:
        return json.loads(line.rstrip("\r\n"))
    except json.JSONDecodeError as exc:
        msg = exc.msg.removesuffix(" at")  # "Unterminated string starting at" names no place itself
        raise InputError(f"{where}: not valid JSON ({msg} at column {exc.colno})") from None


def read_jsonl(path: Path) -> list[tuple[str, Any]]:
    """Return the decoded lines of a JSONL file as ("file:line", record); InputError names the bad line."""
    from forge_ml.progress import Stage

    records, number = [], 0
    with path.open("rb") as fh, Stage(f"reading {path.name}", unit="lines") as stage:
        for number, raw in enumerate(fh, start=1):
            where = f"{path}:{number}"
            record = decode_line(raw, where, first=number == 1)
            if record is not BLANK:
                records.append((where, record))
            if number % PROGRESS_EVERY == 0:
                stage.advance(PROGRESS_EVERY)
        stage.advance(number % PROGRESS_EVERY)
    return records


def read_examples(path: Path, *, required: bool = True) -> list[Example]:
    """Return every example in a JSONL file; a bad line raises InputError with file:line."""
    if not path.is_file():
        if required:
            raise InputError(f"{path}: file not found")
        return []
    return [parse_record(record, where) for where, record in read_jsonl(path)]


def dataset_hash(examples: list[Example]) -> str:
    """Return the sha256 content hash of a dataset (order-sensitive, meta included)."""
    h = hashlib.sha256()
    for ex in examples:
        h.update(json.dumps(ex.to_record(), sort_keys=True, ensure_ascii=False).encode("utf-8"))
        h.update(b"\n")
    return h.hexdigest()


def record_digest(example: Example) -> bytes:
    """sha256 of the example's record as `dataset_hash` serialises it (sorted keys, meta included)."""
    text = json.dumps(example.to_record(), sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).digest()


def version_hash(examples: list[Example]) -> str:
    """The content hash of a training-data version: sha256 over the record digests of its distinct
    examples (the first of each normalised user text), in order.

    It equals `ExampleTable.digest()` of the file the examples were read from, which computes it
    from the cached table without reading the file again.
    """
    seen: set[str] = set()
    h = hashlib.sha256()
    for ex in examples:
        if ex.key not in seen:
            seen.add(ex.key)
            h.update(record_digest(ex))
    return h.hexdigest()


# What MLflow accepts in a metric or param name, less "/" (a category never acts as a path):
# letters and digits of any script ("réservation", "予約"), `_`, space, `.`, `:` and `-`.
CATEGORY_NAME = re.compile(r"[^\W_][\w .:-]{0,63}")
_NOT_IN_A_NAME = re.compile(r"[^\w .:-]")


def safe_category(name: str) -> bool:
    """Whether a category name (from a model or a plan) is a plain word: no path, dot-dot, or newline.

    Category names become MLflow param keys and metric names; they must never act as paths.
    """
    return bool(CATEGORY_NAME.fullmatch(name)) and ".." not in name


def metric_name(category: str) -> str:
    """A category as it can appear in an MLflow metric name: other characters become `_`, at most 64."""
    name = _NOT_IN_A_NAME.sub("_", category).replace("..", "__")[:64]
    return name if name and name[0].isalnum() else f"c{name}"[:64]
