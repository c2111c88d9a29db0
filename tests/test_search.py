"""The search-space grammar as a table: expression -> distribution, and every error."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ray.tune.search.sample import Categorical, Float, Integer

from forge_ml.errors import ConfigError
from forge_ml.search import Bound, SearchParam, parse_param, parse_space, split_sweep_overrides


@pytest.mark.parametrize(
    ("key", "expression", "expected"),
    [
        ("lora.r", "choice(8,16,32)", SearchParam("lora.r", "choice", (8, 16, 32))),
        ("training.epochs", "range(1,5)", SearchParam("training.epochs", "choice", (1, 2, 3, 4))),
        ("training.epochs", "range(1,7,2)", SearchParam("training.epochs", "choice", (1, 3, 5))),
        ("lora.dropout", "range(0.0,0.3,0.1)", SearchParam("lora.dropout", "choice", (0.0, 0.1, 0.2))),
        ("lora.dropout", "choice(0,0.1)", SearchParam("lora.dropout", "choice", (0.0, 0.1))),
        (
            "training.learning_rate",
            "interval(1e-5, 1e-3)",
            SearchParam("training.learning_rate", "uniform", low=1e-5, high=1e-3),
        ),
        (
            "training.learning_rate",
            "tag(log, interval(1e-5, 1e-3))",
            SearchParam("training.learning_rate", "loguniform", low=1e-5, high=1e-3),
        ),
        ("lora.alpha", "interval(8, 64)", SearchParam("lora.alpha", "randint", low=8, high=64)),
        ("lora.r", "tag(log, interval(4, 64))", SearchParam("lora.r", "lograndint", low=4, high=64)),
        ("lora.bias", "choice(none, all)", SearchParam("lora.bias", "choice", ("none", "all"))),
        (
            "training.gradient_checkpointing",
            "choice(true,false)",
            SearchParam("training.gradient_checkpointing", "choice", (True, False)),
        ),
    ],
)
def test_expression_to_param(key, expression, expected):
    param = parse_param(key, expression)
    assert param == expected
    assert parse_param(key, param.to_expression()) == param  # the grammar round-trips


@pytest.mark.parametrize(
    ("kind", "domain", "sample_type"),
    [
        ("choice", Categorical, int),
        ("uniform", Float, float),
        ("loguniform", Float, float),
        ("randint", Integer, int),
        ("lograndint", Integer, int),
    ],
)
def test_param_to_tune_domain_samples_inside(kind, domain, sample_type):
    param = SearchParam("lora.r", kind, values=(4, 8), low=4, high=64)
    tune_domain = param.to_tune()
    assert isinstance(tune_domain, domain)
    for _ in range(50):
        value = tune_domain.sample()
        assert isinstance(value, sample_type) and param.contains(value)
    if kind == "randint":  # the upper bound is inclusive, as in the expression
        assert max(tune_domain.sample() for _ in range(2000)) == 64


@pytest.mark.parametrize(
    ("key", "expression", "fragment"),
    [
        ("lora.r", "choice(8,", "does not parse"),
        ("lora.rank", "choice(8,16)", "'lora.rank' is not a config key"),
        ("lora", "choice(1,2)", "config group"),
        ("training.learning_rate", "interval(1e-3, 1e-5)", "low 0.001 must be below high 1e-05"),
        ("training.learning_rate", "tag(log, interval(0, 1e-3))", "log interval needs low > 0"),
        ("lora.r", "interval(4.5, 8)", "integer bounds"),
        ("lora.r", "choice(8, big)", "takes int values"),
        ("lora.r", "16", "is not a sweep"),
        ("training.epochs", "range(5,1)", "empty range"),
        ("tracking.uri", "choice(a,b)", "cannot be searched"),
        ("model.trust_remote_code", "choice(true,false)", "cannot be searched"),
        ("project_dir", "choice(a,b)", "cannot be searched"),
        ("lora.target_modules", "choice(a,b)", "only numbers, booleans and strings"),
    ],
)
def test_bad_expressions_name_the_problem(key, expression, fragment):
    with pytest.raises(ConfigError) as info:
        parse_param(key, expression)
    assert fragment in str(info.value)
    assert info.value.exit_code == 1


def test_bounds_limit_keys_and_ranges():
    bounds = {"lora.r": Bound(choices=(4, 8, 16)), "training.learning_rate": Bound(1e-5, 1e-2)}
    assert set(parse_space({"lora.r": "choice(4,8)"}, bounds)) == {"lora.r"}
    with pytest.raises(ConfigError, match=r"not in planner\.bounds"):
        parse_space({"lora.alpha": "choice(8,16)"}, bounds)
    with pytest.raises(ConfigError, match="value 32 is outside"):
        parse_space({"lora.r": "choice(8,32)"}, bounds)
    with pytest.raises(ConfigError, match=r"leaves planner\.bounds"):
        parse_space({"training.learning_rate": "tag(log, interval(1e-6, 1e-3))"}, bounds)


def test_command_line_splits_into_space_and_fixed_overrides():
    space, fixed = split_sweep_overrides(
        [
            "lora.r=choice(8,16)",
            "training.epochs=2",
            "training.learning_rate=tag(log, interval(1e-4,1e-2))",
            "lora.alpha=8,16",
        ]
    )
    assert space == {
        "lora.r": "choice(8,16)",
        "training.learning_rate": "tag(log, interval(1e-4,1e-2))",
        "lora.alpha": "8,16",
    }
    assert fixed == ["training.epochs=2"]
    assert parse_param("lora.alpha", "8,16") == SearchParam("lora.alpha", "choice", (8, 16))


def test_searcher_warm_start_keeps_only_points_inside_the_space():
    from forge_ml.config import ForgeConfig
    from forge_ml.tuning.engine import make_searcher

    params = parse_space({"lora.r": "choice(4,8)", "training.learning_rate": "interval(1e-4, 1e-2)"})
    inside = {"lora.r": 8, "training.learning_rate": 1e-3}
    outside = {"lora.r": 32, "training.learning_rate": 1e-3}
    searcher = make_searcher(
        ForgeConfig(name="t", project_dir="/p"), params, [(inside, 0.5), (outside, 0.1)], []
    )
    assert searcher._points_to_evaluate == [inside]
    assert searcher._evaluated_rewards == [0.5]


def test_the_searcher_tells_tpe_the_earlier_scores_and_runs_the_first_points_first():
    from forge_ml.config import ForgeConfig
    from forge_ml.search import tune_space
    from forge_ml.tuning.engine import make_searcher

    params = parse_space(
        {"lora.r": "choice(4,8,16)", "training.learning_rate": "tag(log, interval(1e-4, 1e-2))"}
    )
    scored = [
        ({"lora.r": r, "training.learning_rate": lr}, loss)
        for r, lr, loss in [(4, 1e-3, 0.9), (8, 5e-3, 0.4)]
    ]
    first = [{"lora.r": 16, "training.learning_rate": 2e-4}, {"lora.r": 4, "training.learning_rate": 8e-3}]
    outside = {"lora.r": 32, "training.learning_rate": 1e-3}
    searcher = make_searcher(ForgeConfig(name="t", project_dir="/p"), params, scored, [*first, outside])
    searcher.set_search_properties("dev/loss", "min", tune_space(params))
    told = [(t.params, t.value) for t in searcher._ot_study.trials if t.state.name == "COMPLETE"]
    assert told == [(config, loss) for config, loss in scored]  # TPE's model holds both scores
    suggested = [searcher.suggest(f"trial-{i}") for i in range(4)]
    assert suggested[:2] == first  # in order; the point outside the space is dropped
    assert all(params[k].contains(v) for point in suggested[2:] for k, v in point.items())


def _draws(searcher: Any, space: dict[str, Any], count: int) -> list[dict[str, Any]]:
    """The first `count` points a round's searcher hands out."""
    from ray.tune.search import BasicVariantGenerator

    if isinstance(searcher, BasicVariantGenerator):  # a search algorithm: Tune asks it for trials
        searcher.add_configurations({"e": {"run": lambda c: None, "config": space, "num_samples": count}})
        return [trial.config for trial in iter(searcher.next_trial, None)]
    searcher.set_search_properties("dev/loss", "min", space)
    return [searcher.suggest(f"t{i}") for i in range(count)]


@pytest.mark.parametrize("kind", ["random", "optuna"])
def test_each_round_samples_anew_and_the_same_history_samples_alike(kind):
    """Every round builds a fresh searcher. Seeded alike, a random searcher over an unchanged space
    drew the same points round after round (and TPE the same start-up points)."""
    from forge_ml.config import ForgeConfig
    from forge_ml.search import tune_space
    from forge_ml.tuning.engine import make_searcher

    params = parse_space(
        {"lora.r": "choice(4,8,16,32)", "training.learning_rate": "tag(log, interval(1e-5, 1e-2))"}
    )
    cfg = ForgeConfig(name="t", project_dir="/p")
    cfg.tune.searcher, cfg.tune.max_concurrent_trials = kind, 3  # the random one hands out no more at once

    def round_draws(scored: list[tuple[dict[str, Any], float]]) -> list[dict[str, Any]]:
        return _draws(make_searcher(cfg, params, scored, []), tune_space(params), 3)

    round_1 = round_draws([])
    round_2 = round_draws([({"lora.r": 8, "training.learning_rate": 1e-3}, 0.5)])
    assert len(round_1) == len(round_2) == 3
    assert round_1 != round_2
    assert round_draws([]) == round_1  # deterministic: the same history gives the same draws


def _number(value: float) -> str:
    return repr(value) if value != int(value) else str(int(value))


@st.composite
def foreign_spellings(draw) -> tuple[str, str, SearchParam]:
    """A distribution as Ray Tune, Optuna or W&B write it, and the parameter it means."""
    form = draw(st.sampled_from(["loguniform", "uniform", "randint", "lograndint", "grid_search"]))
    prefix = draw(st.sampled_from(["", "tune."]))
    if form in ("loguniform", "uniform"):
        low = draw(st.floats(1e-6, 0.5, allow_nan=False))
        high = draw(st.floats(low * 1.01, 1.0, allow_nan=False))
        text = f"training.learning_rate={prefix}{form}({_number(low)}, {_number(high)})"
        return text, "training.learning_rate", SearchParam("training.learning_rate", form, low=low, high=high)
    if form in ("randint", "lograndint"):
        low = draw(st.integers(1, 60))
        high = draw(st.integers(low + 2, 128))  # Ray's upper bound is exclusive
        kind = "randint" if form == "randint" else "lograndint"
        return (
            f"lora.r={prefix}{form}({low},{high})",
            "lora.r",
            SearchParam("lora.r", kind, low=low, high=high - 1),
        )
    values = tuple(draw(st.lists(st.integers(1, 64), min_size=2, max_size=5, unique=True)))
    text = f"lora.r={prefix}grid_search([{', '.join(map(str, values))}])"
    return text, "lora.r", SearchParam("lora.r", "choice", values=values)


@settings(max_examples=150, deadline=None)
@given(foreign_spellings())
def test_a_distribution_spelled_as_ray_or_optuna_does_is_refused_with_its_hydra_spelling(case):
    from forge_ml.search import check_override_syntax

    text, key, meant = case
    with pytest.raises(ConfigError) as info:
        check_override_syntax([text])
    message = str(info.value)
    assert message.startswith(f"command line: {text}: cannot parse it") and info.value.exit_code == 1
    hint = message.split(" in Hydra's grammar that is ", 1)[1].split("; the override grammar", 1)[0]
    assert hint.startswith(f"{key}=")
    check_override_syntax([hint])  # what it suggests parses
    parsed = parse_param(key, hint.split("=", 1)[1])
    assert (parsed.kind, parsed.values) == (meant.kind, meant.values)
    assert parsed.low == pytest.approx(meant.low) and parsed.high == pytest.approx(meant.high)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.from_regex(r"[a-z_]{1,12}", fullmatch=True),
            st.from_regex(r"[A-Za-z0-9.:_-]{1,16}", fullmatch=True),
        ),
        min_size=1,
        max_size=4,
    ),
    st.sampled_from(["s3://bucket/rounds", "gs://b/p", "http://127.0.0.1:5000/x"]),
)
def test_an_unquoted_value_with_a_query_is_refused_with_its_quoted_spelling(query, base):
    """`tune.storage_path=s3://b/p?endpoint_override=…&scheme=http` (what S3-compatible stores need)
    does not parse unquoted; the message gives the quoted override, which parses to the same value."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from forge_ml.search import check_override_syntax

    value = base + "?" + "&".join(f"{k}={v}" for k, v in query)
    with pytest.raises(ConfigError) as info:
        check_override_syntax([f"tune.storage_path={value}"])
    assert info.value.exit_code == 1
    hint = str(info.value).split(" in Hydra's grammar that is ", 1)[1].split("; the override grammar", 1)[0]
    assert hint == f"tune.storage_path='{value}'"
    check_override_syntax([hint])
    assert OverridesParser.create().parse_override(hint).value() == value
