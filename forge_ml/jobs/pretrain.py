"""`forge-ml pretrain`: continued causal-LM training on the raw text in `dataset/corpus/`.

The configured base model (the tiny model is built exactly as `forge-ml train` builds it)
trains on the corpus with a LoRA adapter (or in full, per `lora.method`); the result is merged
into full weights and saved with its tokenizer in `output/pretrain_merged/`, ready for
`forge-ml train model.name_or_path=output/pretrain_merged`. The directory is written through a
temporary one and a rename, so it is either the old model, the new one, or absent. It holds
`forge_pretrain.json`: the run, the base it was trained from (with that base's provenance), the
corpus digest. A directory that registered versions name as their base is never replaced: the
new model then goes beside it, to `output/pretrain_merged-<run id>/`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from forge_ml.config import ForgeConfig
from forge_ml.console import console
from forge_ml.data.examples import Example, read_jsonl
from forge_ml.errors import ConfigError, InputError
from forge_ml.models.adapters import peft_config_for
from forge_ml.models.loader import BaseModelRef, load_base_model, load_tokenizer, resolve_base
from forge_ml.models.provenance import PRETRAIN_FILE
from forge_ml.project import CORPUS_DIR, Project
from forge_ml.registry import Registry
from forge_ml.tracking import Tracker, config_params

log = logging.getLogger(__name__)
MERGED_DIR = "pretrain_merged"  # under output/
TEXT_SUFFIXES = (".txt", ".md")
JSONL_SUFFIX = ".jsonl"
FEW_STEPS = 20  # fewer optimizer steps than this get a warning before training


@dataclass
class Corpus:
    """The documents of `dataset/corpus/`: (where, text) pairs in file order, and the files skipped."""

    root: Path
    documents: list[tuple[str, str]]
    files: list[Path]
    ignored: list[Path] = field(default_factory=list)

    @property
    def digest(self) -> str:
        """sha256 of every document with the file (and line) it came from."""
        h = hashlib.sha256()
        for where, text in self.documents:
            h.update(where.encode("utf-8") + b"\x00" + text.encode("utf-8") + b"\x00")
        return h.hexdigest()

    def as_examples(self) -> list[Example]:
        """The documents as dataset rows for MLflow: `user` = where it came from, `assistant` = the text."""
        return [
            Example(user=where, assistant=text, meta={"category": "corpus"}) for where, text in self.documents
        ]


@dataclass
class PretrainSummary:
    run_id: str
    merged_dir: Path
    base: BaseModelRef
    corpus: Corpus
    tokens: int
    blocks: int
    epochs: int
    steps: int  # optimizer steps in all
    losses: list[float]  # train/loss of each epoch
    kept_for: list[str] = field(default_factory=list)  # versions whose base output/pretrain_merged stays


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not valid UTF-8 ({exc.reason} at byte {exc.start})") from None


def _jsonl_documents(path: Path, name: str) -> list[tuple[str, str]]:
    documents = []
    for where, record in read_jsonl(path):
        if not isinstance(record, dict) or not isinstance(record.get("text"), str):
            raise InputError(f"{where}: expected an object with a string 'text' field")
        if record["text"].strip():
            documents.append((f"{name}:{where.rsplit(':', 1)[1]}", record["text"]))
    return documents


def read_corpus(project: Project) -> Corpus:
    """Return the corpus under `dataset/corpus/` (recursively); InputError when it holds no text."""
    root = project.resolve(CORPUS_DIR)
    if not root.is_dir():
        raise InputError(
            f"{root}: corpus directory not found; put .txt, .md or .jsonl files (with 'text') in it"
        )
    corpus = Corpus(root, [], [])
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        name = path.relative_to(root).as_posix()
        if any(part.startswith(".") for part in path.relative_to(root).parts):
            continue  # hidden files (.gitkeep, editor swap files)
        suffix = path.suffix.lower()
        if suffix in TEXT_SUFFIXES:
            text = _read_text(path)
            found = [(name, text)] if text.strip() else []
        elif suffix == JSONL_SUFFIX:
            found = _jsonl_documents(path, name)
        else:
            corpus.ignored.append(path)
            continue
        corpus.files.append(path)
        corpus.documents.extend(found)
    if not corpus.documents:
        raise InputError(
            f'{root}: the corpus is empty; add .txt, .md or .jsonl files (one {{"text": ...}} per line)'
        )
    return corpus


def configured_base(cfg: ForgeConfig, project: Project) -> BaseModelRef:
    """Return the configured base model; the tiny one is built from the same text as `forge-ml train`'s."""
    text: list[str] = []
    if cfg.model.is_tiny:
        from forge_ml.data.project_data import load_project_data

        text = load_project_data(project, cfg.task).training_text()
    return resolve_base(cfg, project, text)


def pack_blocks(texts: list[str], tokenizer: Any, block_size: int) -> list[list[int]]:
    """Tokenise the documents end to end (EOS between them) and cut the stream into blocks."""
    stream: list[int] = []
    for text in texts:
        stream += tokenizer(text, add_special_tokens=False)["input_ids"]
        if tokenizer.eos_token_id is not None:
            stream.append(tokenizer.eos_token_id)
    blocks = [stream[i : i + block_size] for i in range(0, len(stream), block_size)]
    return [b for b in blocks if len(b) > 1]


def optimizer_steps(cfg: ForgeConfig, blocks: int) -> int:
    """The optimizer steps of a run over `blocks` blocks: `training.max_steps`, or epochs x batches."""
    t = cfg.training
    if t.max_steps > 0:
        return t.max_steps
    return t.epochs * max(1, math.ceil(math.ceil(blocks / t.batch_size) / t.grad_accum))


def warmup_steps(cfg: ForgeConfig, blocks: int) -> int:
    """`training.warmup_ratio` of the run's optimizer steps, rounded down.

    Hugging Face rounds a warm-up ratio up, and its linear warm-up gives the first step a learning
    rate of 0. A small corpus trains in a few steps: 0.03 of 2 steps made the first one a step that
    changed nothing (the same loss twice). A warm-up shorter than one step is none here.
    """
    return int(cfg.training.warmup_ratio * optimizer_steps(cfg, blocks))


def warn_if_few_steps(cfg: ForgeConfig, blocks: int, block_size: int) -> None:
    """Say so before training when the run is too short to move the model.

    A corpus of a few pages is one or two blocks, one optimizer step per epoch at the default batch:
    on a 694-token corpus, 3 epochs (3 steps at 2e-4) left a probe where it was (0.107 -> 0.106)
    while 40 steps at 1e-3 doubled it (0.216); README, "Domain knowledge".
    """
    steps = optimizer_steps(cfg, blocks)
    if steps >= FEW_STEPS:
        return
    t = cfg.training
    console.print(
        f"[yellow]warning:[/] {steps} optimizer step(s) in all ({blocks} block(s) of up to {block_size} "
        f"tokens, training.batch_size {t.batch_size}, {t.epochs} epoch(s)): too few to change what the "
        f"model knows; raise --epochs (and training.learning_rate, now {t.learning_rate:g}), or add text "
        "to the corpus",
        highlight=False,
        soft_wrap=True,
    )


def _training_args(cfg: ForgeConfig, output_dir: Path, blocks: int) -> Any:
    from transformers import TrainingArguments

    from forge_ml.training import trainer_arguments

    arguments = trainer_arguments(cfg, output_dir, tqdm=console.is_terminal)
    return TrainingArguments(
        **(arguments | {"warmup_steps": warmup_steps(cfg, blocks)}),
        eval_strategy="no",
        save_strategy="no",
    )


def _epoch_losses(losses: list[float], hook: Any) -> Any:
    """A TrainerCallback that records the train loss of each epoch and hands it to `hook(metrics, epoch)`."""
    from transformers import TrainerCallback

    class EpochLoss(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "loss" in logs:
                losses.append(float(logs["loss"]))
                hook({"train/loss": float(logs["loss"])}, round(state.epoch or len(losses)))

    return EpochLoss()


def _train(cfg: ForgeConfig, model: Any, tokenizer: Any, blocks: list[list[int]], scratch: Path, hook: Any):
    """Train on the blocks; return the trained model (PEFT-wrapped for LoRA) and the loss per epoch."""
    import torch
    from datasets import Dataset
    from transformers import DataCollatorForLanguageModeling, Trainer

    from forge_ml.training import quiet_trainer_logs

    if cfg.training.threads:
        torch.set_num_threads(cfg.training.threads)
    peft_config = peft_config_for(cfg)
    if peft_config is not None:
        from peft import get_peft_model

        model = get_peft_model(model, peft_config)
    losses: list[float] = []
    trainer = Trainer(
        model=model,
        args=_training_args(cfg, scratch, len(blocks)),
        train_dataset=Dataset.from_dict({"input_ids": blocks}),
        data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False),
        callbacks=[_epoch_losses(losses, hook)],
    )
    quiet_trainer_logs(trainer)  # its printed dicts would go to stdout, where --json puts the envelope
    trainer.train()
    return trainer.model, losses


def _save_merged(model: Any, tokenizer: Any, target: Path, record: dict[str, Any]) -> None:
    """Merge a LoRA adapter into its base and save model + tokenizer + `record` (as PRETRAIN_FILE)
    to `target` via a temp dir + rename."""
    merged = model.merge_and_unload() if hasattr(model, "merge_and_unload") else model
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    old = target.with_name(f".{target.name}.old")
    try:
        merged.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
        (tmp / PRETRAIN_FILE).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        shutil.rmtree(old, ignore_errors=True)
        if target.exists():
            target.rename(old)
        tmp.rename(target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)


def run_pretrain(cfg: ForgeConfig) -> PretrainSummary:
    """Train the base model on the corpus, merge, save to output/pretrain_merged/, record an MLflow run."""
    if cfg.lora.method == "qlora":
        raise ConfigError(
            "lora.method=qlora: pretrain merges the adapter into full weights, which a 4-bit base cannot "
            "take losslessly; use lora=default or lora=full"
        )
    project = Project(Path(cfg.project_dir))
    corpus = read_corpus(project)
    for path in corpus.ignored:
        console.print(
            f"[yellow]warning:[/] {path}: ignored (the corpus takes .txt, .md and .jsonl)",
            highlight=False,
            soft_wrap=True,
        )
    base = configured_base(cfg, project)
    made = base.provenance.note if base.provenance is not None else None  # set from forge_pretrain.json
    if made and (Path(base.source) / PRETRAIN_FILE).is_file():
        console.print(  # a project whose forge.yaml names the pretrained model, pretraining again
            f"note: the base is {base.source}, itself {made}: this run trains on top of it "
            "(model.name_or_path names the base to start from)",
            highlight=False,
            soft_wrap=True,
        )
    tokenizer = load_tokenizer(base, cfg.model, project)
    model = load_base_model(base, cfg)
    limit = getattr(model.config, "max_position_embeddings", None) or cfg.training.max_seq_length
    block_size = min(cfg.training.max_seq_length, limit)
    blocks = pack_blocks([text for _, text in corpus.documents], tokenizer, block_size)
    if not blocks:
        raise InputError(f"{corpus.root}: the corpus holds too little text to train on (under two tokens)")
    tokens = sum(len(b) for b in blocks)
    steps = optimizer_steps(cfg, len(blocks))
    warn_if_few_steps(cfg, len(blocks), block_size)
    target = project.output / MERGED_DIR

    tags = {"forge.kind": "pretrain", "forge.corpus_hash": corpus.digest}
    with Tracker(cfg, project).start_run("pretrain", tags) as run:
        run.log_params(config_params(cfg))
        run.log_params(
            {
                "model.source": base.source,
                "corpus.files": len(corpus.files),
                "corpus.documents": len(corpus.documents),
                "corpus.tokens": tokens,
                "corpus.blocks": len(blocks),
                "corpus.ignored": len(corpus.ignored),
                "pretrain.optimizer_steps": steps,
            }
        )
        if cfg.tracking.log_datasets:
            run.log_dataset("corpus", corpus.as_examples(), corpus.digest, corpus.root, "pretraining")
        scratch = project.output / "tmp" / f"pretrain-{run.run_id}"
        started = time.perf_counter()
        try:
            trained, losses = _train(cfg, model, tokenizer, blocks, scratch, run.log_metrics)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        run.log_metrics({"train/runtime_s": time.perf_counter() - started})
        kept_for = Registry.for_project(cfg, project).versions_based_on(target) if target.exists() else []
        if kept_for:  # registered versions load their base from there: keep it, save beside it
            target = project.output / f"{MERGED_DIR}-{run.run_id[:8]}"
        record = {
            "run_id": run.run_id,
            "base": base.to_dict(),
            "method": cfg.lora.method,
            "epochs": cfg.training.epochs,
            "corpus_hash": corpus.digest,
            "corpus_tokens": tokens,
            "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }
        _save_merged(trained, tokenizer, target, record)
        run.set_tags({"forge.pretrain.merged_dir": str(target)})
        run.log_params({"pretrain.merged_dir": str(target)})
    return PretrainSummary(
        run.run_id, target, base, corpus, tokens, len(blocks), cfg.training.epochs, steps, losses, kept_for
    )
