"""gate.py: the gate's decisions, McNemar, gold outcomes as tags, and the rule a gold score was
scored by; pure logic, no MLflow (tests/test_registry.py runs the gate on a real registry)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forge_ml.config.checks import Problems
from forge_ml.config.registry import GateConfig, RegistryConfig
from forge_ml.errors import ConfigError
from forge_ml.evaluation.report import EvalReport, ScoredExample
from forge_ml.evaluation.scorers import scoring_rule
from forge_ml.gate import GoldOutcome, _fig, decide, describe_gate, mcnemar_exact


def outcome(bits: str, cats: str | None = None, forbidden: int = 0, gold: str = "gold-1") -> GoldOutcome:
    """A gold outcome from its per-example bits; `cats` names each example's category by one letter."""
    cats = cats or "a" * len(bits)
    per_category = {}
    for cat in sorted(set(cats)):
        mine = [b for b, c in zip(bits, cats) if c == cat]
        per_category[cat] = mine.count("1") / len(mine)
    return GoldOutcome(bits.count("1") / len(bits), per_category, bits, forbidden, gold, len(bits))


def right(n: int, total: int = 20) -> str:
    return "1" * n + "0" * (total - n)


CATS = "a" * 10 + "b" * 10
GATE_CASES = {
    "improved": (
        right(16),
        right(14),
        GateConfig(),
        True,
        "gold accuracy 0.80 > champion 0.70 (a challenger must be better; min_delta 0.00)",
    ),
    "equal": (
        right(14),
        right(14),
        GateConfig(),
        False,
        "gold accuracy 0.70 ties champion 0.70: a tie is refused (a challenger must be better; min_delta 0.00)",
    ),
    "equal-with-a-tolerated-loss": (
        right(14),
        right(14),
        GateConfig(min_delta=-0.05),
        True,
        "gold accuracy 0.70 >= champion 0.70 + min_delta -0.05 (a loss of up to 0.05 accepted)",
    ),
    "better-by-min-delta": (
        right(15),
        right(14),
        GateConfig(min_delta=0.05),
        True,
        "gold accuracy 0.75 >= champion 0.70 + min_delta 0.05",
    ),
    "equal-min-delta": (
        right(14),
        right(14),
        GateConfig(min_delta=0.01),
        False,
        "gold accuracy 0.70 < champion 0.70 + min_delta 0.01",
    ),
    "worse": (
        right(13),
        right(14),
        GateConfig(),
        False,
        "gold accuracy 0.65 < champion 0.70 (a challenger must be better; min_delta 0.00)",
    ),
    "significance-not-met": (
        right(16),
        right(14),
        GateConfig(significance=0.05),
        False,
        "McNemar p=0.5 (b=2 candidate-only right, c=0 champion-only right) >= significance 0.05",
    ),
    "significance-met": (
        right(18),
        right(10),
        GateConfig(significance=0.05),
        True,
        "McNemar p=0.007812 (b=8 candidate-only right, c=0 champion-only right) < significance 0.05",
    ),
    "no-better-on-discordant-pairs": (
        "01" + right(12, 18),
        "10" + right(12, 18),
        GateConfig(significance=0.05),
        False,
        "not better on discordant pairs: McNemar p=1 (b=1",
    ),
    "category-regression": (
        "1111111100" + "1" * 10,  # a: 0.8, b: 1.0 -> 0.90 overall
        "1" * 10 + "1111000000",  # a: 1.0, b: 0.4 -> 0.70 overall
        GateConfig(max_category_drop=0.1),
        False,
        "category 'a' accuracy 0.80 < champion 1.00 (drop 0.20 > max_category_drop 0.10)",
    ),
    "category-within-bound": (
        "1111111110" + "1" * 10,
        "1" * 10 + "1111000000",
        GateConfig(max_category_drop=0.1),
        True,
        "gold accuracy 0.95 > champion 0.70",
    ),
    "uneven-figures": (
        right(19, 27),
        right(20, 27),
        GateConfig(),
        False,
        "gold accuracy 0.7037 < champion 0.7407",
    ),
}


@pytest.mark.parametrize(
    ("candidate", "champion", "gate", "promote", "reason"), list(GATE_CASES.values()), ids=list(GATE_CASES)
)
def test_gate_decisions(candidate, champion, gate, promote, reason):
    cats = CATS if len(candidate) == len(CATS) else None
    decision = decide(outcome(candidate, cats), outcome(champion, cats), gate)
    assert decision.promote is promote
    assert any(reason in r for r in decision.reasons), decision.reasons
    assert (decision.p_value is None) is (gate.significance is None)


@given(
    champion=st.integers(0, 40),
    candidate=st.integers(0, 40),
    n=st.integers(40, 60),
    min_delta=st.sampled_from([0.0, 0.01, 0.05, 0.2, -0.01, -0.05]),
)
@settings(max_examples=300, deadline=None)
def test_a_challenger_is_promoted_only_when_better_by_what_the_rule_asks(champion, candidate, n, min_delta):
    decision = decide(
        outcome(right(candidate, n)), outcome(right(champion, n)), GateConfig(min_delta=min_delta)
    )
    gain = (candidate - champion) / n
    assert decision.promote is (gain > 0 if min_delta == 0 else gain >= min_delta - 1e-9)
    if candidate == champion and min_delta >= 0:  # a tie never churns the registry
        assert not decision.promote
    (reason,) = decision.reasons
    assert reason.startswith(f"gold accuracy {_fig(candidate / n)} ") and _fig(champion / n) in reason


@pytest.mark.parametrize(
    ("gate", "words"),
    [
        (GateConfig(), ["strictly higher (a tie is refused)", "no forbidden output", "min_delta 0.00"]),
        (GateConfig(min_delta=0.05), ["higher by at least 0.05"]),
        (GateConfig(min_delta=-0.02), ["at most 0.02 lower"]),
        (GateConfig(significance=0.05, max_category_drop=0.1), ["McNemar", "p < 0.05", "more than 0.10"]),
    ],
)
def test_the_gate_rule_in_words(gate, words):
    text = describe_gate(gate)
    assert all(w in text for w in words), text
    assert ("McNemar" in text) is (gate.significance is not None)
    assert ("category" in text) is (gate.max_category_drop is not None)


def test_forbidden_output_refuses_even_a_first_version():
    better, champion = outcome(right(18), forbidden=2), outcome(right(10))
    refused = decide(better, champion, GateConfig())
    assert not refused.promote and "2 forbidden output(s) on gold" in refused.reasons
    assert not decide(better, None, GateConfig()).promote


def test_first_version_is_promoted():
    decision = decide(outcome(right(7)), None, GateConfig(min_delta=0.5, significance=0.01))
    assert decision.promote and decision.reasons == ["first version (gold accuracy 0.35)"]


def test_outcomes_on_different_gold_sets_are_never_compared():
    with pytest.raises(ConfigError, match="rebaseline") as err:
        decide(outcome(right(15)), outcome(right(10), gold="gold-2"), GateConfig())
    assert err.value.exit_code == 1


@pytest.mark.parametrize(
    ("b", "c", "p"),
    [(0, 0, 1.0), (10, 0, 2 / 1024), (0, 10, 2 / 1024), (5, 5, 1.0), (1, 0, 1.0), (8, 2, 0.109375)],
)
def test_mcnemar_exact_known_values(b, c, p):
    assert mcnemar_exact(b, c) == pytest.approx(p)
    assert mcnemar_exact(b, c) == mcnemar_exact(c, b)


def test_gold_outcome_from_report_and_tags_round_trip():
    items = [
        ScoredExample("take off", "a", "a", "takeoff", 1.0),
        ScoredExample("land", "b", "x", "land", 0.0),
        ScoredExample("land now", "b", "b", "land", 1.0),
        ScoredExample("hover", "c", "rm -rf", "hover", 0.0, forbidden="rm"),
    ]
    per_category = {"hover": {"accuracy": 0.0}, "land": {"accuracy": 0.5}, "takeoff": {"accuracy": 1.0}}
    report = EvalReport(0.5, 2, 4, 2, per_category, forbidden_count=1, items=items)
    gold = GoldOutcome.from_report(report, "abc123", "custom (scorer.py sha256 0123456789ab)")
    assert gold.outcomes == "1010" and gold.total == 4 and gold.forbidden_count == 1
    assert gold.per_category == {"hover": 0.0, "land": 0.5, "takeoff": 1.0}
    tags = gold.to_tags()
    assert tags["forge.gold_hash"] == "abc123" and tags["forge.gold_outcomes"] == "1010"
    assert tags["forge.gold_scoring"] == "custom (scorer.py sha256 0123456789ab)"
    assert GoldOutcome.from_tags(tags) == gold
    older = {
        k: v for k, v in tags.items() if k != "forge.gold_scoring"
    }  # a version of before the rule was kept
    assert GoldOutcome.from_tags(older) == replace(gold, scoring="")
    with pytest.raises(ConfigError, match=r"forge\.gold"):
        GoldOutcome.from_tags({"forge.gold_hash": "abc123"})


def test_registry_config_checks_ranges():
    p = Problems("registry")
    RegistryConfig(
        model_name="a/b", gate=GateConfig(min_delta=2.0, significance=0.0, max_category_drop=-0.1)
    ).check(p)
    joined = "\n".join(p.messages)
    for key in ("registry.model_name", "gate.min_delta", "gate.significance", "gate.max_category_drop"):
        assert key in joined
    ok = Problems("registry")
    RegistryConfig(gate=GateConfig(significance=0.05, max_category_drop=0.1)).check(ok)
    assert ok.messages == []


def test_outcomes_scored_under_different_rules_are_never_compared():
    """The same answers score higher under a partial-credit scorer.py than under `exact`: the gate
    refuses to compare them, naming both rules. A champion of before the rule was recorded ("")
    compares on its gold set alone."""
    exact, custom = "exact", "custom (scorer.py sha256 0123456789ab)"
    with pytest.raises(ConfigError) as err:
        decide(
            replace(outcome(right(15)), scoring=custom),
            replace(outcome(right(10)), scoring=exact),
            GateConfig(),
        )
    said = str(err.value)
    assert err.value.exit_code == 1 and f"scored by {custom}, the champion by {exact}" in said
    assert "forge-ml promote --rebaseline" in said
    same = decide(
        replace(outcome(right(15)), scoring=custom), replace(outcome(right(10)), scoring=custom), GateConfig()
    )
    assert same.promote
    older = decide(replace(outcome(right(15)), scoring=custom), outcome(right(10)), GateConfig())
    assert older.promote


CONFIGS = st.fixed_dictionaries(
    {
        "scorer": st.sampled_from(["exact", "json_cmd", "json_match", "custom"]),
        "json_field": st.sampled_from(["cmd", "action"]),
        "forbidden_outputs": st.lists(
            st.sampled_from(["(?i)as an ai", "rm -rf", "sorry"]), max_size=2, unique=True
        ),
        "body": st.sampled_from(["return 1.0", "return 0.5", "return float(expected == actual)"]),
    }
)


@given(a=CONFIGS, b=CONFIGS)
@settings(max_examples=200, deadline=None)
def test_two_scoring_rules_are_the_same_exactly_when_they_score_alike(a, b, tmp_path_factory):
    """Equal for configs that score every answer alike (the same scorer; the same field for json_cmd,
    the same scorer.py bytes for custom; the same forbidden patterns in any order); else different."""
    from forge_ml.config import EvalConfig

    def rule(c: dict) -> str:
        root = tmp_path_factory.mktemp("rule")
        (root / "scorer.py").write_text(f"def score(expected, actual):\n    {c['body']}\n")
        cfg = EvalConfig(
            scorer=c["scorer"], json_field=c["json_field"], forbidden_outputs=c["forbidden_outputs"]
        )
        return scoring_rule(cfg, root)

    def meaning(c: dict) -> tuple:
        own = {"json_cmd": c["json_field"], "custom": c["body"]}.get(c["scorer"])
        return c["scorer"], own, frozenset(c["forbidden_outputs"])

    assert (rule(a) == rule(b)) == (meaning(a) == meaning(b))
    assert rule(a).startswith(a["scorer"])
