"""The Ray runtime of a round: join a cluster or start a local one, and refuse what cannot run."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from forge_ml import stopping
from forge_ml.config import TuneConfig
from forge_ml.errors import ConfigError, RuntimeFault, first_line
from forge_ml.project import Project
from trainables.scratch import sweep_stale_scratch

log = logging.getLogger(__name__)

_RAY_AUTH_SETUP = "ray._private.authentication.authentication_token_setup"  # where Ray logs that notice


@contextmanager
def ray_runtime(tune_cfg: TuneConfig) -> Iterator[None]:
    """Connect to `tune.address`, or start a local runtime sized by `tune.num_cpus`; shut down what we started.

    Once down, the scratch directories of trials that ran on this machine go (trainables/scratch.py),
    their processes (`note_trial_process`) given a few seconds to exit first."""
    import os

    import ray

    # Trials checkpoint every epoch by design; Ray's snapshot-frequency warning is noise here.
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")  # forge-ml prints its own trial progress
    if ray.is_initialized():
        yield
        return
    kwargs = {"include_dashboard": False, "logging_level": logging.WARNING, "log_to_driver": False}
    try:
        if tune_cfg.address:
            ray.init(address=tune_cfg.address, **kwargs)
        else:  # "local": a runtime of our own, never a cluster `ray start` left on this machine
            # Ray turns token authentication on for a new local runtime (RAY_AUTH_MODE unset) and
            # says so at WARNING on every start: a notice about a runtime only this process uses.
            # (Setting RAY_AUTH_MODE here instead is too late: Ray read its config when imported.)
            logging.getLogger(_RAY_AUTH_SETUP).setLevel(logging.ERROR)
            ray.init(address="local", num_cpus=tune_cfg.num_cpus, **kwargs)
    except ConnectionError as exc:
        raise RuntimeFault(
            f"tune.address={tune_cfg.address!r}: cannot reach the Ray cluster ({exc})"
        ) from exc
    stopping.install()  # ray.init put its own SIGTERM handler (sys.exit) in place of ours
    try:
        yield
    finally:
        ray.shutdown()
        sweep_stale_scratch(wait_for=_trial_pids)
        _trial_pids.clear()


_trial_pids: set[int] = set()  # this machine's trial processes while a runtime is up


def note_trial_process(pid: int, hostname: str | None) -> None:
    """Remember a process that ran a trial, when it ran on this machine (its scratch is swept at shutdown)."""
    import socket

    if hostname == socket.gethostname():
        _trial_pids.add(int(pid))


def storage_path(tune_cfg: TuneConfig, project: Project) -> str:
    """Return where trials keep checkpoints: the configured URI, or <project>/output/ray."""
    if tune_cfg.storage_path:
        if "://" in tune_cfg.storage_path:
            return tune_cfg.storage_path
        return str(project.resolve(tune_cfg.storage_path))
    return str(project.output / "ray")


def check_local_cpus(tune_cfg: TuneConfig) -> None:
    """Refuse, before any work, a trial that asks for more CPUs than the local runtime will have
    (`preflight` checks again against the nodes Ray reports, GPUs and clusters included)."""
    import os

    if tune_cfg.address:
        return
    cpus = tune_cfg.num_cpus or os.cpu_count() or 1
    if tune_cfg.resources.cpu > cpus:
        raise ConfigError(
            f"tune.resources: a trial asks for {tune_cfg.resources.cpu:g} CPU / {tune_cfg.resources.gpu:g} GPU "
            f"but the largest node has {cpus:g} CPU (this machine's local runtime); lower tune.resources.cpu"
        )


def preflight(tune_cfg: TuneConfig, storage: str) -> int:
    """Return the number of live nodes; refuse a request no node can hold or local storage on several nodes."""
    import ray

    nodes = [n for n in ray.nodes() if n.get("Alive")]
    want = {"CPU": tune_cfg.resources.cpu, "GPU": tune_cfg.resources.gpu}
    fits = [n for n in nodes if all(n["Resources"].get(k, 0.0) >= v for k, v in want.items() if v > 0)]
    if not fits:
        biggest = max(
            (f"{n['Resources'].get('CPU', 0):g} CPU / {n['Resources'].get('GPU', 0):g} GPU" for n in nodes),
            default="none",
        )
        raise ConfigError(
            f"tune.resources: a trial asks for {want['CPU']:g} CPU / {want['GPU']:g} GPU but the largest node "
            f"has {biggest}; lower tune.resources or add a bigger node"
        )
    if len(nodes) > 1 and "://" not in storage:
        raise ConfigError(
            f"tune.storage_path: {storage} is local to this machine but the cluster has {len(nodes)} nodes; "
            "set tune.storage_path to a location every node reaches (s3://..., gs://..., or shared NFS as file://...)"
        )
    return len(nodes)


MEMORY_KILL = "running low on memory"  # in what Ray Tune raises when Ray's memory monitor killed a trial


def fit_or_explain(tuner: Any, name: str) -> Any:
    """`tuner.fit()`; a trial killed by Ray's memory monitor ends the round with what to change.

    Ray Tune 2.60 handles a trial killed that way (ray.exceptions.OutOfMemoryError) as an error it
    did not expect: the whole fit raises instead of the one trial failing."""
    try:
        return tuner.fit()
    except RuntimeError as exc:
        if MEMORY_KILL not in str(exc):
            raise
        raise RuntimeFault(
            f"{name}: Ray killed a trial because the machine ran low on memory ({first_line(exc)}); run "
            "fewer trials at once (tune.max_concurrent_trials) or smaller ones (training.batch_size, "
            "training.max_seq_length), or give each more of a node (tune.resources.cpu)"
        ) from None
