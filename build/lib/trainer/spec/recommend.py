"""What to try next after a baseline evaluation: the fixes that apply, the simplest first, each with its numbers.

The guide orders the fixes by cost: first a prompt or tool-description change (evaluated against
the same held-out snapshot, no training); SFT for a format or a domain behaviour the model must be
shown; DPO once there are preferred and rejected answers; RL with verifiable rewards (GRPO) once
success can be checked by a program (or by a judge the reviewers agree with) and the model is
sometimes right, so that a group of rollouts holds successes to learn from. Its decision matrix
adds: a model that does not follow the format gets a prompt first, then SFT.

`recommend` reads an evaluation's overall and per-bucket metrics (`trainer.evaluate`'s report) and,
where the caller knows them, what the agent has (`AgentSignals`: preference pairs, whether a
programmatic verifier applies, a judge's agreement with reviewers, reviewed failures per bucket).
Each rule is a typed, overridable threshold of `RecommendationRules`. This module only reads
numbers: it launches nothing and needs no model (it is part of the torch-free face).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

PROMPT = "prompt"
SFT = "sft"
DPO = "dpo"
GRPO = "grpo"
NONE = "none"
# The guide's order, simplest first: options are listed in it.
ORDER = (PROMPT, SFT, DPO, GRPO)
# Failure buckets a clearer prompt or tool description can fix: the model chose or wrote the call badly.
PROMPT_BUCKETS = ("format_error", "wrong_tool", "hallucinated_api")


@dataclass(frozen=True)
class RecommendationRules:
    """Where each fix begins to apply; rates are shares of tasks (0..1)."""

    min_valid_json: float = field(
        default=0.5,
        metadata={"help": "Below this valid-JSON rate the model cannot yet emit the format: a prompt, then SFT."},
    )
    min_success_for_grpo: float = field(
        default=0.05,
        metadata={"help": "GRPO needs successes among its rollouts: below this correct-arguments rate, SFT instead."},
    )
    reliable_success: float = field(
        default=0.9,
        metadata={"help": "At or above this correct-arguments rate the model is reliable here: no fix recommended."},
    )
    prompt_invalid_share: float = field(
        default=0.1,
        metadata={"help": "A prompt change is offered when at least this share of outputs is not valid JSON ..."},
    )
    prompt_bucket_share: float = field(
        default=0.3,
        metadata={
            "help": "... or when at least this share of the reviewed failures (or of the evaluated tasks' buckets) "
            "is a format error, a wrong tool or a hallucinated API."
        },
    )
    min_pairs_for_dpo: int = field(
        default=20,
        metadata={
            "help": "DPO is offered from this many preference pairs of the agent (fewer overfit a handful of answers)."
        },
    )
    min_judge_agreement: float = field(
        default=0.8,
        metadata={
            "help": "Without a programmatic verifier, GRPO may use a judge only if its agreement with reviewers "
            "reaches this share."
        },
    )


@dataclass(frozen=True)
class AgentSignals:
    """What the agent has beyond the evaluation; the defaults say "nothing known"."""

    preference_pairs: int = 0
    verifier: bool = True  # a programmatic check of success applies (the tasks carry expected calls)
    judge_agreement: float | None = None  # the judge's agreement with reviewers' marks, where measured
    failure_buckets: Mapping[str, int] = field(default_factory=dict)  # reviewed failures per bucket slug


@dataclass(frozen=True)
class Option:
    """One fix that applies: the method, why, and the numbers it rests on."""

    method: str
    reason: str
    evidence: dict[str, Any]


@dataclass(frozen=True)
class Recommendation:
    """The fixes that apply, simplest first; `method`, `reason`, `evidence` are the first one's (or `none`)."""

    options: list[Option]

    @property
    def first(self) -> Option:
        return self.options[0]

    @property
    def method(self) -> str:
        return self.first.method

    @property
    def reason(self) -> str:
        return self.first.reason

    @property
    def evidence(self) -> dict[str, Any]:
        return self.first.evidence

    def to_json(self) -> dict[str, Any]:
        return {"method": self.method, "reason": self.reason, "evidence": self.evidence,
                "options": [asdict(option) for option in self.options]}  # fmt: skip


@dataclass(frozen=True)
class Inputs:
    """The numbers every rule reads, gathered once."""

    overall: Mapping[str, Any]
    by_bucket: Mapping[str, Any]
    signals: AgentSignals
    rules: RecommendationRules

    @property
    def valid(self) -> float:
        return _rate(self.overall, "valid_json_rate")

    @property
    def success(self) -> float:
        return _rate(self.overall, "correct_arguments_rate")

    def rates(self) -> dict[str, Any]:
        return {"valid_json_rate": self.overall.get("valid_json_rate"),
                "correct_arguments_rate": self.overall.get("correct_arguments_rate")}  # fmt: skip


def recommend(
    overall: Mapping[str, Any],
    rules: RecommendationRules | None = None,
    *,
    by_bucket: Mapping[str, Any] | None = None,
    signals: AgentSignals | None = None,
) -> Recommendation:
    """The fixes that apply to an evaluation (and the agent's signals), in the guide's order; `none` if reliable."""
    inputs = Inputs(overall, by_bucket or {}, signals or AgentSignals(), rules or RecommendationRules())
    if inputs.success >= inputs.rules.reliable_success:
        reliable = (
            f"already reliable on these tasks ({_shown(overall, 'correct_arguments_rate')} correct): add "
            "harder held-out tasks before changing anything"
        )
        return Recommendation([Option(NONE, reliable, inputs.rates())])
    found = [option for rule in RULES if (option := rule(inputs)) is not None]
    if not found:  # every training fix needs something the agent lacks; a prompt change needs nothing
        found = [
            Option(
                PROMPT,
                "no training signal applies yet (too few pairs, no trusted reward): a prompt "
                "or tool-description change is the fix within reach",
                inputs.rates(),
            )
        ]
    return Recommendation(sorted(found, key=lambda option: ORDER.index(option.method)))


def prompt_option(inputs: Inputs) -> Option | None:
    """A prompt or tool-description change, where the failures are of the kinds one can fix."""
    invalid = 1.0 - inputs.valid
    reviewed = _share(inputs.signals.failure_buckets, PROMPT_BUCKETS)
    evaluated = _share(_failed_per_bucket(inputs.by_bucket), PROMPT_BUCKETS)
    rules = inputs.rules
    evidence = {**inputs.rates(), "invalid_share": round(invalid, 4), "prompt_bucket_share_reviewed": reviewed,
                "prompt_bucket_share_evaluated": evaluated}  # fmt: skip
    if invalid >= rules.prompt_invalid_share:
        return Option(PROMPT, f"{invalid:.0%} of the outputs are not valid calls: state the call format in the "
                      "system prompt and evaluate the changed prompt on the same snapshot before training",
                      evidence)  # fmt: skip
    bucket_share = max(reviewed or 0.0, evaluated or 0.0)
    if bucket_share >= rules.prompt_bucket_share:
        return Option(
            PROMPT,
            f"{bucket_share:.0%} of the failures are format errors, wrong tools or hallucinated "
            "APIs: clearer tool descriptions or prompt rules may fix them without training",
            evidence,
        )
    return None


def sft_option(inputs: Inputs) -> Option | None:
    """SFT where the model seldom emits the format, or is almost never right (GRPO would see no successes)."""
    overall, rules = inputs.overall, inputs.rules
    if inputs.valid < rules.min_valid_json:
        return Option(SFT, f"valid-format rate is very low ({_shown(overall, 'valid_json_rate')}): teach the call "
                      "format with SFT; RL on a model that cannot emit it gets almost no reward signal",
                      inputs.rates())  # fmt: skip
    if inputs.success < rules.min_success_for_grpo:
        return Option(SFT, f"the format is mostly valid but calls are almost never right "
                      f"({_shown(overall, 'correct_arguments_rate')}): GRPO would see too few successful rollouts; "
                      "SFT on correct demonstrations first", inputs.rates())  # fmt: skip
    return None


def dpo_option(inputs: Inputs) -> Option | None:
    """DPO where the agent has enough preferred-and-rejected answers."""
    pairs, needed = inputs.signals.preference_pairs, inputs.rules.min_pairs_for_dpo
    if pairs < needed:
        return None
    return Option(DPO, f"{pairs} preference pairs (reviewers' corrections against what the agent did): DPO "
                  "teaches the preferred answer directly", {**inputs.rates(), "preference_pairs": pairs,
                                                            "min_pairs": needed})  # fmt: skip


def grpo_option(inputs: Inputs) -> Option | None:
    """GRPO where a trusted reward exists and the model is sometimes right."""
    signals, rules = inputs.signals, inputs.rules
    agreement = signals.judge_agreement
    trusted_judge = agreement is not None and agreement >= rules.min_judge_agreement
    if not (signals.verifier or trusted_judge) or inputs.success < rules.min_success_for_grpo:
        return None
    reward = "a programmatic verifier" if signals.verifier else f"the judge ({agreement:.0%} agreement with reviewers)"
    return Option(GRPO, f"sometimes right but unreliable ({_shown(inputs.overall, 'correct_arguments_rate')} "
                  f"correct) and success is checked by {reward}: GRPO can reinforce the successes it samples",
                  {**inputs.rates(), "verifier": signals.verifier, "judge_agreement": agreement})  # fmt: skip


RULES: tuple[Callable[[Inputs], Option | None], ...] = (prompt_option, sft_option, dpo_option, grpo_option)


def _failed_per_bucket(by_bucket: Mapping[str, Any]) -> dict[str, int]:
    """Evaluated tasks that failed (wrong arguments), per bucket of the tasks."""
    failed = {}
    for name, values in by_bucket.items():
        tasks = int((values or {}).get("tasks") or 0)
        failed[name] = round(tasks * (1.0 - _rate(values or {}, "correct_arguments_rate")))
    return failed


def _share(counts: Mapping[str, int], names: tuple[str, ...]) -> float | None:
    """The share of `counts` in the `names` buckets; None when there is nothing counted."""
    total = sum(int(count) for name, count in counts.items() if name)
    if total == 0:
        return None
    return round(sum(int(counts.get(name) or 0) for name in names) / total, 4)


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
