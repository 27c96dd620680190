"""Which training method next, from a baseline evaluation, with the numbers behind the choice.

The guide's rule of thumb: when the model rarely emits a valid call, teach the format with
SFT first; when it is sometimes right but unreliable, GRPO (RL with verifiable rewards)
can sharpen it, because a group of rollouts then holds successes to learn from; when it
is right almost always, these tasks teach it nothing more. The thresholds are a typed,
overridable config. This module only reads an evaluation's overall metrics (the
`overall` block of `trainer.evaluate`'s report); it trains nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

SFT = "sft"
GRPO = "grpo"
NONE = "none"


@dataclass(frozen=True)
class RecommendationRules:
    """Where the guide's regimes begin; rates are shares of tasks (0..1)."""

    min_valid_json: float = field(default=0.5, metadata={
        "help": "Below this valid-JSON rate the model cannot yet emit the format: SFT first."})
    min_success_for_grpo: float = field(default=0.05, metadata={
        "help": "GRPO needs successes among its rollouts: below this correct-arguments rate, SFT first."})
    reliable_success: float = field(default=0.9, metadata={
        "help": "At or above this correct-arguments rate the model is reliable here: no training recommended."})


@dataclass(frozen=True)
class Recommendation:
    """The method to try next (`sft`, `grpo` or `none`), why, and the rates it rests on."""

    method: str
    reason: str
    evidence: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def recommend(overall: Mapping[str, Any], rules: RecommendationRules | None = None) -> Recommendation:
    """The recommendation for an evaluation's overall metrics."""
    rules = rules or RecommendationRules()
    valid = _rate(overall, "valid_json_rate")
    success = _rate(overall, "correct_arguments_rate")
    evidence = {"valid_json_rate": overall.get("valid_json_rate"),
                "correct_arguments_rate": overall.get("correct_arguments_rate")}
    if valid < rules.min_valid_json:
        return Recommendation(SFT, f"valid-format rate is very low ({_shown(overall, 'valid_json_rate')}): "
                              "teach the call format with SFT first; RL on a model that cannot emit it "
                              "gets almost no reward signal", evidence)
    if success < rules.min_success_for_grpo:
        return Recommendation(SFT, f"the format is mostly valid but calls are almost never right "
                              f"({_shown(overall, 'correct_arguments_rate')}): GRPO would see too few successful "
                              "rollouts; SFT on correct demonstrations first", evidence)
    if success < rules.reliable_success:
        return Recommendation(GRPO, f"sometimes right but unreliable ({_shown(overall, 'correct_arguments_rate')} "
                              "correct): GRPO can reinforce the successes it samples", evidence)
    return Recommendation(NONE, f"already reliable on these tasks ({_shown(overall, 'correct_arguments_rate')} "
                          "correct): add harder held-out tasks before training", evidence)


def _rate(overall: Mapping[str, Any], name: str) -> float:
    entry = overall.get(name) or {}
    value = entry.get("value")
    # A rate that could not be measured counts as zero: nothing shows the model can do it.
    return float(value) if value is not None else 0.0


def _shown(overall: Mapping[str, Any], name: str) -> str:
    entry = overall.get(name) or {}
    if entry.get("value") is None:
        return "not measured"
    return f"{entry['value']:.0%}, 95% CI {entry['low']:.0%}-{entry['high']:.0%}, n={entry['n']}"
