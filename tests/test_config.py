"""Every shipped config composes and validates without loading weights; bad values name the key."""

from __future__ import annotations

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from forge_ml.compose import compose_config, expand_sweeps, launch
from forge_ml.config import validate_config
from forge_ml.config.overrides import hydra_string
from forge_ml.errors import ConfigError, InputError
from forge_ml.packaged import conf_root
from forge_ml.project import init_project, project_name

CONF = conf_root()
GROUPS = ["model", "lora", "training", "eval", "task", "tracking", "tune", "experiment"]


def shipped_options() -> list[tuple[str, str]]:
    return [(group, p.stem) for group in GROUPS for p in sorted((CONF / group).glob("*.yaml"))]


@pytest.fixture
def blank(tmp_path):
    return init_project(tmp_path / "blank")


def test_every_group_has_the_presets_the_docs_promise():
    options = set(shipped_options())
    for needed in [
        ("model", "tiny"),
        ("lora", "default"),
        ("lora", "qlora"),
        ("lora", "full"),
        ("tracking", "local"),
        ("tracking", "server"),
    ]:
        assert needed in options
    assert len([o for o in options if o[0] == "model" and o[1] != "tiny"]) >= 3


@pytest.mark.parametrize(("group", "option"), shipped_options())
def test_shipped_config_composes_and_validates(blank, group, option):
    overrides = [f"{group}={option}"]
    if (group, option) == ("lora", "qlora"):
        overrides.append("model=qwen2.5-0.5b-instruct")  # qlora quantizes a pretrained base
    cfg = compose_config(blank, overrides)
    assert cfg.project_dir == str(blank.root)
    assert cfg.name == "blank"


def test_every_shipped_file_says_how_to_use_it():
    for group, option in shipped_options():
        text = (CONF / group / f"{option}.yaml").read_text()
        assert text.lstrip().startswith("#"), f"{group}/{option}.yaml has no header comment"


def test_example_project_composes(example_project):
    cfg = compose_config(example_project, [])
    assert cfg.name == "drone-router"
    assert cfg.eval.scorer == "json_cmd"
    assert cfg.model.is_tiny and cfg.training.learning_rate == pytest.approx(3e-3)


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        ("lora.rank=8", "lora.rank"),
        ("lora.r=-1", "lora.r"),
        ("training.learning_rate=10", "training.learning_rate"),
        ("training.epochs=abc", "training.epochs"),
        ("eval.scorer=fuzzy", "eval.scorer"),
        ("+model.colour=red", "model.colour"),
        ("model=no-such-preset", "model"),
        ("tracking.uri=user:pw@host", "tracking.uri"),
    ],
)
def test_bad_override_is_a_config_error_naming_the_key(blank, override, fragment):
    with pytest.raises(ConfigError) as info:
        compose_config(blank, [override])
    assert fragment in str(info.value)
    assert info.value.exit_code == 1


def test_all_range_problems_are_reported_together():
    with pytest.raises(ConfigError) as info:
        validate_config(
            {"name": "x", "project_dir": "/p", "lora": {"r": 0, "dropout": 2.0}, "training": {"epochs": 0}}
        )
    message = str(info.value)
    for key in ("lora.r", "lora.dropout", "training.epochs"):
        assert key in message


def test_qlora_on_the_tiny_model_is_refused(blank):
    with pytest.raises(ConfigError, match="qlora"):
        compose_config(blank, ["model=tiny", "lora=qlora"])


def test_project_file_typo_is_caught(blank):
    cfg_file = blank.config_file
    cfg_file.write_text(cfg_file.read_text() + "training:\n  learnig_rate: 0.1\n")
    with pytest.raises(ConfigError, match=r"training\.learnig_rate"):
        compose_config(blank, [])


def test_expand_sweeps_lists_each_job():
    jobs = expand_sweeps(["lora.r=4,8", "training.epochs=1", "training.seed=range(1,3)"])
    assert jobs == [
        ["lora.r=4", "training.epochs=1", "training.seed=1"],
        ["lora.r=4", "training.epochs=1", "training.seed=2"],
        ["lora.r=8", "training.epochs=1", "training.seed=1"],
        ["lora.r=8", "training.epochs=1", "training.seed=2"],
    ]


def test_a_new_project_starts_on_a_pretrained_base(blank):
    """A blank project is someone's own task with a few examples: the tiny model (random weights)
    learns nothing from so few, so the scaffold names a pretrained base."""
    cfg = compose_config(blank, [])
    assert not cfg.model.is_tiny and cfg.model.name_or_path == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert cfg.training.learning_rate == pytest.approx(2e-4)  # `training: default`, made for such a base
    assert "`tiny` only proves the plumbing" in blank.config_file.read_text()


@settings(max_examples=300, deadline=None)
@given(
    st.text(st.characters(codec="utf-8", exclude_categories=("Cs",), exclude_characters="\x00"), max_size=40)
)
@example("\\${")  # a backslash before `${`, which OmegaConf reads as an escaped backslash
@example("a\\\\${x}'\\")
def test_any_text_quoted_for_hydra_composes_back_to_itself(value):
    """`hydra_string` is what the project's path travels as (`++project_dir=...`): Hydra's override
    grammar, then OmegaConf's interpolation, give back exactly the text."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    assume(value != "???")  # OmegaConf's "missing"; a project's path is absolute
    (override,) = OverridesParser.create().parse_overrides([f"++project_dir={hydra_string(value)}"])
    assert OmegaConf.create({"project_dir": override.value()}).project_dir == value


@pytest.mark.parametrize(
    "name", ["voyages-été", "my task (copy), 2", "it's [1]", "予約", "dollar $HOME", "back\\slash\\"]
)
def test_a_project_composes_wherever_it_lives(tmp_path, name):
    """A project directory named as users name them (accents, spaces, commas, brackets, quotes)."""
    project = init_project(tmp_path / name)
    cfg = compose_config(project, ["training.epochs=2"])
    assert cfg.project_dir == str(project.root) and cfg.training.epochs == 2
    # and through Hydra's launcher, a sweep of two jobs (a comma in the path is no third)
    result = launch(
        project, ["training.epochs=1,3"], lambda c, _: (c.project_dir, c.training.epochs), multirun=True
    )
    assert [job.value for job in result.jobs] == [(str(project.root), 1), (str(project.root), 3)]


def test_init_names_a_project_after_its_directory_without_what_a_name_may_not_hold(tmp_path):
    assert project_name("voyages-été") == "voyages-été"
    assert project_name("me@host:proj\\v2") == "me-host-proj-v2"  # the experiment's and model's name
    assert project_name("tab\there") == "tab-here" and project_name("$" + "{x}") == "-{x}"
    for name in ["#1", "a: b", "- x", "true", "123", "it's [1]"]:  # YAML would read these otherwise
        project = init_project(tmp_path / name)
        assert compose_config(project, []).name == project_name(name)


def test_a_project_path_holding_an_interpolation_is_refused_naming_it(tmp_path):
    project = init_project(tmp_path / "dollar ${x}")
    assert "name: dollar -{x}\n" in project.config_file.read_text()  # the name holds none
    with pytest.raises(InputError, match=r"dollar \$\{x\}: the path holds '\$\{'") as info:
        compose_config(project, [])
    assert info.value.exit_code == 1


def _settings(node: type, prefix: str = "") -> list[tuple[str, object]]:
    """Every scalar or list setting of the schema below `node`, with its default value."""
    import dataclasses
    import typing

    found = []
    instance = node()
    hints = typing.get_type_hints(node)
    for f in dataclasses.fields(node):
        kind, value = hints[f.name], getattr(instance, f.name)
        if dataclasses.is_dataclass(kind):
            found += _settings(kind, f"{prefix}{f.name}.")
        elif not isinstance(value, dict):
            found.append((f"{prefix}{f.name}", value))
    return found


def _spelled(value: object) -> str:
    """`value` in Hydra's override grammar."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return hydra_string(value)
    if isinstance(value, list):
        return "[" + ",".join(_spelled(v) for v in value) + "]"
    return repr(value)


def _group_settings() -> list[tuple[str, str, str, object]]:
    """(group, option, key, default) for each setting of each section that has packaged options."""
    import dataclasses
    import typing

    from forge_ml.config import ForgeConfig

    hints = typing.get_type_hints(ForgeConfig)
    rows = []
    for group, option in shipped_options():
        kind = hints.get(group)
        if kind is not None and dataclasses.is_dataclass(kind):
            rows += [(group, option, f"{group}.{key}", value) for key, value in _settings(kind)]
    return rows


GROUP_SETTINGS = _group_settings()


@settings(max_examples=60, deadline=None)
@given(row=st.sampled_from(GROUP_SETTINGS))
def test_every_documented_setting_takes_a_plain_override_under_every_packaged_option(tmp_path_factory, row):
    """A group option writes only what it changes (model/tiny.yaml has no chat_template, lora/full.yaml no r);
    `key=value` still sets any setting the schema documents, as forge.yaml can."""
    from forge_ml.config.keys import config_value

    group, option, key, value = row
    project = init_project(tmp_path_factory.mktemp("settings") / "p")
    try:
        cfg = compose_config(project, [f"{group}={option}", f"{key}={_spelled(value)}"])
    except ConfigError as exc:  # the default may not suit this option's other values (offline_copy.of='')
        assert str(exc).startswith("invalid configuration:") and "unknown key" not in str(exc), str(exc)
        return
    assert config_value(cfg, key) == value


def test_a_jobs_overrides_are_recorded_as_the_user_wrote_them(blank):
    """The `++` given to plain settings stays out of what a run records and a failed job shows."""
    given = ["training.epochs=1", "++training.seed=3", "model.chat_template=x.jinja"]
    (job,) = launch(blank, given, lambda c, context: (context["forge.overrides"], c.model.chat_template)).jobs
    assert job.value == (" ".join(given), "x.jinja")
    assert job.overrides[:3] == given and job.overrides[3].startswith("++project_dir=")
    swept = launch(blank, ["lora.quant_type=nf4,fp4"], lambda c, _: c.lora.quant_type, multirun=True).jobs
    assert [(job.overrides[0], job.value) for job in swept] == [
        ("lora.quant_type=nf4", "nf4"),
        ("lora.quant_type=fp4", "fp4"),
    ]
    assert all(job.overrides[1].startswith("++project_dir=") for job in swept)
