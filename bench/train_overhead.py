"""Benchmark: training throughput inside `forge-ml train` against a bare TRL SFTTrainer loop.

Both sides train the tiny model of the drone-router example on the same tokenised train/dev
data with the same hyperparameters and torch thread count:

  forge  the real recipe, forge_ml.jobs.train.run_train(cfg) (train, evaluate, log to MLflow);
         its figure is the `train/tokens_per_s` metric it logs, which times trainer.train()
         only, so the evaluation afterwards does not count.
  bare   a plain trl.SFTTrainer + peft.LoraConfig built here, timing trainer.train() the same
         way; tokens = tokens of trainer.train_dataset x epochs.

The two are measured alternately in ABBA order (bare, forge, forge, bare, ...) in one process after an
untimed warm-up, and the verdict uses the ratio of the medians. Bound: forge/bare >= 0.95.

Noise: each training also records how many cores other processes kept busy meanwhile
("other load"); on a 2-core machine one busy core can slow a 2-thread run several times over.
Each measurement waits (up to --quiet-wait s) for a quiet machine before it starts, and runs
taken while others used more than 0.25 cores are left out of the medians as long as each side
keeps at least one quiet run (the table still shows them).

With `--model smollm2-135m-instruct` both sides train the real pretrained base (its offline copy,
see the README) on 64 of the example's canonical examples (`--examples`); the bound is then 0.97,
since forge's fixed costs weigh less against a real model's compute.

    .venv/bin/python bench/train_overhead.py [--repeats 3] [--epochs 1] [--threads 2]
    .venv/bin/python bench/train_overhead.py --model smollm2-135m-instruct [--examples 64]
"""

from __future__ import annotations

import argparse
import gc
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _common import (
    TINY,
    BenchProject,
    OtherLoad,
    captured_stdout,
    example_project,
    median,
    model_overrides,
    other_load,
    pick_quiet,
    positive_int,
    print_table,
    quiet_libraries,
    ratio_range,
    set_threads,
    spread,
    wait_for_quiet,
)

BOUND = 0.95
REAL_BOUND = 0.97  # the real base: more compute per token, so forge's fixed costs weigh less
REAL_EXAMPLES = 64
REAL_GOLD = 20  # forge's run also evaluates gold after training (not timed): keep it short
WARMUP_STEPS = 4


@dataclass
class Figures:
    side: str
    tokens: int
    seconds: float
    loss: float
    load: OtherLoad

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0


@dataclass
class BareInputs:
    """What the bare loop shares with forge: the tiny model dir, tokenizer and tokenised datasets."""

    model_dir: str
    tokenizer: Any
    train_ds: Any
    dev_ds: Any


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=positive_int, default=3, help="measurements per side (default 3)")
    parser.add_argument(
        "--epochs", type=positive_int, default=1, help="training epochs per measurement (default 1)"
    )
    parser.add_argument(
        "--threads", type=positive_int, default=2, help="torch threads for both sides (default 2)"
    )
    parser.add_argument(
        "--model",
        default="tiny",
        help="model preset: tiny (default) or smollm2-135m-instruct (the real base)",
    )
    parser.add_argument(
        "--examples",
        type=positive_int,
        default=None,
        help="canonical examples kept (default: all; real base: 64)",
    )
    parser.add_argument(
        "--max-seq-length",
        type=positive_int,
        default=None,
        help="training.max_seq_length (default: the config's)",
    )
    parser.add_argument("--no-warmup", action="store_true", help="skip the untimed warm-up run")
    parser.add_argument(
        "--quiet-wait",
        type=float,
        default=120.0,
        help="seconds to wait for a quiet machine before each run (120)",
    )
    parser.add_argument("--verbose", action="store_true", help="show what the trainers print")
    parser.add_argument(
        "--keep", action="store_true", help="keep the temporary project (MLflow runs, adapters)"
    )
    return parser.parse_args(argv)


def prepare_bare(bp: BenchProject) -> BareInputs:
    """Build the same inputs run_train builds: tiny model dir, tokenizer, tokenised train/dev."""
    from forge_ml.data.chat import sft_dataset
    from forge_ml.data.project_data import load_project_data
    from forge_ml.models.loader import load_tokenizer, resolve_base

    cfg, project = bp.cfg, bp.project
    data = load_project_data(project, cfg.task)
    base = resolve_base(cfg, project, data.training_text())
    tokenizer = load_tokenizer(base, cfg.model, project)
    role = cfg.model.system_role
    train_ds = sft_dataset(data.train, tokenizer, data.system_prompt, system_role=role)
    dev_ds = sft_dataset(data.dev, tokenizer, data.system_prompt, system_role=role)
    return BareInputs(model_dir=base.source, tokenizer=tokenizer, train_ds=train_ds, dev_ds=dev_ds)


def run_bare(
    bp: BenchProject, inputs: BareInputs, *, threads: int, verbose: bool, max_steps: int = -1
) -> Figures:
    """Train with a plain SFTTrainer configured by hand from the same hyperparameters; time train()."""
    import peft
    import trl
    from transformers import AutoModelForCausalLM

    from forge_ml.models.generation import NO_HUB_KERNELS
    from forge_ml.models.loader import torch_dtype
    from forge_ml.training import checkpointing_argument, mixed_precision

    cfg = bp.cfg
    t, lora = cfg.training, cfg.lora
    set_threads(threads)
    # the same dtype and mixed precision forge picks (float32 on a CPU; bf16 on a capable GPU)
    bf16, fp16 = mixed_precision(cfg.training.precision)
    model = AutoModelForCausalLM.from_pretrained(
        inputs.model_dir, dtype=torch_dtype(cfg.model.dtype), **NO_HUB_KERNELS
    )
    args = trl.SFTConfig(
        output_dir=str(bp.tmpdir / "bare-trainer"),
        num_train_epochs=t.epochs,
        max_steps=max_steps,
        learning_rate=t.learning_rate,
        per_device_train_batch_size=t.batch_size,
        per_device_eval_batch_size=max(t.batch_size, 8),
        gradient_accumulation_steps=t.grad_accum,
        warmup_steps=t.warmup_ratio,  # below 1: a ratio of the total steps
        weight_decay=t.weight_decay,
        lr_scheduler_type=t.lr_scheduler,
        max_grad_norm=t.max_grad_norm,
        seed=t.seed,
        data_seed=t.seed,
        bf16=bf16,
        fp16=fp16,
        **{checkpointing_argument(): False},  # the installed transformers' name (5.x renamed it)
        max_length=t.max_seq_length,
        logging_strategy="epoch",
        eval_strategy="epoch",
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    lora_config = peft.LoraConfig(
        task_type="CAUSAL_LM",
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        bias=lora.bias,
        target_modules=list(lora.target_modules or cfg.model.target_modules),
        modules_to_save=list(lora.modules_to_save or cfg.model.modules_to_save) or None,
    )
    with captured_stdout(not verbose), other_load() as load:
        trainer = trl.SFTTrainer(
            model=model,
            args=args,
            train_dataset=inputs.train_ds,
            eval_dataset=inputs.dev_ds,
            processing_class=inputs.tokenizer,
            peft_config=lora_config,
        )
        started = time.perf_counter()
        result = trainer.train()
        seconds = time.perf_counter() - started
    steps_per_epoch = math.ceil(len(trainer.train_dataset) / (t.batch_size * t.grad_accum))
    epochs_done = result.global_step / steps_per_epoch
    tokens = int(sum(len(ids) for ids in trainer.train_dataset["input_ids"]) * epochs_done)
    figures = Figures("bare", tokens, seconds, float(result.training_loss), load)
    del trainer, model, result
    gc.collect()
    return figures


def run_forge(bp: BenchProject, *, verbose: bool) -> Figures:
    """Run the real `forge-ml train` recipe and read its logged training throughput from MLflow."""
    import mlflow

    import forge_ml.jobs.train as train_job

    # Record the other load over train_sft only (as for bare), not over the evaluation after it;
    # the wrapper sits outside the timing train_sft does itself.
    original = train_job.train_sft
    loads: list[OtherLoad] = []

    def train_sft(*args: Any, **kwargs: Any) -> Any:
        with other_load() as load:
            outcome = original(*args, **kwargs)
        loads.append(load)
        return outcome

    train_job.train_sft = train_sft
    try:
        with captured_stdout(not verbose):
            summary = train_job.run_train(bp.cfg, run_name="bench-train-overhead")
    finally:
        train_job.train_sft = original
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{bp.project.root}/mlflow.db")
    metrics = client.get_run(summary.run_id).data.metrics
    tokens_per_s = metrics["train/tokens_per_s"]
    seconds = metrics["train/runtime_s"]
    if not math.isclose(tokens_per_s, summary.tokens_per_s, rel_tol=1e-9):
        print(f"warning: MLflow says {tokens_per_s:.1f} tokens/s, TrainSummary {summary.tokens_per_s:.1f}")
    loss = summary.history[-1].get("train/loss", float("nan")) if summary.history else float("nan")
    figures = Figures("forge", round(tokens_per_s * seconds), seconds, float(loss), loads[0])
    del summary
    gc.collect()
    return figures


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(argv)
    quiet_libraries()
    real = opts.model != TINY
    overrides = [
        *model_overrides(opts.model),
        f"training.epochs={opts.epochs}",
        "training.max_steps=-1",
        f"training.threads={opts.threads}",
    ]
    if opts.max_seq_length:
        overrides.append(f"training.max_seq_length={opts.max_seq_length}")
    examples = opts.examples or (REAL_EXAMPLES if real else None)
    bound = REAL_BOUND if real else BOUND
    began = time.perf_counter()
    with example_project(
        overrides, keep=opts.keep, examples=examples, gold=REAL_GOLD if real else None
    ) as bp:
        t = bp.cfg.training
        inputs = prepare_bare(bp)
        print(
            f"train_overhead: drone-router, model={opts.model} ({Path(inputs.model_dir).name}), lora r={bp.cfg.lora.r}, "
            f"{len(inputs.train_ds)} train / {len(inputs.dev_ds)} dev examples, epochs={t.epochs}, "
            f"batch_size={t.batch_size}, lr={t.learning_rate}, threads={opts.threads}, repeats={opts.repeats}"
        )
        if not opts.no_warmup:
            run_bare(bp, inputs, threads=opts.threads, verbose=opts.verbose, max_steps=WARMUP_STEPS)
        runs: list[Figures] = []
        for i in range(opts.repeats):
            # ABBA order (bare, forge, forge, bare, ...): a machine that drifts slower or faster
            # over the run does not favour whichever side always goes first
            for side in ("bare", "forge") if i % 2 == 0 else ("forge", "bare"):
                wait_for_quiet(opts.quiet_wait)
                if side == "bare":
                    fig = run_bare(bp, inputs, threads=opts.threads, verbose=opts.verbose)
                else:
                    fig = run_forge(bp, verbose=opts.verbose)
                runs.append(fig)
                print(
                    f"  [{i + 1}/{opts.repeats}] {side:5s} {fig.tokens_per_s:10.1f} tokens/s "
                    f"({fig.seconds:.2f} s, other load {fig.load} cores)"
                )
                sys.stdout.flush()

    print()
    print_table(
        ["run", "side", "tokens", "train s", "tokens/s", "train loss", "other load"],
        [
            [n + 1, r.side, r.tokens, f"{r.seconds:.2f}", f"{r.tokens_per_s:.1f}", f"{r.loss:.4f}", r.load]
            for n, r in enumerate(runs)
        ],
        left=2,
    )
    chosen = pick_quiet([r for r in runs if r.side == "bare"], [r for r in runs if r.side == "forge"])
    bare, forge = chosen.first, chosen.second
    bare_tps = [r.tokens_per_s for r in bare]
    forge_tps = [r.tokens_per_s for r in forge]
    bare_med, forge_med = median(bare_tps), median(forge_tps)
    print()
    if chosen.note:
        print(f"noise: {chosen.note}")
    print(
        f"median tokens/s: bare {bare_med:.1f} ({len(bare_tps)} run(s), spread {spread(bare_tps):.1%}), "
        f"forge {forge_med:.1f} ({len(forge_tps)} run(s), spread {spread(forge_tps):.1%})"
    )
    print(f"total wall time: {time.perf_counter() - began:.0f} s")

    token_counts = {r.tokens for r in runs}
    if len(token_counts) != 1:
        print(f"error: the two sides did not train on the same tokens ({sorted(token_counts)})")
        return 2
    ratio = forge_med / bare_med if bare_med else 0.0
    ok = ratio >= bound
    if not ok:
        noise = max(spread(bare_tps), spread(forge_tps))
        if 1 - ratio <= noise:
            print(
                f"note: the shortfall ({1 - ratio:.1%}) is within the run-to-run spread ({noise:.1%}); "
                "rerun with more --repeats on a quiet machine"
            )
    print(
        f"train_overhead: forge/bare tokens/s ratio = {ratio:.2f}, of medians (every pairing of runs:"
        f" {ratio_range(forge_tps, bare_tps)}) (>= {bound}: {'PASS' if ok else 'FAIL'}{chosen.verdict_suffix})"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
