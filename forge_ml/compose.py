"""Hydra composition for a project: validate up front, then run jobs through Hydra's launcher.

The project's forge.yaml is the primary config; packaged groups come from
forge-ml's conf/ tree (forge_ml/packaged.py, added by hydra_plugins/forge_ml_searchpath). Every composition gets
`project_dir` set to the absolute project path, so relative paths never depend on the
working directory of a Hydra job.
"""

from __future__ import annotations

import itertools
import logging
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from forge_ml.config import ForgeConfig, did_you_mean, validate_config
from forge_ml.config.overrides import hydra_string, schema_type
from forge_ml.errors import ConfigError, ForgeError, InputError, RuntimeFault, describe, first_line
from forge_ml.project import CONFIG_FILE, Project, read_utf8
from forge_ml.search import check_override_syntax

log = logging.getLogger(__name__)
MAX_PREVALIDATED_JOBS = 64


def _project_override(project: Project) -> str:
    """`++project_dir=` the project's path, quoted: accents, spaces, commas, brackets, quotes."""
    if "${" in str(project.root):  # Hydra's own settings (the job's log file) would resolve it again
        raise InputError(
            f"{project.root}: the path holds '${{', which Hydra reads as an interpolation; "
            "rename or move the directory"
        )
    return f"++project_dir={hydra_string(str(project.root))}"


def _forced(overrides: list[str]) -> list[str]:
    """`overrides` with each plain `key=value` of a setting the schema documents as `++key=value`.

    A packaged group option writes only the settings it changes (model/tiny.yaml has no
    `chat_template`, lora/full.yaml no `r`), and Hydra refuses to override a key the composed config
    lacks unless told to add it. Every documented setting takes a plain override, as in forge.yaml;
    anything else (a typo, a group choice, `hydra.*`) is left for Hydra and the schema to judge.
    """
    return [f"++{line}" if _setting(line) else line for line in overrides]


def _setting(line: str) -> bool:
    key = line.split("=", 1)[0].strip()
    if not key or key[0] in "+~" or "@" in key or "/" in key:
        return False
    try:
        schema_type(key)
    except ConfigError:
        return False
    return True


def _as_given(line: str, given: list[str]) -> str:
    """A job's override as the user wrote it: without the `++` that `_forced` added to a plain one."""
    key = line.split("=", 1)[0]
    if line.startswith("++") and any(_setting(g) and g.split("=", 1)[0] == key[2:] for g in given):
        return line[2:]
    return line


# Hydra's words for a config group option that does not exist, e.g. `model=nosuch`
_NO_OPTION = re.compile(r"^(?:In '(?P<parent>[^']+)': )?Could not find '(?P<group>.+)/(?P<option>[^/']+)'")


def _composition_error(project: Project, exc: Exception, overrides: list[str]) -> ConfigError:
    """Name where the bad key or option came from: a command-line override, else forge.yaml."""
    lines = [line for line in str(exc).splitlines() if line.strip()]
    message = "; ".join(lines[:3]) or type(exc).__name__
    cause = exc.__cause__
    key = getattr(cause, "full_key", None)
    if key and "not in struct" in str(cause):
        message = f"unknown key '{key}'{did_you_mean(key)}"
    elif lines and (missing := _NO_OPTION.match(lines[0])):
        key = missing["group"]
        message = f"'{key}' has no option '{missing['option']}'"
        if missing["parent"] not in (None, CONFIG_FILE.removesuffix(".yaml")):
            message += f" (in '{missing['parent']}')"
        options = _listed_options(lines)
        message += f" (options: {', '.join(options)})" if options else ""
    given = next((o for o in overrides if key and o.split("=", 1)[0].lstrip("+~") == key), None)
    if given is not None:
        return ConfigError(f"command line: {given}: {message}")
    return ConfigError(f"{project.config_file}: cannot compose the config: {message}")


def _listed_options(lines: list[str]) -> list[str]:
    """The options Hydra lists, one per tab-indented line, under "Available options in '<group>':"."""
    start = next((i for i, line in enumerate(lines) if line.startswith("Available options in")), None)
    if start is None:
        return []
    options = []
    for line in lines[start + 1 :]:
        if not line.startswith("\t"):
            break
        options.append(line.strip())
    return options


def _yaml_error(project: Project, exc: Exception) -> ConfigError:
    """A YAML syntax error as `file:line: not valid YAML (problem at column N)`."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or getattr(exc, "context", None) or first_line(exc)
    if mark is None:
        return ConfigError(f"{project.config_file}: not valid YAML ({problem})")
    where = mark.name if mark.name and not mark.name.startswith("<") else str(project.config_file)
    return ConfigError(f"{where}:{mark.line + 1}: not valid YAML ({problem} at column {mark.column + 1})")


def compose_config(project: Project, overrides: list[str]) -> ForgeConfig:
    """Return the validated config of `project` with command-line `overrides` applied."""
    import yaml
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    check_override_syntax(overrides)
    if not read_utf8(project.config_file).strip():
        raise ConfigError(
            f"{project.config_file}: empty; it holds the project's name and its defaults list "
            "(`forge-ml init` writes one)"
        )
    try:
        with initialize_config_dir(config_dir=str(project.root), version_base=None, job_name="forge-ml"):
            cfg = compose(
                config_name=CONFIG_FILE.removesuffix(".yaml"),
                overrides=[*_forced(overrides), _project_override(project)],
            )
    except yaml.YAMLError as exc:
        raise _yaml_error(project, exc) from None
    except UnicodeDecodeError as exc:
        read_utf8(project.config_file)  # raises InputError naming the line
        raise _composition_error(project, exc, overrides) from None
    except (HydraException, OmegaConfBaseException, ValueError) as exc:
        raise _composition_error(project, exc, overrides) from None
    return validate_config(cfg)


def expand_sweeps(overrides: list[str]) -> list[list[str]]:
    """Return the override lists of a multirun's jobs (discrete sweeps only), capped for pre-validation."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    check_override_syntax(overrides)
    parsed = OverridesParser.create().parse_overrides(overrides)
    choices: list[list[str]] = []
    for override in parsed:
        key = override.get_key_element()
        if override.is_sweep_override():
            if not override.is_discrete_sweep():
                continue  # interval() needs a sweeper that samples it; the job validates its own value
            choices.append([f"{key}={value}" for value in override.sweep_string_iterator()])
        else:
            choices.append([override.input_line])
    return [list(combo) for combo in itertools.islice(itertools.product(*choices), MAX_PREVALIDATED_JOBS)]


@dataclass
class JobResult:
    overrides: list[str]
    value: Any = None
    error: BaseException | None = None


@dataclass
class LaunchResult:
    jobs: list[JobResult] = field(default_factory=list)
    rounds: list[Any] = field(default_factory=list)  # RoundResults of the `tune` sweeper (it runs no job)

    @property
    def failed(self) -> list[JobResult]:
        return [job for job in self.jobs if job.error is not None]


_launching: LaunchResult | None = None  # the launch in progress, for `report_round`


def report_round(round_result: Any) -> None:
    """The `tune` sweeper's round, handed to the command that launched it (its envelope names the round)."""
    if _launching is not None:
        _launching.rounds.append(round_result)


def launch(
    project: Project,
    overrides: list[str],
    job: Callable[[ForgeConfig, dict[str, Any]], Any],
    *,
    multirun: bool = False,
    job_name: str = "train",
    hydra_flags: list[str] | None = None,
) -> LaunchResult:
    """Run `job` once per Hydra job (one for a run, one per sweep point for a multirun).

    `job` gets the validated config and the Hydra context (tags describing the sweep). An
    error inside one job is recorded and the sweep goes on; the caller turns the results
    into an exit code.
    """
    import hydra
    from hydra.core.hydra_config import HydraConfig
    from hydra.errors import HydraException
    from hydra.types import RunMode
    from omegaconf import DictConfig
    from omegaconf.errors import OmegaConfBaseException

    result = LaunchResult()

    def task(raw: DictConfig) -> Any:
        hc = HydraConfig.get()
        job_overrides = [_as_given(line, overrides) for line in hc.overrides.task]
        record = JobResult(overrides=job_overrides)
        result.jobs.append(record)
        context: dict[str, Any] = {
            "forge.overrides": " ".join(o for o in job_overrides if "project_dir" not in o)
        }
        if hc.mode == RunMode.MULTIRUN:
            context |= {"forge.sweep": hc.sweep.dir, "forge.sweep_job": hc.job.num}
        try:
            cfg = validate_config(raw)
            record.value = job(cfg, context)
        except Exception as exc:  # recorded; the launcher moves on to the next job
            record.error = exc
            log.debug("job failed", exc_info=True)
            return None
        except KeyboardInterrupt as exc:
            record.error = exc
            raise
        return record.value

    main = hydra.main(
        config_path=str(project.root), config_name=CONFIG_FILE.removesuffix(".yaml"), version_base=None
    )(task)
    argv = [
        "forge-ml",
        *(hydra_flags or []),
        *_forced(overrides),
        _project_override(project),
        f"hydra.job.name={job_name}",
    ]
    if multirun:
        argv.insert(1, "--multirun")
    global _launching
    saved, full_error = sys.argv, os.environ.get("HYDRA_FULL_ERROR")
    sys.argv, _launching = argv, result
    os.environ["HYDRA_FULL_ERROR"] = (
        "1"  # Hydra raises instead of printing and exiting 1: the class decides the code
    )
    try:
        main()
    except SystemExit as exc:  # --help, --cfg, --info: Hydra prints and exits
        if exc.code not in (0, None):
            raise ConfigError(
                f"Hydra could not run the job (exit {exc.code}); see the message above"
            ) from None
    except ForgeError:
        raise
    except (HydraException, OmegaConfBaseException) as exc:
        raise ConfigError(f"Hydra could not run the job: {first_line(exc)}") from exc
    except Exception as exc:  # the sweeper or launcher failed while running: a retry may help
        raise RuntimeFault(f"the Hydra sweep failed while running: {describe(exc)}") from exc
    finally:
        sys.argv, _launching = saved, None
        if full_error is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        else:
            os.environ["HYDRA_FULL_ERROR"] = full_error
    return result
