"""The promotion gate: may a candidate replace the champion? Pure logic on gold outcomes, no MLflow.

A `GoldOutcome` is one model's result on the gold set (overall, per category, per example); it
travels as `forge.gold_*` version tags. `decide` compares a candidate with the champion under the
`registry.gate` settings: a minimum accuracy gain, optionally an exact McNemar test on the
examples only one of them got right, and a bound on any category's drop.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from forge_ml.config.registry import GateConfig
from forge_ml.errors import ConfigError, describe

if TYPE_CHECKING:
    from forge_ml.evaluation.report import EvalReport

REBASELINE = "forge-ml promote --rebaseline"  # or `forge-ml flywheel --rebaseline`, before its rounds
EPS = 1e-9  # accuracies are means of floats: compare with a tolerance


def _fig(x: float) -> str:
    """Format a figure: two decimals when exact, else four (so close values stay distinguishable)."""
    return f"{x:.2f}" if abs(round(x, 2) - x) < EPS else f"{x:.4f}"


@dataclass
class GoldOutcome:
    """One model's result on the gold set: overall, per category, and per example ('1' = score >= 1)."""

    accuracy: float
    per_category: dict[str, float]
    outcomes: str
    forbidden_count: int
    gold_hash: str
    total: int
    scoring: str = ""  # evaluation.scorers.scoring_rule; "" on versions registered before it was recorded

    @classmethod
    def from_report(cls, report: EvalReport, gold_hash: str, scoring: str) -> GoldOutcome:
        return cls(
            accuracy=report.accuracy,
            per_category={name: stats["accuracy"] for name, stats in report.per_category.items()},
            outcomes="".join("1" if item.score >= 1.0 else "0" for item in report.items),
            forbidden_count=report.forbidden_count,
            gold_hash=gold_hash,
            total=report.total,
            scoring=scoring,
        )

    def to_tags(self) -> dict[str, str]:
        return {
            "forge.gold_hash": self.gold_hash,
            "forge.gold_accuracy": repr(float(self.accuracy)),
            "forge.gold_outcomes": self.outcomes,
            "forge.gold_per_category": json.dumps(self.per_category, sort_keys=True),
            "forge.gold_forbidden": str(self.forbidden_count),
        } | ({"forge.gold_scoring": self.scoring} if self.scoring else {})

    @classmethod
    def from_tags(cls, tags: dict[str, str]) -> GoldOutcome:
        try:
            outcomes = tags["forge.gold_outcomes"]
            return cls(
                accuracy=float(tags["forge.gold_accuracy"]),
                per_category={k: float(v) for k, v in json.loads(tags["forge.gold_per_category"]).items()},
                outcomes=outcomes,
                forbidden_count=int(tags["forge.gold_forbidden"]),
                gold_hash=tags["forge.gold_hash"],
                total=len(outcomes),
                scoring=tags.get("forge.gold_scoring", ""),
            )
        except (KeyError, ValueError) as exc:
            raise ConfigError(
                f"the version carries no valid forge.gold_* tags ({describe(exc)}); "
                f"re-baseline with `{REBASELINE}`"
            ) from None


@dataclass
class GateDecision:
    promote: bool
    reasons: list[str]
    p_value: float | None = None
    compared_to: str | None = None  # the champion version compared against


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value of b (candidate-only right) vs c (champion-only right)."""
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(b, c) + 1))
    return min(1.0, 2 * tail / 2**n)


def accuracy_rule(candidate: float, champion: float, min_delta: float) -> tuple[bool, str]:
    """Whether a challenger's gold accuracy beats the champion's, and the rule that decided.

    `min_delta` 0 (the default): strictly better; a tie is refused, so the registry does not fill
    with versions that are no better. Above 0: better by at least `min_delta`. Below 0: a loss of
    up to `-min_delta` is accepted (a tie passes).
    """
    a, c = _fig(candidate), _fig(champion)
    if abs(min_delta) < EPS:
        rule = f"a challenger must be better; min_delta {_fig(min_delta)}"
        if candidate > champion + EPS:
            return True, f"gold accuracy {a} > champion {c} ({rule})"
        if abs(candidate - champion) <= EPS:
            return False, f"gold accuracy {a} ties champion {c}: a tie is refused ({rule})"
        return False, f"gold accuracy {a} < champion {c} ({rule})"
    ok = candidate + EPS >= champion + min_delta
    note = "" if min_delta > 0 else f" (a loss of up to {_fig(-min_delta)} accepted)"
    return ok, f"gold accuracy {a} {'>=' if ok else '<'} champion {c} + min_delta {_fig(min_delta)}{note}"


def describe_gate(gate: GateConfig) -> str:
    """The gate's rule in words, as the registered model's description states it."""
    if abs(gate.min_delta) < EPS:
        rule = "a challenger becomes the champion only when its gold accuracy is strictly higher (a tie is refused)"
    elif gate.min_delta > 0:
        rule = f"a challenger becomes the champion only when its gold accuracy is higher by at least {_fig(gate.min_delta)}"
    else:
        rule = f"a challenger becomes the champion when its gold accuracy is at most {_fig(-gate.min_delta)} lower"
    parts = [rule, "it gives no forbidden output on gold"]
    if gate.significance is not None:
        parts.append(
            f"an exact McNemar test on the gold examples only one of the two got right gives p < {gate.significance:g}"
        )
    if gate.max_category_drop is not None:
        parts.append(f"no category's gold accuracy drops by more than {_fig(gate.max_category_drop)}")
    return "; ".join(parts) + f" (`registry.gate`: min_delta {_fig(gate.min_delta)})"


def version_origin(round_: str | None) -> str:
    """How a version's description begins: the flywheel round that made it, or "by hand"."""
    return f"round {round_}" if round_ else "by hand"


def version_summary(
    round_: str | None,
    candidate: GoldOutcome,
    champion: GoldOutcome | None,
    champion_number: str | None,
    decision: GateDecision,
) -> str:
    """One line for a version's description: "round 3 — gold 0.70 vs champion v2 0.76 — refused: ..."."""
    head = version_origin(round_)
    if champion is None:
        figures = f"gold {_fig(candidate.accuracy)}, no champion yet"
    else:
        figures = f"gold {_fig(candidate.accuracy)} vs champion v{champion_number} {_fig(champion.accuracy)}"
    verdict = "promoted" if decision.promote else "refused"
    return f"{head} — {figures} — {verdict}: {'; '.join(decision.reasons)}"


def decide(candidate: GoldOutcome, champion: GoldOutcome | None, gate: GateConfig) -> GateDecision:
    """Return whether `candidate` may replace `champion` under `gate`, with the figures behind it."""
    refusals: list[str] = []
    passes: list[str] = []
    if candidate.forbidden_count:
        refusals.append(f"{candidate.forbidden_count} forbidden output(s) on gold")
    if champion is None:
        passes.append(f"first version (gold accuracy {_fig(candidate.accuracy)})")
        return GateDecision(not refusals, refusals or passes)
    if candidate.gold_hash != champion.gold_hash or len(candidate.outcomes) != len(champion.outcomes):
        raise ConfigError(
            f"gold set {candidate.gold_hash[:12]} differs from the champion's {champion.gold_hash[:12]}; "
            f"outcomes on different gold sets cannot be compared (re-baseline with `{REBASELINE}`)"
        )
    if candidate.scoring and champion.scoring and candidate.scoring != champion.scoring:
        raise ConfigError(
            f"the candidate was scored by {candidate.scoring}, the champion by {champion.scoring}; "
            f"scores under different rules cannot be compared (re-baseline the champion under the "
            f"current eval.scorer with `{REBASELINE}`)"
        )
    ok, reason = accuracy_rule(candidate.accuracy, champion.accuracy, gate.min_delta)
    (passes if ok else refusals).append(reason)
    p_value = None
    if gate.significance is not None:
        pairs = list(zip(candidate.outcomes, champion.outcomes))
        b, c = pairs.count(("1", "0")), pairs.count(("0", "1"))
        p_value = mcnemar_exact(b, c)
        test = f"McNemar p={p_value:.4g} (b={b} candidate-only right, c={c} champion-only right)"
        if b <= c:
            refusals.append(f"not better on discordant pairs: {test}")
        elif p_value >= gate.significance:
            refusals.append(f"{test} >= significance {gate.significance:g}")
        else:
            passes.append(f"{test} < significance {gate.significance:g}")
    if gate.max_category_drop is not None:
        for name, before in sorted(champion.per_category.items()):
            after = candidate.per_category.get(name, 0.0)
            if before - after > gate.max_category_drop + EPS:
                refusals.append(
                    f"category {name!r} accuracy {_fig(after)} < champion {_fig(before)} "
                    f"(drop {_fig(before - after)} > max_category_drop {_fig(gate.max_category_drop)})"
                )
    return GateDecision(not refusals, refusals or passes, p_value)
