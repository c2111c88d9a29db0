"""What a flywheel checks before its first round: faults a round would meet only after its spend.

A round plans (Claude's dollars), writes data, and runs hours of trials before its gold evaluation;
a configuration that gold evaluation cannot work with is refused here, before any of that.
"""

from __future__ import annotations

from forge_ml.config import ForgeConfig
from forge_ml.data.project_data import ProjectData
from forge_ml.errors import ConfigError
from forge_ml.evaluation.room import check_answer_room
from forge_ml.models.loader import load_tokenizer, quantization_config, resolve_base
from forge_ml.models.tiny import train_tokenizer
from forge_ml.project import Project


def check_gold_eval_here(cfg: ForgeConfig) -> None:
    """Each round's gold evaluation loads the 4-bit base in this process (Ray's workers run only the
    trials): without CUDA here it would fail after the round's trials, so the loop does not start."""
    if cfg.lora.method != "qlora":
        return
    try:
        quantization_config(cfg.lora)
    except ConfigError as exc:
        raise ConfigError(
            f"{exc}. The flywheel scores each round's best adapter on gold in this process, after the "
            "trials (which Ray may place on GPU workers), so it checks before the first round. On a Ray "
            "cluster, run it where it sees a GPU: on a head node that has one (docker/compose.yaml's "
            "does), or on a worker through `forge-ml submit --entrypoint-num-gpus 1 ...`, which holds "
            "that GPU for the whole job"
        ) from None


def check_answer_room_here(cfg: ForgeConfig, project: Project, data: ProjectData) -> None:
    """Refuse an `eval.max_new_tokens` shorter than so many of gold's answers (measured with the base
    model's tokenizer) that no round could reach `eval.target_accuracy`, whatever it learned."""
    if cfg.model.is_tiny:  # the tokenizer the round's tiny model gets, without building a model
        tokenizer = train_tokenizer(data.training_text(), cfg.model.tiny.vocab_size)
    else:
        tokenizer = load_tokenizer(resolve_base(cfg, project, data.training_text()), cfg.model, project)
    check_answer_room(tokenizer, data.gold, cfg.eval, refuse=True)
