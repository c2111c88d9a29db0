"""The `tune` sweeper: Hydra's Sweeper interface over forge_ml.tuning.engine.run_round.

No `from __future__ import annotations` here: Hydra imports plugin modules outside
sys.modules, where dataclasses cannot resolve string annotations. `Optional[...]`, not `X | None`:
OmegaConf reads the structured config's annotations and knows `Optional`.
"""
# ruff: noqa: UP045

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from hydra.core.utils import JobReturn, JobStatus
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict

log = logging.getLogger(__name__)


@dataclass
class TuneSweeperConf:
    """`hydra.sweeper.*`: the round's size and strategy (as Hydra's Optuna sweeper has `n_trials`);
    null keeps the project's `tune.*` value."""

    _target_: str = "hydra_plugins.forge_ml_tune_sweeper.tune_sweeper.TuneSweeper"
    params: dict[str, str] = field(default_factory=dict)  # extra search space, as in the config file
    num_samples: Optional[int] = None  # trials in the round (tune.num_samples)
    max_concurrent_trials: Optional[int] = None  # trials at once (tune.max_concurrent_trials)
    searcher: Optional[str] = None  # optuna | random (tune.searcher)
    scheduler: Optional[str] = None  # asha | fifo (tune.scheduler)


SETTINGS = ("num_samples", "max_concurrent_trials", "searcher", "scheduler")  # each a key of `tune`


ConfigStore.instance().store(group="hydra/sweeper", name="tune", node=TuneSweeperConf, provider="forge-ml")


class TuneSweeper(Sweeper):
    def __init__(self, params: Optional[dict[str, str]] = None, **settings: Any) -> None:
        self.params = dict(params or {})
        self.settings = {k: v for k, v in settings.items() if k in SETTINGS and v is not None}
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.hydra_context = hydra_context
        self.config = config

    def sweep(self, arguments: list[str]) -> list[list[JobReturn]]:
        from forge_ml.compose import report_round
        from forge_ml.config import validate_config
        from forge_ml.console import print_round
        from forge_ml.search import split_sweep_overrides, with_space
        from forge_ml.tuning.engine import run_round

        space, fixed = split_sweep_overrides(arguments)
        job_cfg = self.hydra_context.config_loader.load_sweep_config(
            master_config=self.config, sweep_overrides=fixed
        )
        with open_dict(job_cfg):
            hydra_cfg = job_cfg.pop("hydra")
            for key, value in self.settings.items():  # validated with the rest of tune.* below
                job_cfg.tune[key] = value
        cfg = with_space(validate_config(job_cfg), {**self.params, **space})
        sweep_dir = str(hydra_cfg.sweep.dir)
        Path(sweep_dir).mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, Path(sweep_dir) / "multirun.yaml")
        result = run_round(cfg, tags={"forge.sweep": sweep_dir})
        report_round(result)
        returns = []
        for index, trial in enumerate(result.trials):
            overrides = [*fixed, *(f"{k}={v}" for k, v in trial.config.items())]
            ret = JobReturn(
                overrides=overrides,
                cfg=job_cfg,
                hydra_cfg=OmegaConf.create({"hydra": hydra_cfg}),
                working_dir=str(Path(sweep_dir) / str(index)),
                task_name=str(hydra_cfg.job.name),
                status=JobStatus.FAILED if trial.status == "FAILED" else JobStatus.COMPLETED,
                _return_value=trial.metrics.get(cfg.tune.metric),
            )
            returns.append(ret)
        print_round(result, cfg.tune.metric)
        return [returns]
