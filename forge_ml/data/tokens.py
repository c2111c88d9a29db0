"""Tokenised SFT datasets, cached by content so unchanged examples are never tokenised twice.

The project's rows (canonical, then the seed's new examples) are cut into shards of
`SHARD_ROWS` consecutive rows. A shard's tokens are stored as an Arrow file named by the
sha256 of what they depend on: the tokenizer, chat template, system prompt and system-role
setting (the fingerprint), and the user and assistant text of each of its rows. Appending
examples changes only the last shard and adds new ones, so a round that adds 1 % of the data
tokenises about 1 % of it; `train`, `tune`, every Ray trial and every later round read the same
memory-mapped files. Missing shards are tokenised by a pool of processes when there are cores.

Tokens are those of `chat.tokenize_for_sft` (prompt and completion encoded apart, prompt
masked with -100): the encoder here takes the text every prompt shares once, and checks its
shortcut against the plain encoding on rows of every shard, falling back when they differ.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forge_ml.data.chat import IGNORE_INDEX, check_lengths_of, encode_text, render_completion
from forge_ml.data.examples import Example
from forge_ml.data.table import digests
from forge_ml.fileio import remove_orphans, writer_tag
from forge_ml.models.generation import answer_lead, build_messages, chat_text, render_prompt
from forge_ml.progress import Stage

log = logging.getLogger(__name__)

TOKENS_FORMAT = 2  # bump when what a shard holds changes (2: a template's text before every answer is prompt)
SHARD_ROWS = 4096
ENCODE_BATCH = 512
CHECKED_PER_BATCH = 4  # rows of every batch encoded the plain way too, to check the shortcut
PARALLEL_MIN_ROWS = 16384  # fewer rows than this are tokenised in this process
PASS_LOG_ENV = "FORGE_TOKENIZE_LOG"  # bench hook: append "pid rows" for each tokenisation of missing shards
KEEP_UNUSED_S = 7 * 86400  # a shard no command has read for this long is deleted
TOUCH_AFTER_S = 3600  # a shard's mtime is its last use, to within this


def token_cache(project: Any) -> Path:
    """Where a project's tokenised shards live."""
    return project.output / "cache" / "tokens"


def tokenizer_fingerprint(tokenizer: Any, system_prompt: str, system_role: bool) -> str:
    """sha256 of everything besides the example text that decides its tokens."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    h = hashlib.sha256()
    parts = {
        "format": TOKENS_FORMAT,
        "class": type(tokenizer).__name__,
        "template": tokenizer.chat_template,
        "special": {k: str(v) for k, v in sorted(tokenizer.special_tokens_map.items())},
        "system_prompt": system_prompt,
        "system_role": system_role,
    }
    h.update(json.dumps(parts, sort_keys=True).encode())
    if backend is not None:
        h.update(backend.to_str().encode())
    else:  # a slow tokenizer: its vocabulary and added tokens
        h.update(json.dumps(sorted(tokenizer.get_vocab().items())).encode())
    return h.hexdigest()


class ChatEncoder:
    """Encodes (user, assistant) pairs into SFT token ids, as `chat.tokenize_for_sft` would."""

    def __init__(self, tokenizer: Any, system_prompt: str, system_role: bool) -> None:
        self.tokenizer, self.system_prompt, self.system_role = tokenizer, system_prompt, system_role
        self.backend = getattr(tokenizer, "backend_tokenizer", None)
        self.prefix, self.prefix_ids = self._shared_prefix()
        self.lead: str | None = self._lead()  # None: found for each pair (`render_prompt`'s way)

    def _lead(self) -> str:
        """What the template writes before an answer (`answer_lead`), found once: in every template
        seen it does not depend on the chat, which the first pairs of each batch check."""
        messages = build_messages(self.system_prompt, "A", system_role=self.system_role)
        return answer_lead(
            self.tokenizer, messages, chat_text(self.tokenizer, messages, add_generation_prompt=True)
        )

    def _texts(self, user: str, answer: str) -> tuple[str, str]:
        """The prompt and completion texts of a pair: two renders, the lead as found once."""
        messages = build_messages(self.system_prompt, user, system_role=self.system_role)
        if self.lead is not None:
            prompt = chat_text(self.tokenizer, messages, add_generation_prompt=True) + self.lead
            full = chat_text(self.tokenizer, [*messages, {"role": "assistant", "content": answer}])
            if full.startswith(prompt):
                return prompt, full[len(prompt) :]
            self.lead = None  # the lead differs for this pair: find it for each pair from here on
        prompt = render_prompt(self.tokenizer, self.system_prompt, user, system_role=self.system_role)
        example = Example(user, answer)
        return prompt, render_completion(
            self.tokenizer, self.system_prompt, example, prompt, system_role=self.system_role
        )

    def _shared_prefix(self) -> tuple[str, list[int]]:
        """The text every prompt starts with, up to the end of its last special token (tokenised alone,
        text after a special token encodes the same as in the whole prompt); "" when there is none."""
        probes = [
            render_prompt(self.tokenizer, self.system_prompt, u, system_role=self.system_role) for u in "AZ"
        ]
        shared = probes[0][: next((i for i, (a, b) in enumerate(zip(*probes)) if a != b), len(probes[0]))]
        specials = [t for t in self.tokenizer.all_special_tokens if t]
        cut = max((shared.rfind(t) + len(t) for t in specials if t in shared), default=0)
        if self.backend is None or cut == 0:
            return "", []
        return shared[:cut], encode_text(self.tokenizer, shared[:cut])

    def _encode_many(self, texts: list[str]) -> list[list[int]]:
        if self.backend is None:
            return [encode_text(self.tokenizer, t) for t in texts]
        return [e.ids for e in self.backend.encode_batch(texts, add_special_tokens=False)]

    def encode(self, users: Sequence[str], answers: Sequence[str]) -> tuple[list[list[int]], list[int]]:
        """Return (input_ids, prompt lengths) for the pairs."""
        prompts, completions = [], []
        for user, answer in zip(users, answers):
            prompt, completion = self._texts(user, answer)
            prompts.append(prompt)
            completions.append(completion)
        checked = range(min(CHECKED_PER_BATCH, len(prompts)))
        if self.lead is not None and any(
            render_prompt(self.tokenizer, self.system_prompt, users[i], system_role=self.system_role)
            != prompts[i]
            for i in checked
        ):
            log.info(
                "the chat template's text before an answer depends on the chat: finding it for each pair"
            )
            self.lead = None
            return self.encode(users, answers)
        cut = len(self.prefix)
        if cut and all(p.startswith(self.prefix) for p in prompts):
            rests = self._encode_many([p[cut:] for p in prompts])
            prompt_ids = [self.prefix_ids + r for r in rests]
        else:
            prompt_ids = self._encode_many(prompts)
        completion_ids = self._encode_many(completions)
        for i in checked:
            if (
                encode_text(self.tokenizer, prompts[i]) != prompt_ids[i]
                or encode_text(self.tokenizer, completions[i]) != completion_ids[i]
            ):
                log.info("the batched encoding differs from the tokenizer's own: encoding one text at a time")
                self.prefix, self.prefix_ids, self.backend = "", [], None
                return self.encode(users, answers)
        ids = [p + c for p, c in zip(prompt_ids, completion_ids)]
        return ids, [len(p) for p in prompt_ids]


def shard_schema() -> Any:
    import pyarrow as pa

    return pa.schema(
        [
            ("input_ids", pa.list_(pa.int32())),
            ("labels", pa.list_(pa.int32())),
            ("prompt_len", pa.int32()),
            ("length", pa.int32()),
        ]
    )


def shard_batch(ids: list[list[int]], prompt_lens: list[int]) -> Any:
    import pyarrow as pa

    labels = [[IGNORE_INDEX] * n + row[n:] for row, n in zip(ids, prompt_lens)]
    return pa.record_batch([ids, labels, prompt_lens, [len(row) for row in ids]], schema=shard_schema())


@dataclass(frozen=True)
class ShardJob:
    path: Path
    users: list[str]
    answers: list[str]


def _write_shard(encoder: ChatEncoder, job: ShardJob) -> int:
    """Tokenise one shard's rows and write its Arrow file (through a temp name); return its row count."""
    import pyarrow as pa

    tmp = job.path.with_name(f".{job.path.name}.{writer_tag()}.tmp")
    job.path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with pa.ipc.new_stream(str(tmp), shard_schema()) as sink:
            for start in range(0, len(job.users), ENCODE_BATCH):
                end = start + ENCODE_BATCH
                ids, lens = encoder.encode(job.users[start:end], job.answers[start:end])
                sink.write_batch(shard_batch(ids, lens))
        os.replace(tmp, job.path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return len(job.users)


_worker_encoder: ChatEncoder | None = None


def _init_worker(encoder: ChatEncoder) -> None:
    global _worker_encoder
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    _worker_encoder = encoder


def _worker_write(job: ShardJob) -> int:
    assert _worker_encoder is not None
    return _write_shard(_worker_encoder, job)


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def tokenize_rows(rows: Any, tokenizer: Any, system_prompt: str, *, system_role: bool, cache: Path) -> Any:
    """Return a `datasets.Dataset` of rows' tokens (input_ids, labels, prompt_len), one per row, in order.

    Shards found in `cache` are mapped as they are; the others are tokenised (in parallel when
    there are cores and enough rows) and written there first.
    """
    from datasets import Dataset, concatenate_datasets

    fingerprint = tokenizer_fingerprint(tokenizer, system_prompt, system_role)
    folder = cache / fingerprint[:16]
    folder.mkdir(parents=True, exist_ok=True)
    content = digests(rows, "content")
    paths, jobs = [], []
    for start in range(0, rows.num_rows, SHARD_ROWS):
        end = min(start + SHARD_ROWS, rows.num_rows)
        key = hashlib.sha256(fingerprint.encode() + content[start:end].tobytes()).hexdigest()
        path = folder / f"{key}.arrow"
        paths.append(path)
        if not path.is_file():
            remove_orphans(path)
            part = rows.slice(start, end - start)
            jobs.append(ShardJob(path, part.column("user").to_pylist(), part.column("assistant").to_pylist()))
    if jobs:
        _tokenise(jobs, ChatEncoder(tokenizer, system_prompt, system_role))
    for path in paths:  # used now: kept by `prune` for another KEEP_UNUSED_S
        if path.stat().st_mtime < time.time() - TOUCH_AFTER_S:
            os.utime(path)
    prune(cache)
    if not paths:
        return Dataset(shard_schema().empty_table())
    return concatenate_datasets([Dataset.from_file(str(p)) for p in paths])


def prune(cache: Path, *, now: float | None = None) -> int:
    """Delete shards no command has used for KEEP_UNUSED_S (older data, another tokenizer); return how many."""
    cutoff = (now or time.time()) - KEEP_UNUSED_S
    removed = 0
    for path in cache.glob("*/*.arrow"):
        try:
            if path.stat().st_mtime < cutoff:
                path.unlink()
                removed += 1
        except FileNotFoundError:  # another process pruned it first
            continue
    for folder in cache.glob("*"):
        if folder.is_dir() and not any(folder.iterdir()):
            try:
                folder.rmdir()
            except OSError:  # a shard arrived meanwhile
                continue
    return removed


def _fork_is_safe() -> bool:
    """Whether this process may fork tokenising workers: not once it runs Ray (its threads and gRPC
    do not survive a fork), as a flywheel's driver does after its first round."""
    ray = sys.modules.get("ray")
    return not (ray is not None and ray.is_initialized())


def _tokenise(jobs: list[ShardJob], encoder: ChatEncoder) -> None:
    total = sum(len(j.users) for j in jobs)
    if os.environ.get(PASS_LOG_ENV):
        with open(os.environ[PASS_LOG_ENV], "a", encoding="utf-8") as log:
            log.write(f"{os.getpid()} {total}\n")
    workers = min(usable_cores(), len(jobs)) if total >= PARALLEL_MIN_ROWS and _fork_is_safe() else 1
    with Stage("tokenising", unit="examples", total=total) as stage:
        if workers == 1:
            for job in jobs:
                stage.advance(_write_shard(encoder, job))
            return
        import multiprocessing

        context = multiprocessing.get_context("fork")  # the workers share the loaded tokenizer
        with ProcessPoolExecutor(
            workers, mp_context=context, initializer=_init_worker, initargs=(encoder,)
        ) as pool:
            for done in pool.map(_worker_write, jobs):
                stage.advance(done)


@dataclass
class SFTData:
    """The tokenised train and dev splits a trainer takes."""

    train: Any
    dev: Any


def sft_datasets(
    data: Any, tokenizer: Any, *, system_role: bool, max_length: int | None, cache: Path
) -> SFTData:
    """Return the tokenised train and dev splits of `data` (a ProjectData), read from or added to `cache`.

    With `max_length`, rows it would cut are reported (or refused) first, as `chat.check_lengths` does.
    """

    tokens = tokenize_rows(data.rows, tokenizer, data.system_prompt, system_role=system_role, cache=cache)
    if max_length is not None:
        lengths, prompt_lens = int_column(tokens, "length"), int_column(tokens, "prompt_len")
        for rows, name in ((data.train_rows, "training"), (data.dev_rows, "dev")):
            check_lengths_of(lengths[rows], prompt_lens[rows], max_length, name)
    return SFTData(train=tokens.select(data.train_rows), dev=tokens.select(data.dev_rows))


def in_memory(dataset: Any) -> Any:
    """A copy of the dataset's rows held in memory (it pickles with its data, not with its cache files' paths)."""
    return dataset.flatten_indices(keep_in_memory=True)


def fit_to_length(dataset: Any, max_length: int) -> Any:
    """The dataset as TRL's own preparation would leave it for `max_length`: rows whose answer would
    start past it dropped, longer rows cut to it. (The trainer skips that preparation, which walks
    every row in Python, twice.)"""
    import numpy as np

    prompt_lens, lengths = int_column(dataset, "prompt_len"), int_column(dataset, "length")
    keep = np.nonzero(prompt_lens < max_length)[0]
    if len(keep) < len(prompt_lens):
        dataset = dataset.select(keep)
    if (lengths[keep] > max_length).any():
        dataset = dataset.map(_truncate, batched=True, fn_kwargs={"limit": max_length})
    return dataset


def _truncate(batch: dict[str, list], limit: int) -> dict[str, list]:
    return {
        "input_ids": [ids[:limit] for ids in batch["input_ids"]],
        "labels": [labels[:limit] for labels in batch["labels"]],
        "length": [min(n, limit) for n in batch["length"]],
    }


def token_count(dataset: Any) -> int:
    """Tokens in a tokenised dataset (its rows, once)."""
    return int(int_column(dataset, "length").sum())


def int_column(dataset: Any, name: str) -> Any:
    """One integer column of a dataset's rows (its indices mapping applied) as a numpy array, read in Arrow."""
    return dataset.select_columns([name]).with_format("arrow")[:][name].to_numpy()
