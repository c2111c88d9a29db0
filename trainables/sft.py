"""The SFT trial: train one sampled config on the round's shared data, report each epoch.

Runs inside a Ray worker. It never tokenises (the driver did, once per round) and never
downloads (the base is a local directory the driver prepared). Each epoch reports
`train/loss`, `dev/loss` and a full trainer checkpoint; a restarted trial resumes from
`tune.get_checkpoint()`. The last report adds `dev/accuracy` and `forge/completed=1`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forge_ml.config import ForgeConfig
from forge_ml.config.overrides import with_overrides
from forge_ml.data.examples import Example
from forge_ml.errors import first_line
from forge_ml.faults import failpoint
from forge_ml.tuning.steps import poster
from trainables.scratch import trial_scratch

FAULT_ENV = "FORGE_FAULT_CRASH_AFTER_EPOCH"  # test hook: crash once after this epoch's checkpoint
OOM_FAULT_ENV = (
    "FORGE_FAULT_OOM_LORA_R"  # test hook: trials with this lora.r ("*": every trial) run out of GPU memory
)
# Under ASHA, Ray hands the actor of a trial it stopped to the next trial (reuse_actors) once the
# stopped trial's thread has unwound (its model freed, its scratch files deleted), and waits this
# long for that: 2 s by Ray's default. Past it the next trial fails ("Could not re-use actor", ray
# issue 29268), and with one trial at a time the round hung (seen on Ray 2.60). Unwinding takes
# 0.3 s on an idle machine and longer on a busy one, so a trial sets a minute unless the user set it.
REUSE_WAIT_ENV, REUSE_WAIT_S = "TUNE_FUNCTION_THREAD_TIMEOUT_S", "60"


@dataclass
class TrialContext:
    """What every trial of a round shares (placed once in Ray's object store)."""

    config: ForgeConfig  # the round's config, composed once by the driver; a trial sets its sampled point
    base_source: str  # a local directory (the tiny model, or the driver's Hub snapshot) or a Hub id
    base_revision: str | None
    tokenizer: Any
    train_dataset: Any
    dev_dataset: Any
    dev_examples: list[Example]
    system_prompt: str
    board: Any = None  # the round's step board (forge_ml/tuning/steps.py), set while its trials run


def sft_trial(config: dict[str, Any], context: TrialContext) -> None:
    """Ray Tune function trainable."""
    import ray
    from ray import tune

    from forge_ml.progress import set_quiet

    set_quiet(True)  # a trial reports through Ray Tune, not its stderr
    os.environ.setdefault(REUSE_WAIT_ENV, REUSE_WAIT_S)  # read by Ray in this actor when it is reused
    cfg = with_overrides(context.config, config)
    cfg.training.threads = max(1, int(cfg.tune.resources.cpu))
    checkpoint = tune.get_checkpoint()
    resumed = checkpoint is not None
    crash_after = int(os.environ.get(FAULT_ENV, "0"))
    last: dict[str, float] = {}

    node = {"forge/node_id": ray.get_runtime_context().get_node_id()}
    on_step = None
    if context.board is not None:  # where this trial is inside its epoch, for the round's progress line
        on_step = poster(context.board, tune.get_context().get_trial_id())

    def report(metrics: dict[str, float], epoch: int, path: Path) -> None:
        last.update(metrics, epoch=float(epoch))
        extra = {"forge/restored": 1.0} if resumed else {}
        tune.report(
            {**metrics, "epoch": epoch, **extra, **node}, checkpoint=tune.Checkpoint.from_directory(str(path))
        )
        if crash_after and epoch == crash_after and not resumed:
            raise RuntimeError(f"injected fault after epoch {epoch} ({FAULT_ENV})")

    with trial_scratch() as scratch:
        # A restarted trial's checkpoint is copied into its scratch, which goes with the trial
        # (Ray's to_directory() without a path leaves a checkpoint_tmp_* directory behind for good).
        resume_dir = Path(checkpoint.to_directory(str(scratch / "resume"))) if resumed else None
        base = local_base(context.base_source, scratch / "base")
        node["forge/base_path"] = base  # where this trial read the base from (recorded on its run)
        try:
            _train_and_report(cfg, context, base, scratch, report, resume_dir, last, node, on_step)
        except SystemExit:  # the scheduler stopped this trial at a report (Ray exits the thread)
            failpoint("trial.stopped")
            raise
        finally:
            release_trial_memory()


def local_base(source: str, scratch: Path) -> str:
    """Return a local directory (or Hub id) for the base: a base the driver shared through storage is fetched."""
    if "://" not in source:
        return source
    import pyarrow.fs

    scratch.mkdir(parents=True, exist_ok=True)
    pyarrow.fs.copy_files(source, str(scratch))
    return str(scratch)


def release_trial_memory() -> None:
    """Free what a finished (or failed) trial held, in the process's heap and on the GPU, before the
    actor takes the next trial."""
    import gc

    import torch

    gc.collect()
    _return_freed_heap()
    if torch.cuda.is_available():
        # cuBLAS keeps its workspaces (64 MiB on an H200) in torch's allocator; they come back
        # on the next matrix product. Their 64.0 MiB was all a LoRA training left (bench/gpu_check.py).
        clear_workspaces = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
        if clear_workspaces is not None:
            clear_workspaces()
        torch.cuda.empty_cache()


def _return_freed_heap() -> None:
    """Hand the memory a finished trial freed back to the system (glibc's malloc_trim).

    Ray runs each trial of a reused actor in a new thread, and glibc gives a thread a heap (arena)
    of its own that keeps what the thread freed: without a trim, a worker's resident memory grew by
    a whole trial's peak (6-7 GB for SmolLM2 at batch_size=16) with every trial it ran, until Ray's
    memory monitor killed a trial, and the round with it.
    """
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    if name is None:
        return
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to trim this way
        return
    trim(0)


def _train_and_report(
    cfg: ForgeConfig,
    context: TrialContext,
    base_source: str,
    scratch: Path,
    report: Callable[[dict[str, float], int, Path], None],
    resume_dir: Path | None,
    last: dict[str, float],
    node: dict[str, str],
    on_step: Callable[[float], None] | None = None,
) -> None:
    """Train from `base_source` (each epoch reported through `report`), then report the final dev accuracy."""
    import torch
    from ray import tune

    from forge_ml.evaluation.evaluate import evaluate_examples
    from forge_ml.evaluation.scorers import make_scorer
    from forge_ml.models.adapters import peft_config_for
    from forge_ml.models.loader import BaseModelRef, load_base_model
    from forge_ml.training import train_sft

    try:
        if os.environ.get(OOM_FAULT_ENV) in (str(cfg.lora.r), "*"):
            raise torch.cuda.OutOfMemoryError(f"injected: CUDA out of memory ({OOM_FAULT_ENV})")
        model = load_base_model(BaseModelRef(base_source, context.base_revision, True), cfg)
        outcome = train_sft(
            cfg,
            model,
            context.tokenizer,
            context.train_dataset,
            context.dev_dataset,
            scratch / "adapter",
            peft_config=peft_config_for(cfg),
            tqdm=False,
            scratch_dir=scratch / "checkpoints",
            on_checkpoint=report,
            on_step=on_step,
            resume_from=resume_dir,
        )
        project_root = Path(cfg.project_dir)
        dev = evaluate_examples(
            outcome.model,
            context.tokenizer,
            context.dev_examples,
            system_prompt=context.system_prompt,
            system_role=cfg.model.system_role,
            cfg=cfg.eval,
            scorer=make_scorer(cfg.eval, project_root),
            label="dev",
        )
        final = {k: v for k, v in last.items() if k != "epoch"}
        tune.report(
            {
                **final,
                "epoch": int(last.get("epoch", cfg.training.epochs)),
                "dev/accuracy": dev.accuracy,
                "train/tokens_per_s": outcome.tokens_per_s,
                "forge/completed": 1.0,
                **node,
            },
            checkpoint=tune.Checkpoint.from_directory(str(outcome.output_dir)),
        )
    except torch.cuda.OutOfMemoryError as exc:  # this trial fails alone; the round goes on
        raise RuntimeError(
            f"CUDA out of memory in this trial (batch_size={cfg.training.batch_size}, lora.r={cfg.lora.r}, "
            f"max_seq_length={cfg.training.max_seq_length}): {first_line(exc)}"
        ) from None
