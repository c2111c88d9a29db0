"""Benchmark: batched against one-by-one greedy generation on the gold set.

Trains nothing: the tiny model of the drone-router example is built (random weights) and both
sides call forge_ml.models.generation.generate_batched on the same gold prompts, rendered
with the project's system prompt, with the same max_new_tokens:

  batched     batch_size = the project's eval.batch_size (32), left-padded as in `forge-ml train`
  one-by-one  batch_size = 1

An untrained model may stop at its end-of-turn token on some prompts; both sides see the same
prompts, and the token counts are reported. The two are measured alternately after an untimed
warm-up; the verdict uses the ratio of the medians. Bound: batched/one-by-one >= 3x.

Noise is handled as in train_overhead.py: wait (up to --quiet-wait s) for a quiet machine
before each measurement, and leave out of the medians the runs taken while other processes
used more than 0.25 cores, as long as each side keeps at least one quiet run.

With `--model smollm2-135m-instruct` the untrained real base answers instead (in prose, so most
answers run to max_new_tokens; the few that stop early at <|im_end|> are counted as generated,
not as max_new_tokens); `--gold N` keeps N of the 100 gold prompts.

    .venv/bin/python bench/eval_batching.py [--repeats 3] [--max-new-tokens 32] [--threads 2]
    .venv/bin/python bench/eval_batching.py --model smollm2-135m-instruct --gold 40
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from _common import (
    OtherLoad,
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

BOUND = 3.0


@dataclass
class GenerationCounter:
    """Wraps model.generate to count decode steps and tokens (up to end-of-sequence) per call."""

    eos_ids: set[int]
    calls: int = 0
    tokens: int = 0  # new tokens per row up to and including the first end-of-sequence token
    slots: int = 0  # rows x decode steps: what the batch computed, padding after EOS included

    def wrap(self, model: Any) -> None:
        original = model.generate

        def generate(*args: Any, **kwargs: Any) -> Any:
            out = original(*args, **kwargs)
            width = kwargs["input_ids"].shape[1]
            new = out[:, width:].tolist()
            self.calls += 1
            self.slots += sum(len(row) for row in new)
            for row in new:
                ends = [n for n, tok in enumerate(row) if tok in self.eos_ids]
                self.tokens += ends[0] + 1 if ends else len(row)
            return out

        model.generate = generate  # an instance attribute shadows the method for generate_batched

    def reset(self) -> None:
        self.calls = self.tokens = self.slots = 0


@dataclass
class Figures:
    mode: str
    batch_size: int
    examples: int
    seconds: float
    calls: int
    tokens: int
    slots: int
    load: OtherLoad
    outputs: list[str] = field(default_factory=list, repr=False)

    @property
    def examples_per_s(self) -> float:
        return self.examples / self.seconds if self.seconds else 0.0


def end_ids(model: Any, tokenizer: Any) -> set[int]:
    """Return the token ids that end a generation, as forge-ml's generation stops at them."""
    from forge_ml.models.generation import stop_token_ids

    return set(stop_token_ids(model.generation_config, tokenizer))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=positive_int, default=3, help="measurements per side (default 3)")
    parser.add_argument(
        "--max-new-tokens", type=positive_int, default=32, help="tokens generated per prompt (32)"
    )
    parser.add_argument(
        "--batch-size", type=positive_int, default=None, help="batched side (default: eval.batch_size)"
    )
    parser.add_argument("--threads", type=positive_int, default=2, help="torch threads (default 2)")
    parser.add_argument(
        "--quiet-wait",
        type=float,
        default=120.0,
        help="seconds to wait for a quiet machine before each run (120)",
    )
    parser.add_argument(
        "--model",
        default="tiny",
        help="model preset: tiny (default) or smollm2-135m-instruct (the real base)",
    )
    parser.add_argument(
        "--gold", type=positive_int, default=None, help="gold prompts kept (default: all 100)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary project")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(argv)
    quiet_libraries()
    from forge_ml.data.project_data import load_project_data
    from forge_ml.models.generation import generate_batched, render_prompt
    from forge_ml.models.loader import load_base_model, load_tokenizer, resolve_base

    began = time.perf_counter()
    with example_project(model_overrides(opts.model), keep=opts.keep, gold=opts.gold) as bp:
        cfg, project = bp.cfg, bp.project
        data = load_project_data(project, cfg.task)
        base = resolve_base(cfg, project, data.training_text())
        tokenizer = load_tokenizer(base, cfg.model, project)
        model = load_base_model(base, cfg)
        set_threads(opts.threads)
        role = cfg.model.system_role
        prompts = [
            render_prompt(tokenizer, data.system_prompt, ex.user, system_role=role) for ex in data.gold
        ]
        batch_size = opts.batch_size or cfg.eval.batch_size
        counter = GenerationCounter(eos_ids=end_ids(model, tokenizer))
        counter.wrap(model)
        print(
            f"eval_batching: drone-router gold set ({len(prompts)} prompts), model={opts.model} untrained, greedy, "
            f"max_new_tokens={opts.max_new_tokens}, batched batch_size={batch_size}, threads={opts.threads}, "
            f"repeats={opts.repeats}"
        )

        def measure(mode: str, size: int) -> Figures:
            counter.reset()
            with other_load() as load:
                started = time.perf_counter()
                outputs = generate_batched(
                    model, tokenizer, prompts, batch_size=size, max_new_tokens=opts.max_new_tokens
                )
                seconds = time.perf_counter() - started
            calls, tokens, slots = counter.calls, counter.tokens, counter.slots
            return Figures(mode, size, len(prompts), seconds, calls, tokens, slots, load, outputs)

        # untimed warm-up: first-call costs land here, not on whichever side runs first
        generate_batched(model, tokenizer, prompts[:batch_size], batch_size=batch_size, max_new_tokens=4)
        generate_batched(model, tokenizer, prompts[:2], batch_size=1, max_new_tokens=4)

        runs: list[Figures] = []
        for i in range(opts.repeats):
            sides = (("one-by-one", 1), ("batched", batch_size))
            for mode, size in sides if i % 2 == 0 else sides[::-1]:  # ABBA: drift favours neither
                wait_for_quiet(opts.quiet_wait)
                fig = measure(mode, size)
                runs.append(fig)
                print(
                    f"  [{i + 1}/{opts.repeats}] {mode:10s} {fig.examples_per_s:8.2f} examples/s "
                    f"({fig.seconds:.2f} s, other load {fig.load} cores)"
                )
                sys.stdout.flush()
                gc.collect()

    print()
    print_table(
        ["run", "mode", "batch", "calls", "new tokens", "token slots", "seconds", "examples/s", "other load"],
        [
            [
                n + 1,
                r.mode,
                r.batch_size,
                r.calls,
                r.tokens,
                r.slots,
                f"{r.seconds:.2f}",
                f"{r.examples_per_s:.2f}",
                r.load,
            ]
            for n, r in enumerate(runs)
        ],
        left=2,
    )
    all_single = [r for r in runs if r.mode == "one-by-one"]
    all_batched = [r for r in runs if r.mode == "batched"]
    reference, candidate = all_single[0].outputs, all_batched[0].outputs
    agree = sum(a == b for a, b in zip(reference, candidate))
    stable = all(r.outputs == reference for r in all_single) and all(
        r.outputs == candidate for r in all_batched
    )
    print()
    print(
        f"agreement: {agree}/{len(prompts)} prompts give the same output batched and one by one"
        f"{'' if stable else ' (outputs also varied between repeats of one side)'}"
    )
    chosen = pick_quiet(all_single, all_batched)
    single, batched = chosen.first, chosen.second
    single_eps = [r.examples_per_s for r in single]
    batched_eps = [r.examples_per_s for r in batched]
    single_med, batched_med = median(single_eps), median(batched_eps)
    if chosen.note:
        print(f"noise: {chosen.note}")
    print(
        f"median examples/s: one-by-one {single_med:.2f} ({len(single_eps)} run(s), spread {spread(single_eps):.1%}), "
        f"batched {batched_med:.2f} ({len(batched_eps)} run(s), spread {spread(batched_eps):.1%})"
    )
    print(f"total wall time: {time.perf_counter() - began:.0f} s")
    if agree * 2 <= len(prompts):
        print(f"error: batched and one-by-one outputs agree on only {agree}/{len(prompts)} prompts")
        return 2
    ratio = batched_med / single_med if single_med else 0.0
    ok = ratio >= BOUND
    print(
        f"eval_batching: batched/one-by-one = {ratio:.1f}x, of medians (every pairing of runs:"
        f" {ratio_range(batched_eps, single_eps)}) (>= {BOUND:g}x: {'PASS' if ok else 'FAIL'}{chosen.verdict_suffix})"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
